"""Conversion throughput: the single-process converter against grain.convert's executors.

Usage: uv run python benchmarks/convert.py [--records 60000] [--shards 16] [--workers 2]
       [--work 60] [--repeats 1] [--no-ray]

One corpus (JSON lines, `--records` records of about 100 bytes, in 4
files), one CPU-bound transform (pure Python work over each record's text,
`--work` rounds; it holds the GIL, so threads would not help), three ways:

- ``single_process``: what ``grain convert`` did before it had a plan: read
  every line, json.loads, the transform, pickle, and
  `grain_sources.write_array_record` into contiguous shards, in one process;
- ``local_workers_K``: ``grain.convert.convert(executor="local", workers=K)``;
- ``ray_K_cpus``: ``executor="ray"`` on a local Ray cluster of K CPUs started
  before the clock (its start-up is the separate ``ray_startup`` line: ray.init
  and the first task's round trip).

It runs in two phases of ``--repeats`` rounds: the single process and the
local executor in turn, then, with the Ray cluster up (its idle daemons share
the cores), the single process again (``single_process_beside_ray``) and Ray.
Each line is a case's median over its rounds (``seconds_all`` lists them):
records/s and MB/s (of the records read: the JSON lines' bytes), the wall
time and, for an executor, its speedup over the single process of its phase
(``reference``).
``ok`` says that the executors wrote the same bytes and the records read back
equal the single process's. JSON lines on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from typing import Any

from _bench_common import json_stdout

import grain
from grain.convert import convert
from grain_sources import write_array_record

RAY_ENV = {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled"}


def cpu_bound(row: dict, rounds: int = 60) -> dict:
    """Pure Python work over the record's text (a stand-in for tokenizing)."""
    text = row["text"]
    value = 0
    for round_ in range(rounds):
        for char in text:
            value = (value * 31 + ord(char) + round_) & 0xFFFFFFFF
    return {"id": row["id"], "text": text, "hash": value}


class _Work:
    """The transform with its number of rounds (picklable, by reference to this module)."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, row: dict) -> dict:
        return cpu_bound(row, self.rounds)


def _corpus(directory: str, records: int) -> int:
    os.makedirs(directory)
    per_file = -(-records // 4)
    size = 0
    for number in range(4):
        with open(os.path.join(directory, f"part-{number}.jsonl"), "w") as file:
            for i in range(number * per_file, min(records, (number + 1) * per_file)):
                line = json.dumps({"id": i, "text": f"document {i} " + "lorem ipsum " * 6})
                file.write(line + "\n")
                size += len(line) + 1
    return size


def _single_process(src: str, dest: str, shards: int, work: _Work) -> None:
    def records():
        for name in sorted(os.listdir(src)):
            with open(os.path.join(src, name), "rb") as file:
                for line in file:
                    yield work(json.loads(line))

    class Sized:  # a length, so that shards are contiguous, as the plan cuts them
        def __len__(self) -> int:
            return sum(1 for name in os.listdir(src) for _ in open(os.path.join(src, name), "rb"))

        def __iter__(self):
            return records()

    os.makedirs(os.path.dirname(dest))
    write_array_record(Sized(), dest, num_shards=shards, serializer="pickle", progress=False)


def _files(paths: list[str]) -> list[bytes]:
    out = []
    for path in paths:
        with open(path, "rb") as file:
            out.append(file.read())
    return out


def _records(pattern: str) -> list[bytes]:
    with grain.sources.ArrayRecordDataSource(pattern) as source:
        return [source[i] for i in range(len(source))]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=int, default=60, help="rounds of the transform")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of all cases (medians)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray cases")
    args = parser.parse_args()
    out = json_stdout()
    root = tempfile.mkdtemp(prefix="grain-convert-bench-")
    ray = None
    try:
        src = os.path.join(root, "in")
        size = _corpus(src, args.records)
        work = _Work(args.work)
        common = {"benchmark": "convert", "records": args.records, "shards": args.shards}

        # Two phases, each of rounds that run their cases in turn (a slower spell of the
        # shared VM touches them alike): the single process and the local executor, then,
        # with a Ray cluster up (its idle daemons share the cores), the single process
        # again and Ray. Each executor is compared with the single process of its phase.
        seconds: dict[str, list[float]] = {}
        ok: dict[str, bool] = {}
        reference = {}
        local_case = f"local_workers_{args.workers}"
        ray_case = f"ray_{args.workers}_cpus"
        local_shards: list[bytes] = []
        startup_s = 0.0
        for phase in ("local", "ray"):
            if phase == "ray":
                if args.no_ray:
                    break
                os.environ.update(RAY_ENV)  # before Ray is imported: it reads them once
                import ray

                start = time.perf_counter()
                ray.init(address="local", num_cpus=args.workers, include_dashboard=False,
                         log_to_driver=False)  # fmt: skip
                ray.get(ray.remote(lambda: None).remote())
                startup_s = time.perf_counter() - start
                line = {**common, "case": "ray_startup", "seconds": round(startup_s, 3), "ok": True}
                print(json.dumps(line), file=out, flush=True)
            single_case = "single_process" if phase == "local" else "single_process_beside_ray"
            reference[phase] = single_case
            for number in range(args.repeats):
                out_dir = os.path.join(root, f"{phase}{number}")
                start = time.perf_counter()
                _single_process(src, os.path.join(out_dir, "single/x"), args.shards, work)
                seconds.setdefault(single_case, []).append(time.perf_counter() - start)
                pattern = os.path.join(out_dir, "single/x") + f"@{args.shards}"
                single = [pickle.loads(r) for r in _records(pattern)]
                ok[single_case] = ok.get(single_case, True) and len(single) == args.records

                case = local_case if phase == "local" else ray_case
                start = time.perf_counter()
                result = convert(
                    src, os.path.join(out_dir, "x/x"), num_shards=args.shards,
                    workers=args.workers, transform=work, progress=False,
                    **({"executor": "ray"} if phase == "ray" else {}),
                )  # fmt: skip
                seconds.setdefault(case, []).append(time.perf_counter() - start)
                if phase == "local":
                    same = [pickle.loads(r) for r in _records(result.pattern)] == single
                    local_shards = _files(result.shards)
                else:
                    same = _files(result.shards) == local_shards
                ok[case] = ok.get(case, True) and same
                shutil.rmtree(out_dir, ignore_errors=True)

        for case, values in seconds.items():
            median = _median(values)
            line: dict[str, Any] = {
                **common,
                "case": case,
                "seconds": round(median, 3),
                "seconds_all": [round(v, 3) for v in values],
                "repeats": args.repeats,
                "records_per_s": args.records / median,
                "mb_per_s": size / 1e6 / median,
                "load_avg_1min": os.getloadavg()[0],  # the 2-core VM is shared
                "ok": ok[case],
            }
            phase = "ray" if case.startswith("ray_") else "local"
            if not case.startswith("single_"):
                single_s = _median(seconds[reference[phase]])
                line["reference"] = reference[phase]
                line["speedup_vs_single"] = single_s / median
                if phase == "ray":
                    line["with_startup_speedup"] = single_s / (median + startup_s)
            print(json.dumps(line), file=out, flush=True)
            print(f"convert: {case}: median {median:.2f} s of {values}", file=sys.stderr)
    finally:
        if ray is not None:
            ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
