"""The Ray tier: mp_prefetch's workers on Ray actors against local workers and Ray Data.

Usage: uv run python benchmarks/ray_tier.py [--batches 48] [--work-ms 2] [--kb 12]
       [--repeats 3]

A two-node Ray cluster on this machine (``ray start --head --num-cpus=1`` and a
second ``ray start --address=... --num-cpus=1``, both on 127.0.0.1, 200 MB object
stores), started before the clock and stopped at the end. One pipeline: element i
is an array of ``--kb`` KB made by ``--work-ms`` ms of numpy work, batches of 32,
``--batches`` batches. Cases, one run of each in turn for ``--repeats`` rounds:

- ``local_1``, ``local_2``: ``mp_prefetch`` with 1 (2) local worker processes;
- ``ray_2``: ``mp_prefetch`` with ``executor=RayWorkers()``: 2 actors, one on each
  node (1 CPU each);
- ``ray_data_2``: the same work through Ray Data, ``ray.data.range(n)
  .map_batches(work, batch_size=32).iter_batches(batch_size=32)`` (the peer; its
  order is not the pipeline's, so only the set of elements is checked);
- ``light_local_2``, ``light_ray_2``: the same bytes with no work, to show the
  cost per batch that the tier adds to a local worker's (``overhead_ms_per_batch``
  on ``light_ray_2``: its time per batch minus ``light_local_2``'s).
- ``second_iter_{cold,pooled}``, ``restore_{cold,pooled}``: the light pipeline on 2
  actors; an iterator reads a batch and closes (or reads 3 batches and is
  restored with ``set_state``), then the clock runs from the second iterator's
  creation (the ``set_state``) to its last batch: ``cold`` with
  ``keep_actors_s=0`` (new actors each time, as before the pool), ``pooled``
  with the default (the first iterator's actors, reset). Idle actors are
  released after each run, untimed. The other Ray cases run with
  ``keep_actors_s=0``: their first batch includes the actors' start.

Each line: a case's median batches/s (from iter() to the last batch), time to the
first batch, time per batch after the first, the rounds, and ``ok``: the
pipeline cases give exactly the in-process stream, Ray Data every element once.
Load (``os.getloadavg``) is on each line: the 2 cores are shared. JSON lines on
stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

RAY_ENV = {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_AUTH_MODE": "disabled"}
os.environ.update(RAY_ENV)  # before Ray is imported: it reads them once

import grain  # noqa: E402
from grain_mp import RayWorkers  # noqa: E402

BATCH = 32
STORE_BYTES = 200 * 1000 * 1000


def make_element(index: int, work_ms: float, kb: int) -> np.ndarray:
    """About `work_ms` ms of numpy work, then `kb` KB whose first two bytes say `index`."""
    out = np.empty(kb * 1024, dtype=np.uint8)
    if work_ms > 0:
        rng = np.random.default_rng(index)
        noise = rng.standard_normal(8192, dtype=np.float32)
        deadline = time.perf_counter() + work_ms / 1000
        while time.perf_counter() < deadline:  # CPU work, not a sleep
            noise = np.tanh(noise * 1.1 + 0.1)
        out[:] = ((noise[0] + 1.0) * 100).astype(np.uint8)
    else:
        out[:] = 7
    out[0], out[1] = index % 256, (index // 256) % 256
    return out


def _index(element: np.ndarray) -> int:
    return int(element[0]) + 256 * int(element[1])


def _pipeline(n: int, work_ms: float, kb: int) -> grain.IterDataset:
    return (
        grain.MapDataset.range(n)
        .map(lambda i: make_element(i, work_ms, kb))
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .batch(BATCH)
    )


class _Node:
    def __init__(self, args: list[str]):
        # Ray gives a node 30 s to register (hard-coded): on 2 busy cores a second try helps.
        for _ in range(2):
            said = self._start(args)
            if not said:
                return
        raise SystemExit("`ray start` ended before it was ready:\n" + said[-3000:])

    def _start(self, args: list[str]) -> str:
        """Starts the node; "" once ready, else what `ray start` said before it ended."""
        command = os.path.join(os.path.dirname(sys.executable), "ray")
        self.process = subprocess.Popen(
            [command, "start", *args, "--num-cpus=1", "--node-ip-address=127.0.0.1",
             f"--object-store-memory={STORE_BYTES}", "--disable-usage-stats", "--block"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        said = []
        for line in self.process.stdout:  # type: ignore[union-attr]
            said.append(line)
            if "block forever" in line:
                return ""
        self.stop()
        return "".join(said) or "(nothing)"

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process.stdout.close()  # type: ignore[union-attr]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _timed(batches: Iterator[Any]) -> tuple[float, float, list[Any]]:
    """(seconds to the first batch, seconds in all, the batches), from the iterator's creation."""
    began = time.perf_counter()
    got = [next(batches)]
    first = time.perf_counter() - began
    got.extend(batches)
    return first, time.perf_counter() - began, got


def _grain_case(n: int, work_ms: float, kb: int, options: Any) -> Callable[[], tuple]:
    expected = [list(range(k, k + BATCH)) for k in range(0, n - n % BATCH, BATCH)]

    def run() -> tuple[float, float, bool]:
        ds = _pipeline(n, work_ms, kb)
        it = iter(ds.mp_prefetch(options))
        first, total, batches = _timed(it)
        it.close()
        ok = [[_index(row) for row in batch] for batch in batches] == expected
        return first, total, ok

    return run


def _reuse_case(n: int, kb: int, options: Any, restore: bool) -> Callable[[], tuple]:
    expected = [list(range(k, k + BATCH)) for k in range(0, n - n % BATCH, BATCH)]

    def run() -> tuple[float, float, bool]:
        ds = _pipeline(n, 0, kb)
        it = iter(ds.mp_prefetch(options))
        head = [next(it) for _ in range(3 if restore else 1)]
        if restore:
            state = it.get_state()
            began = time.perf_counter()
            it.set_state(state)
            got = [*head, next(it)]
            first = time.perf_counter() - began
            got.extend(it)
            total = time.perf_counter() - began
        else:
            it.close()
            first, total, got = _timed(iter(ds.mp_prefetch(options)))
            got = head + got
        it.close()
        RayWorkers.release_idle_actors()  # untimed: idle actors would hold the CPUs
        ok = [[_index(row) for row in batch] for batch in got] == (
            expected if restore else expected[:1] + expected
        )
        return first, total, ok

    return run


def _ray_data_case(ray: Any, n: int, work_ms: float, kb: int) -> Callable[[], tuple]:
    def work(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"x": np.stack([make_element(int(i), work_ms, kb) for i in batch["id"]])}

    def run() -> tuple[float, float, bool]:
        ds = ray.data.range(n).map_batches(work, batch_size=BATCH)
        first, total, batches = _timed(iter(ds.iter_batches(batch_size=BATCH)))
        seen = sorted(_index(row) for batch in batches for row in batch["x"])
        return first, total, seen == list(range(n))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=48)
    parser.add_argument("--work-ms", type=float, default=2.0)
    parser.add_argument("--kb", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.batches * BATCH
    root = tempfile.mkdtemp(prefix="rayb", dir="/tmp")  # short: Ray's socket paths live under it
    os.environ["RAY_TMPDIR"] = root
    port = _free_port()
    nodes: list[_Node] = []
    try:
        began = time.perf_counter()
        nodes.append(_Node(["--head", f"--port={port}", "--include-dashboard=false"]))
        nodes.append(_Node([f"--address=127.0.0.1:{port}"]))
        import ray
        import ray.data

        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        while sum(node["Alive"] for node in ray.nodes()) < 2:
            time.sleep(0.2)
        startup = time.perf_counter() - began
        print(f"two-node cluster up in {startup:.1f} s", file=sys.stderr)
        on_ray = RayWorkers(num_cpus=1, keep_actors_s=0)
        pooled = RayWorkers(num_cpus=1)
        cases: dict[str, Callable[[], tuple]] = {
            "local_1": _grain_case(n, args.work_ms, args.kb, grain.MultiprocessingOptions(1)),
            "local_2": _grain_case(n, args.work_ms, args.kb, grain.MultiprocessingOptions(2)),
            "ray_2": _grain_case(
                n, args.work_ms, args.kb, grain.MultiprocessingOptions(2, executor=on_ray)
            ),
            "ray_data_2": _ray_data_case(ray, n, args.work_ms, args.kb),
            "light_local_2": _grain_case(n, 0, args.kb, grain.MultiprocessingOptions(2)),
            "light_ray_2": _grain_case(
                n, 0, args.kb, grain.MultiprocessingOptions(2, executor=on_ray)
            ),
        }
        for name, workers in (("cold", on_ray), ("pooled", pooled)):
            options = grain.MultiprocessingOptions(2, executor=workers)
            cases[f"second_iter_{name}"] = _reuse_case(n, args.kb, options, restore=False)
            cases[f"restore_{name}"] = _reuse_case(n, args.kb, options, restore=True)
        runs: dict[str, list[tuple]] = {case: [] for case in cases}
        for round_ in range(args.repeats):
            for case, run in cases.items():
                runs[case].append(run())
                print(f"round {round_} {case}: {runs[case][-1]}", file=sys.stderr)
        per_batch = {}
        for case, results in runs.items():
            firsts = [r[0] for r in results]
            totals = [r[1] for r in results]
            after = [(r[1] - r[0]) / max(1, args.batches - 1) for r in results]
            per_batch[case] = statistics.median(after)
            line = {
                "benchmark": "ray_tier",
                "case": case,
                "batches_per_s": args.batches / statistics.median(totals),
                "first_batch_s": statistics.median(firsts),
                "ms_per_batch_after_first": 1000 * per_batch[case],
                "seconds_all": totals,
                "ok": all(r[2] for r in results),
                "work_ms": args.work_ms
                if case in ("local_1", "local_2", "ray_2", "ray_data_2")
                else 0,
                "kb": args.kb,
                "batches": args.batches,
                "cluster_startup_s": startup,
                "load": os.getloadavg()[0],
            }
            if case == "light_ray_2":
                line["overhead_ms_per_batch"] = 1000 * (
                    per_batch["light_ray_2"] - per_batch["light_local_2"]
                )
            print(json.dumps(line), flush=True)
    finally:
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
