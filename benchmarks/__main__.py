"""Every benchmark against its peers, in one run: ``uv run python -m benchmarks``.

Usage: uv run python -m benchmarks [--quick] [--only NAME[,NAME]] [--out DIR]
       [--venv DIR] [--torch-path DIR] [--note TEXT]

Runs each script of benchmarks/ (one after another, never two at once) and compares
each figure with its peer where it has one:

- upstream grain==0.2.18 (pipeline, packing, source_read, mp, llm_tokens, ...), in
  the throwaway venv that compare.py manages (~/.cache/grain-compare/venv-grain-0.2.18, created if
  missing); rounds interleave, ours then upstream, and each figure is the median
  over the rounds, as in compare.py;
- PyTorch's DataLoader (mp), from torch's CPU build installed beside the venv
  (``--torch-path``, default /tmp/torchlib, put on PYTHONPATH for that run only;
  torch never enters uv.lock); if torch cannot be imported its rows say "not run";
- the reference each script measures in the same run (numpy's permutation, the
  serial loop, the raw ArrayRecord reader, the pipeline over a list, statistics
  off, the plain `jax.device_put` loop).

It writes a markdown table (benchmark, case, our figure, the peer's, the ratio, the
target from `TARGETS`, met or not) and a PNG chart of the ratios. A full run writes
benchmarks/REPORT.md and benchmarks/report_ratios.png; ``--quick`` (small sizes, one
round, a smoke run) and ``--only`` write to benchmarks/results/ (git-ignored) unless
``--out`` says where. The raw results go to benchmarks/results/report-<time>.json.
Progress goes to stderr. Exit status: 0; 1 if a benchmark failed to run (its rows
say so and the report is still written); 3 if a correctness check failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import compare

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
REPORT_NAME = "REPORT.md"
CHART_NAME = "report_ratios.png"
DEFAULT_TORCH_PATH = Path("/tmp/torchlib")
UPSTREAM = f"upstream {compare.UPSTREAM_VERSION}"
TORCH = "PyTorch DataLoader"
# Scripts of benchmarks/ that are not benchmarks.
NOT_BENCHMARKS = {"compare", "__init__", "__main__", "tfdata_mnist"}


# --- sizes ---------------------------------------------------------------------------

# The arguments of each script, full and --quick; scripts compared round by round
# (ours then a peer's interpreter) take "--repeats 1" per run and ROUNDS rounds.
SIZES: dict[str, dict[str, list[str]]] = {
    "index_shuffle": {
        "full": ["--repeats", "7", "--size", "1000000", "--scalar-calls", "200000"],
        "quick": ["--repeats", "1", "--size", "100000", "--scalar-calls", "20000"],
    },
    "pipeline": {
        "full": ["--size", "100000", "--case-size", "filter_batch_tdefault=20000"],
        "quick": ["--size", "5000", "--case-size", "filter_batch_tdefault=2000"],
    },
    "source_read": {"full": ["--size", "20000"], "quick": ["--size", "2000"]},
    "array_record_read": {
        "full": ["--records", "100000", "--repeats", "3"],
        "quick": ["--records", "5000", "--repeats", "1"],
    },
    "packing": {"full": ["--size", "20000"], "quick": ["--size", "1000"]},
    "stats_overhead": {
        "full": ["--repeats", "9", "--size", "100000"],
        "quick": ["--repeats", "1", "--size", "10000"],
    },
    "mp": {
        "full": ["--batches", "100", "--transport-elements", "20000"],
        "quick": ["--batches", "10", "--transport-elements", "2000"],
    },
    "device_put": {
        "full": ["--repeats", "5", "--batches", "1000", "--steps", "200"],
        "quick": ["--repeats", "1", "--batches", "50", "--steps", "20", "--worker-batches", "30"],
    },
}
SIZES["latency_memory"] = {"full": ["--size", "60000"], "quick": ["--size", "5000"]}
SIZES["elastic"] = {
    "full": ["--repeats", "7", "--size", "200000", "--shards", "64"],
    "quick": ["--repeats", "1", "--size", "10000", "--shards", "64"],
}
SIZES["convert"] = {
    "full": ["--records", "40000", "--work", "60", "--repeats", "3"],
    "quick": ["--records", "4000", "--work", "10"],
}
# object_store starts moto and fake-gcs-server itself (SeaweedFS only by hand: --seaweed).
SIZES["object_store"] = {"full": ["--records", "2000"], "quick": ["--records", "200"]}
# Run on this interpreter and, where tools/freethreaded/test.sh made .venv-freethreaded
# in the checkout, on free-threaded CPython with the GIL off (~1-2 min each).
SIZES["freethreaded"] = {"full": ["--repeats", "5"], "quick": ["--quick"]}
# The 2-core sweep; on a bigger machine run jpeg.py itself with --threads/--workers.
SIZES["jpeg"] = {"full": ["--size", "3840"], "quick": ["--size", "512"]}
# Elements that wait 2 ms each (a sleep), 8 and 16 threads: 48 batches, three rounds of
# 16 readers for MapDataset.batch.
SIZES["waiting"] = {"full": ["--size", "6144"], "quick": ["--size", "1024"]}
# ray_tier starts a two-node Ray cluster on this machine itself (~1 min on 2 cores).
SIZES["ray_tier"] = {
    "full": ["--batches", "48", "--repeats", "3"],
    "quick": ["--batches", "8", "--repeats", "1"],
}
SIZES["user_source"] = {
    "full": ["--size", "60000", "--repeats", "5"],
    "quick": ["--size", "5000", "--repeats", "1"],
}
SIZES["token_mix"] = {
    "full": ["--tokens", "100000000", "--repeats", "5"],
    "quick": ["--tokens", "5000000", "--repeats", "1"],
}
SIZES["token_budget"] = {
    "full": ["--repeats", "5", "--size", "20000"],
    "quick": ["--repeats", "1", "--size", "2000"],
}
SIZES["streaming_sources"] = {
    "full": ["--rows", "100000", "--repeats", "3"],
    "quick": ["--rows", "10000", "--repeats", "1"],
}
SIZES["stage_chain"] = {
    "full": ["--size", "200000"],
    "quick": ["--size", "20000"],
}
SIZES["llm_tokens"] = {
    "full": ["--documents", "3000"],
    "quick": ["--documents", "400"],
}
FREETHREADED_VENV = BENCHMARKS.parent / ".venv-freethreaded"
ROUNDS = {"full": 3, "quick": 1}
ROUND_BY_ROUND = (
    "pipeline",
    "source_read",
    "packing",
    "mp",
    "latency_memory",
    "jpeg",
    "waiting",
    "user_source",
    "llm_tokens",
    "stage_chain",
)


# --- targets -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """What a figure must reach: `on` the ratio to the peer or on our own figure."""

    on: str  # "ratio" or "ours"
    op: str  # ">=" or "<="
    value: float
    label: str
    source: str

    def met(self, row: Row) -> bool | None:
        figure = row.ratio if self.on == "ratio" else row.ours
        if figure is None or math.isnan(figure):
            return None
        return figure >= self.value if self.op == ">=" else figure <= self.value


# The targets stated in benchmarks/README.md, matched (fnmatch, first match wins)
# against "benchmark/case@peer", where peer is the row's `peer_id`.
TARGETS: dict[str, Target] = {
    "index_shuffle/vectorized*@numpy": Target(
        "ratio", ">=", 0.5, ">= 0.5x numpy", "index shuffle issue (2)"
    ),
    "index_shuffle/scalar*": Target("ours", ">=", 500_000, ">= 500 000 calls/s", "issue 2"),
    "pipeline/filter_batch_tdefault@upstream": Target(
        "ratio", ">=", 10.0, ">= 10x upstream", "Dataset API issue"
    ),
    "pipeline/*@upstream": Target("ratio", ">=", 2.0, ">= 2x upstream", "Dataset API issue"),
    "packing/*@upstream": Target("ratio", ">=", 2.0, ">= 2x upstream", "packing"),
    "array_record_read/source_getitems_*@raw_reader": Target(
        "ratio", ">=", 0.5, ">= 0.5x raw reader", "ArrayRecord reading"
    ),
    "array_record_read/pipeline_files_*@in_memory": Target(
        "ratio", ">=", 0.8, ">= 0.8x over a list", "ArrayRecord reading"
    ),
    "elastic/throughput_*@plain": Target(
        "ratio", ">=", 0.9, ">= 0.9x plain sharded pipeline", "elastic issue (21)"
    ),
    "stats_overhead/decode@stats_off": Target(
        "ratio", ">=", 1 / 1.05, "cost <= 5 % (>= 0.952x)", "per-stage statistics"
    ),
    "mp/grain_workers_2@serial": Target("ratio", ">=", 1.8, ">= 1.8x serial", "grain-mp issue"),
    "mp/grain_workers_2@torch": Target("ratio", ">=", 1.1, ">= 1.1x PyTorch", "grain-mp issue"),
    "mp/first_batch_workers_2@*": Target("ours", "<=", 0.15, "<= 0.15 s", "grain-mp issue"),
    "mp/transport_150kb_workers_2@*": Target(
        "ours", ">=", 5000.0, ">= 5 000 MB/s", "grain-mp issue"
    ),
    "latency_memory/first_batch_t0_computed@*": Target(
        "ours", "<=", 64, "<= 2 batches", "speed issue (1)"
    ),
    # With threads, elements that wait (these sleep 2 ms) get every thread allowed from
    # the first chunk on (issue 31), so the read-ahead works ahead as upstream's does:
    # what must hold is the time to the first batch (below) and no more work than upstream.
    "latency_memory/first_batch_tdefault_computed@*": Target(
        "ratio", ">=", 1.0, "<= upstream's count", "speed issue (1), issue 31"
    ),
    "latency_memory/first_batch_t*@upstream": Target(
        "ratio", ">=", 1.0, "<= upstream's time", "speed issue (1)"
    ),
    "latency_memory/large_150kb_t0@upstream": Target(
        "ratio", ">=", 1.0, ">= 1x upstream", "speed issue (2)"
    ),
    "latency_memory/mnist_arrays_batch_map_*@numpy_loop": Target(
        "ratio", ">=", 0.5, ">= 0.5x numpy loop", "speed issue (3)"
    ),
    "latency_memory/mnist_arrays_batch_map_*@tf_batch_then_map": Target(
        "ratio", ">=", 5.0, ">= 5x tf.data's best", "speed issue (3)"
    ),
    "latency_memory/mnist_*map_batch_*@tf_per_element": Target(
        "ratio", ">=", 3.0, ">= 3x tf.data per element", "speed issue (3)"
    ),
    "latency_memory/ar_pipeline_t0@raw_bulk": Target(
        "ratio", ">=", 0.8, ">= 0.8x raw bulk read", "speed issue (3)"
    ),
    "token_mix/*_tokens_window_1e6@*": Target(
        "ours", "<=", 0.5, "<= 0.5 % deviation", "LLM data issue (33 section 1)"
    ),
    "convert/*@single": Target(
        "ratio", ">=", 1.7, ">= 1.7x single process", "cluster conversion issue (22)"
    ),
    "freethreaded/pure_python_threads_2 (*GIL off)@threads_1": Target(
        "ratio", ">=", 1.8, ">= 1.8x 1 thread", "free-threading issue (30)"
    ),
    "freethreaded/transport_150kb_threads_2*@processes": Target(
        "ratio", ">=", 5.0, ">= 5x processes", "free-threading issue (30)"
    ),
    "freethreaded/first_batch_*": Target("ours", "<=", 0.05, "<= 0.05 s", "issue 30"),
    "jpeg/*batch_w0_t2@t0": Target(
        "ratio", ">=", 1.8, ">= 1.8x 0 threads", "many-cores issue (31)"
    ),
    "jpeg/*_w0_t2@upstream": Target("ratio", ">=", 1.0, ">= upstream", "many-cores issue (31)"),
    "waiting/*@upstream": Target("ratio", ">=", 1.0, ">= upstream", "many-cores issue (31)"),
    "waiting/*@ideal": Target("ratio", ">=", 0.7, ">= 0.7x T threads waiting", "issue 31"),
    "device_put/throughput@plain_loop": Target(
        "ratio", ">=", 0.9, ">= 0.9x plain loop", "grain-jax device_put"
    ),
    "user_source/batch_map_t0@numpy_loop": Target(
        "ratio", ">=", 0.4, ">= 0.4x numpy loop", "speed issue 31 (2)"
    ),
}


# Why a target is not met, where benchmarks/README.md explains it (shown under the
# table for rows that miss their target).
KNOWN: dict[str, str] = {
    "array_record_read/pipeline_files_*": (
        "the C++ ArrayRecordReader alone costs 2.7-3.9 us per record and holds the GIL, "
        "so even a free source would reach 0.06-0.15x the in-memory pipeline "
        "(README: ArrayRecord reading)"
    ),
    "mp/grain_workers_2@torch": (
        "on 2 cores 2x serial is the physical limit and PyTorch reaches 1.79-1.94x "
        "serial, so 1.1x PyTorch is not reachable on this machine (README: mp.py)"
    ),
    "device_put/throughput@*": (
        "the plain loop varies 1 100-2 800 batches/s from run to run on this VM; the "
        "target was met in two of three runs (README: device_put.py)"
    ),
    "jpeg/*batch_w0_t2@t0": (
        "0 threads stack as the elements come since this target was set (1.2x upstream's "
        "0 threads); 2 threads match plain threads without grain in the same run, and "
        "the 2-core VM's CPU per image moves by 12% from process to process "
        "(README: jpeg.py)"
    ),
    "freethreaded/*": (
        "2 cores shared with whatever else runs: worker threads scale only on free cores; "
        "see the CPU ms per element in the script's lines (README: freethreaded.py)"
    ),
    "mp/*": (
        "2 cores shared by the parent, the workers and any other process: under load "
        "the worker figures drop first (README: mp.py)"
    ),
}


def known_reason(row: Row) -> str:
    key = f"{row.benchmark}/{row.case}@{row.peer_id}"
    for pattern, reason in KNOWN.items():
        if fnmatch.fnmatchcase(key, pattern):
            return reason
    return ""


def target_for(benchmark: str, case: str, peer_id: str) -> Target | None:
    key = f"{benchmark}/{case}@{peer_id}"
    for pattern, target in TARGETS.items():
        if fnmatch.fnmatchcase(key, pattern):
            return target
    return None


# --- rows ----------------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    """One line of the report: our figure against one peer's.

    `ratio` is how many times better ours is: ours / peer for rates
    (`higher_is_better`), peer / ours for times; it is computed from the two figures
    unless the benchmark measured it (e.g. as a median of per-round ratios).
    """

    benchmark: str
    case: str
    unit: str
    ours: float | None
    peer_id: str = ""
    peer: str = ""
    peer_value: float | None = None
    higher_is_better: bool = True
    ratio: float | None = None
    ok: bool | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.ratio is None and self.ours and self.peer_value:
            if self.higher_is_better:
                self.ratio = self.ours / self.peer_value
            else:
                self.ratio = self.peer_value / self.ours

    @property
    def target(self) -> Target | None:
        return target_for(self.benchmark, self.case, self.peer_id)

    @property
    def met(self) -> bool | None:
        target = self.target
        return None if target is None else target.met(self)

    def as_json(self) -> dict[str, Any]:
        line = dataclasses.asdict(self)
        target = self.target
        line["target"] = None if target is None else target.label
        line["met"] = self.met
        return line


# --- running the scripts ----------------------------------------------------------------


class BenchmarkError(RuntimeError):
    """A benchmark script failed, timed out or printed something that is not JSON."""


def log(message: str) -> None:
    print(f"benchmarks: {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Context:
    """Where and how the scripts run."""

    quick: bool
    cwd: Path
    upstream_python: str | None = None
    upstream_missing: str = ""
    torch_env: dict[str, str] | None = None
    torch_missing: str = ""
    tf_python: str | None = None
    tf_missing: str = ""
    freethreaded_python: str | None = None
    timeout_s: float = 1800.0
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def profile(self) -> str:
        return "quick" if self.quick else "full"

    def sizes(self, benchmark: str) -> list[str]:
        return list(SIZES[benchmark][self.profile])

    @property
    def rounds(self) -> int:
        return ROUNDS[self.profile]

    def ours_env(self) -> dict[str, str]:
        return dict(os.environ)

    def run(
        self, script: str, arguments: Sequence[str], side: str = "ours"
    ) -> tuple[list[dict[str, Any]], float]:
        """One run of benchmarks/<script>.py: its JSON lines and its wall time."""
        if side == "upstream":
            if self.upstream_python is None:
                raise BenchmarkError(f"upstream not available: {self.upstream_missing}")
            python, env = self.upstream_python, compare._clean_env()
        elif side == "tf":
            if self.tf_python is None:
                raise BenchmarkError(f"tensorflow not available: {self.tf_missing}")
            python, env = self.tf_python, compare._clean_env()
        elif side == "freethreaded":
            if self.freethreaded_python is None:
                raise BenchmarkError(f"no free-threaded interpreter at {FREETHREADED_VENV}")
            python, env = self.freethreaded_python, {**self.ours_env(), "PYTHON_GIL": "0"}
        elif side == "torch":
            if self.torch_env is None:
                raise BenchmarkError(f"torch not available: {self.torch_missing}")
            python, env = sys.executable, self.torch_env
        else:
            python, env = sys.executable, self.ours_env()
        command = [python, str(BENCHMARKS / f"{script}.py"), *arguments]
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                cwd=self.cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
            )
        except subprocess.TimeoutExpired as error:
            raise BenchmarkError(f"timed out after {self.timeout_s:.0f} s: {command}") from error
        elapsed = time.perf_counter() - start
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        if done.returncode != 0:
            raise BenchmarkError(
                f"{script} ({side}) exited with status {done.returncode}; stderr ends:\n{tail}"
            )
        lines = []
        for text in done.stdout.splitlines():
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError as error:
                raise BenchmarkError(
                    f"{script} ({side}) printed a non-JSON line: {text!r}"
                ) from error
        if not lines:
            raise BenchmarkError(f"{script} ({side}) printed no JSON lines; stderr ends:\n{tail}")
        self.runs.append(
            {
                "script": script,
                "side": side,
                "arguments": list(arguments),
                "wall_s": round(elapsed, 2),
                "lines": lines,
            }
        )
        return lines, elapsed


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _per_round(ratios: Sequence[float]) -> str:
    """The note of a ratio taken as the median of per-round ratios (so it can differ
    from the ratio of the median figures)."""
    if len(ratios) < 2:
        return ""
    return "median of per-round ratios " + ", ".join(f"{ratio:.2f}" for ratio in ratios)


def _by_case(runs: list[list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    cases: dict[str, list[dict[str, Any]]] = {}
    for lines in runs:
        for line in lines:
            if "case" in line:
                cases.setdefault(line["case"], []).append(line)
    return cases


def _rounds(
    ctx: Context,
    script: str,
    arguments: Sequence[str],
    rounds: int,
    ours_side: str = "ours",
    ours_arguments: Sequence[str] = (),
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    """Interleaved runs, ours then upstream; upstream's list is empty if it is missing."""
    ours: list[list[dict[str, Any]]] = []
    upstream: list[list[dict[str, Any]]] = []
    for round_ in range(1, rounds + 1):
        lines, ours_s = ctx.run(script, [*arguments, *ours_arguments], ours_side)
        ours.append(lines)
        walls = f"ours {ours_s:.1f} s"
        if ctx.upstream_python is not None:
            lines, upstream_s = ctx.run(script, arguments, "upstream")
            upstream.append(lines)
            walls += f", upstream {upstream_s:.1f} s"
        log(f"  {script} round {round_}/{rounds}: {walls}")
    return ours, upstream


def _check_sides(ours: list[list[dict[str, Any]]], upstream: list[list[dict[str, Any]]]) -> None:
    sides = {line.get("implementation") for lines in ours for line in lines}
    if sides != {"ours"}:
        raise BenchmarkError(f"our runs report implementation {sorted(map(str, sides))}")
    sides = {line.get("implementation") for lines in upstream for line in lines}
    if upstream and sides != {"upstream"}:
        raise BenchmarkError(f"upstream's runs report implementation {sorted(map(str, sides))}")


def _rate(lines: list[dict[str, Any]]) -> float:
    """A case's elements per second over its rounds, from the median time."""
    return lines[0]["elements"] / statistics.median(line["median_s"] for line in lines)


def _versus_upstream(ctx: Context, benchmark: str, unit: str) -> list[Row]:
    """Rows of a script that runs under both implementations (compare.py's protocol)."""
    arguments = [*ctx.sizes(benchmark), "--repeats", "1"]
    ours, upstream = _rounds(ctx, benchmark, arguments, ctx.rounds)
    _check_sides(ours, upstream)
    return _versus_upstream_rows(ctx, benchmark, unit, ours, upstream)


def _versus_upstream_rows(
    ctx: Context,
    benchmark: str,
    unit: str,
    ours: list[list[dict[str, Any]]],
    upstream: list[list[dict[str, Any]]],
) -> list[Row]:
    """One row per case of interleaved rounds: ours against upstream's median."""
    ours_cases, upstream_cases = _by_case(ours), _by_case(upstream)
    rows = []
    for case, lines in ours_cases.items():
        ours_rate = _rate(lines)
        ours_ok = all(line.get("ok", False) for line in lines)
        peer_lines = upstream_cases.get(case, [])
        if not peer_lines:
            why = ctx.upstream_missing or "the case is missing from upstream's output"
            rows.append(
                Row(
                    benchmark,
                    case,
                    unit,
                    ours_rate,
                    "upstream",
                    UPSTREAM,
                    ok=ours_ok,
                    note=f"upstream not run: {why}",
                )
            )
            continue
        if len(peer_lines) != len(lines):
            raise BenchmarkError(f"{benchmark}/{case} is missing from some rounds")
        summary, ratio = compare._summarise((case, None), lines, peer_lines)
        note = "same output as upstream" if summary.get("same_digest") else ""
        rows.append(
            Row(
                benchmark,
                case,
                unit,
                ours_rate,
                "upstream",
                UPSTREAM,
                _rate(peer_lines),
                ratio=ratio,
                ok=summary["ours_ok"] and summary["upstream_ok"],
                note=note,
            )
        )
    return rows


# --- the benchmarks -------------------------------------------------------------------


def bench_index_shuffle(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("index_shuffle", ctx.sizes("index_shuffle"))
    rows = []
    for line in lines:
        case = line["case"]
        if "rounds" in line and case.startswith("scalar"):
            case += f" (rounds={line['rounds']})"
        elif "n" in line and case.startswith("vectorized"):
            case += f" (n={line['n']:.0e})".replace("e+0", "e").replace("e+", "e")
        unit = line.get("unit", "elements/s")
        if case.startswith("scalar"):
            # Scalar calls have no like-for-like peer: the target is a rate.
            rows.append(Row("index_shuffle", case, unit, line["rate"], note="no peer"))
        else:
            rows.append(
                Row(
                    "index_shuffle",
                    case,
                    unit,
                    line["rate"],
                    "numpy",
                    "numpy permutation",
                    line["reference_rate"],
                    ratio=line["ratio"],
                )
            )
    return rows


def bench_pipeline(ctx: Context) -> list[Row]:
    return _versus_upstream(ctx, "pipeline", "elements/s")


def bench_streaming_sources(ctx: Context) -> list[Row]:
    """streaming_sources.py: each reader against the per-file reader (HF: HF itself)."""
    lines, _ = ctx.run("streaming_sources", ctx.sizes("streaming_sources"))
    cases = {line["case"]: line for line in lines}
    rows = []
    for case, line in cases.items():
        if case.startswith("read_") and case not in ("read_parquet_iter", "read_hf_raw"):
            peer = "read_hf_raw" if case.startswith("read_hf") else "read_parquet_iter"
            rows.append(
                Row(
                    "streaming_sources",
                    case,
                    "rows/s",
                    line["rows_per_s"],
                    peer,
                    "HF's own iteration" if peer == "read_hf_raw" else "ParquetIterDataset",
                    cases[peer]["rows_per_s"],
                    ok=True,
                )
            )
        elif case == "resize_sharded_parquet":
            rows.append(
                Row(
                    "streaming_sources",
                    case,
                    "ms to resume",
                    1000 * line["seconds"],
                    "restore_sharded_parquet",
                    "a restore on the same hosts",
                    1000 * cases["restore_sharded_parquet"]["seconds"],
                    higher_is_better=False,
                    ok=True,
                    note=f"4 hosts x 4 workers resumed on 1; state {line['state_bytes']} bytes; "
                    f"reads on at {line['rows_per_s']:,} rows/s",
                )
            )
        elif case.startswith("restore_") and case not in (
            "restore_hf_replay",
            "restore_parquet_iter",
        ):
            peer = "restore_hf_replay" if "hf" in case else "restore_parquet_iter"
            rows.append(
                Row(
                    "streaming_sources",
                    case,
                    "ms to resume",
                    1000 * line["seconds"],
                    peer,
                    "replaying" if "hf" in case else "ParquetIterDataset's restore",
                    1000 * cases[peer]["seconds"],
                    higher_is_better=False,
                    ok=True,
                    note=f"at row {line['at_row']}; peak {line['peak_python_mb']} MB Python, "
                    f"{line['arrow_mb']} MB Arrow",
                )
            )
    return rows


def bench_stage_chain(ctx: Context) -> list[Row]:
    return _versus_upstream(ctx, "stage_chain", "elements/s")


def bench_source_read(ctx: Context) -> list[Row]:
    return _versus_upstream(ctx, "source_read", "records/s")


def bench_packing(ctx: Context) -> list[Row]:
    return _versus_upstream(ctx, "packing", "tokens/s")


def bench_array_record_read(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("array_record_read", ctx.sizes("array_record_read"))
    cases = {line["case"]: line for line in lines if "case" in line}
    rows = []
    for order in ("sequential", "shuffled"):
        ours, peer = cases[f"source_getitems_{order}"], cases[f"raw_seek_read_{order}"]
        rows.append(
            Row(
                "array_record_read",
                f"source_getitems_{order}",
                "records/s",
                ours["records_per_s"],
                "raw_reader",
                "raw ArrayRecordReader seek+read",
                peer["records_per_s"],
                ok=ours["ok"] and peer["ok"],
            )
        )
        for threads in (0, 16):
            ours = cases[f"pipeline_ar_{order}_t{threads}"]
            peer = cases[f"pipeline_mem_{order}_t{threads}"]
            rows.append(
                Row(
                    "array_record_read",
                    f"pipeline_files_{order}_t{threads}",
                    "records/s",
                    ours["records_per_s"],
                    "in_memory",
                    "same pipeline over a list",
                    peer["records_per_s"],
                    ok=ours["ok"] and peer["ok"],
                )
            )
    return rows


def bench_stats_overhead(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("stats_overhead", ctx.sizes("stats_overhead"))
    return [
        Row(
            "stats_overhead",
            line["case"],
            "elements/s",
            line["on_elements_per_s"],
            "stats_off",
            "statistics off",
            line["off_elements_per_s"],
            ratio=line["off_median_s"] / line["on_median_s"],
            ok=line["ok"],
            note=f"cost {line['cost']:+.1%}",
        )
        for line in lines
    ]


def bench_elastic(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("elastic", ctx.sizes("elastic"))
    rows = []
    for line in lines:
        if line["case"].startswith("throughput_"):
            rows.append(
                Row(
                    "elastic",
                    line["case"],
                    "elements/s",
                    line["elastic_elements_per_s"],
                    "plain",
                    "ds[0::4].to_iter_dataset().batch(32)",
                    line["plain_elements_per_s"],
                    ratio=line["ratio"],
                    ok=line["ok"],
                )
            )
        else:
            state = line["case"] == "state_bytes"
            rows.append(
                Row(
                    "elastic",
                    f"state_bytes_{line['shards']}_shards"
                    if state
                    else f"restore_{line['old_shards']}_to_{line['new_shards']}",
                    "bytes" if state else "ms",
                    line["after_resizes_max_bytes" if state else "to_first_batch_median_ms"],
                    higher_is_better=False,
                    ok=line["ok"],
                    note=f"fresh {line['fresh_bytes']} B; after 2 resizes"
                    if state
                    else f"set_state {line['set_state_median_ms']} ms",
                )
            )
    return rows


def bench_mp(ctx: Context) -> list[Row]:
    arguments = [*ctx.sizes("mp"), "--repeats", "1"]
    with_torch = ctx.torch_env is not None
    ours_runs, upstream_runs = _rounds(
        ctx,
        "mp",
        arguments,
        ctx.rounds,
        ours_side="torch" if with_torch else "ours",
        ours_arguments=["--torch"] if with_torch else [],
    )
    ours, upstream = _by_case(ours_runs), _by_case(upstream_runs)

    def median(cases: dict[str, list[dict[str, Any]]], case: str, field: str) -> float | None:
        return _median([line[field] for line in cases.get(case, []) if field in line])

    def ok(*groups: list[dict[str, Any]]) -> bool:
        return all(line.get("ok", False) for group in groups for line in group)

    upstream_note = "" if upstream else f"upstream not run: {ctx.upstream_missing}"
    torch_note = "" if with_torch else f"not run: {ctx.torch_missing}"
    rows = []
    for workers in (0, 1, 2):
        case = f"grain_workers_{workers}"
        rows.append(
            Row(
                "mp",
                case,
                "batches/s",
                median(ours, case, "batches_per_s"),
                "serial",
                "serial loop (same run)",
                median(ours, "serial_loop", "batches_per_s"),
                ratio=median(ours, case, "speedup_vs_serial"),
                ok=ok(ours.get(case, []), ours["serial_loop"]),
                note=_per_round([line["speedup_vs_serial"] for line in ours.get(case, [])]),
            )
        )
    w2 = ours["grain_workers_2"]
    torch_lines = [line for line in ours.get("torch_dataloader_workers_2", []) if "ok" in line]
    per_round = [
        g["batches_per_s"] / t["batches_per_s"] for g, t in zip(w2, torch_lines, strict=False)
    ]
    rows.append(
        Row(
            "mp",
            "grain_workers_2",
            "batches/s",
            median(ours, "grain_workers_2", "batches_per_s"),
            "torch",
            f"{TORCH}, 2 workers",
            _median([t["batches_per_s"] for t in torch_lines]),
            ratio=_median(per_round),
            ok=ok(w2, torch_lines) if torch_lines else None,
            note=torch_note or _per_round(per_round),
        )
    )
    rows.append(
        Row(
            "mp",
            "grain_workers_2",
            "batches/s",
            median(ours, "grain_workers_2", "batches_per_s"),
            "upstream",
            f"{UPSTREAM}, 2 workers",
            median(upstream, "grain_workers_2", "batches_per_s"),
            ok=ok(w2, upstream.get("grain_workers_2", [])) if upstream else None,
            note=upstream_note,
        )
    )
    first = median(ours, "grain_workers_2", "first_batch_s")
    rows.append(
        Row(
            "mp",
            "first_batch_workers_2",
            "s",
            first,
            "torch",
            f"{TORCH}, 2 workers",
            _median([t["first_batch_s"] for t in torch_lines]),
            higher_is_better=False,
            ok=ok(w2, torch_lines) if torch_lines else None,
            note=torch_note,
        )
    )
    rows.append(
        Row(
            "mp",
            "first_batch_workers_2",
            "s",
            first,
            "upstream",
            f"{UPSTREAM}, 2 workers",
            median(upstream, "grain_workers_2", "first_batch_s"),
            higher_is_better=False,
            ok=ok(w2, upstream.get("grain_workers_2", [])) if upstream else None,
            note=upstream_note,
        )
    )
    transport = "transport_150kb_workers_2"
    copy = median(ours, transport, "numpy_copy_mb_per_s")
    rows.append(
        Row(
            "mp",
            transport,
            "MB/s",
            median(ours, transport, "mb_per_s"),
            "upstream",
            f"{UPSTREAM}, 2 workers",
            median(upstream, transport, "mb_per_s"),
            ok=ok(ours[transport], upstream.get(transport, [])),
            note=upstream_note or (f"numpy copy {_number(copy, 'MB/s')} MB/s" if copy else ""),
        )
    )
    return rows


def _latency_rows(case: str, ours: list[dict[str, Any]], peer: list[dict[str, Any]]) -> list[Row]:
    """The rows of one latency_memory case against upstream (or ours alone)."""
    done = [line for line in peer if "skipped" not in line]
    ok = all(line.get("ok", False) for line in ours)
    if case.startswith("first_batch"):
        seconds = _median([line["median_s"] for line in ours])
        peer_seconds = _median([line["median_s"] for line in done]) if done else None
        computed = max(line["computed"] for line in ours)
        peer_computed = max(line["computed"] for line in done) if done else None
        return [
            Row(
                "latency_memory",
                case,
                "s",
                seconds,
                "upstream",
                UPSTREAM,
                peer_seconds,
                higher_is_better=False,
                ok=ok,
            ),
            Row(
                "latency_memory",
                f"{case}_computed",
                "elements",
                computed,
                "upstream",
                UPSTREAM,
                peer_computed,
                higher_is_better=False,
                ok=ok,
                note="elements computed 0.1 s after the first batch of 32",
            ),
        ]
    rate = _median([line["rate"] for line in ours])
    peer_rate = _median([line["rate"] for line in done]) if done else None
    note = "" if done or not peer else f"upstream: {peer[0]['skipped'][:80]}"
    unit = ours[0]["unit"]
    return [
        Row("latency_memory", case, unit, rate, "upstream", UPSTREAM, peer_rate, ok=ok, note=note)
    ]


def bench_latency_memory(ctx: Context) -> list[Row]:
    arguments = [*ctx.sizes("latency_memory"), "--repeats", "1"]
    ours_runs, upstream_runs = _rounds(ctx, "latency_memory", arguments, ctx.rounds)
    _check_sides(ours_runs, upstream_runs)
    ours, upstream = _by_case(ours_runs), _by_case(upstream_runs)
    rows: list[Row] = []
    for case, lines in ours.items():
        if case in ("mnist_numpy_loop", "ar_raw_bulk"):
            continue  # references, in the rows below
        rows += _latency_rows(case, lines, upstream.get(case, []))
    rate = {case: _median([line.get("rate") for line in lines]) for case, lines in ours.items()}
    ok = {case: all(line.get("ok", False) for line in lines) for case, lines in ours.items()}
    for case in ours:
        if case.startswith("mnist_arrays_batch_map"):
            rows.append(
                Row(
                    "latency_memory",
                    case,
                    "images/s",
                    rate[case],
                    "numpy_loop",
                    "hand-written numpy loop",
                    rate["mnist_numpy_loop"],
                    ok=ok[case],
                )
            )
        if case == "ar_pipeline_t0":
            rows.append(
                Row(
                    "latency_memory",
                    case,
                    "records/s",
                    rate[case],
                    "raw_bulk",
                    "raw ArrayRecordReader read(indices)",
                    rate["ar_raw_bulk"],
                    ok=ok[case],
                )
            )
    try:
        size = ctx.sizes("latency_memory")[1]
        lines, _ = ctx.run("tfdata_mnist", ["--size", size, "--repeats", str(ctx.rounds)], "tf")
        tf_rate = {line["case"]: line["rate"] for line in lines}
        tf_note = ""
    except BenchmarkError as error:
        tf_rate, tf_note = {}, f"tf.data not run: {str(error).splitlines()[0][:120]}"
    for case in ours:
        peers = []
        if case.startswith("mnist_arrays_batch_map"):
            peers.append(("tf_batch_then_map", "tf.data batch-then-map, AUTOTUNE"))
        if "map_batch" in case and not case.startswith("mnist_arrays_batch_map"):
            peers.append(("tf_per_element", "tf.data per-element map, AUTOTUNE"))
        for peer_id, label in peers:
            rows.append(
                Row(
                    "latency_memory",
                    case,
                    "images/s",
                    rate[case],
                    peer_id,
                    label,
                    tf_rate.get(peer_id),
                    ok=ok[case],
                    note=tf_note,
                )
            )
    return rows


def bench_device_put(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("device_put", ctx.sizes("device_put"))
    cases = {line["case"]: line for line in lines}
    ours, plain = cases["device_put"], cases["plain_loop"]
    sleep, plain_sleep = cases["consumer_sleep_5ms"], cases["plain_loop_sleep_5ms"]
    numpy_work = cases["consumer_numpy_5ms"]
    return [
        Row(
            "device_put",
            "throughput",
            "batches/s",
            ours["batches_per_s"],
            "plain_loop",
            "jax.device_put loop",
            plain["batches_per_s"],
            ratio=ours["ratio_vs_plain"],
            ok=ours["ok"] and plain["ok"],
            note=_per_round(ours.get("round_ratios", [])),
        ),
        Row(
            "device_put",
            "step_consumer_sleep_5ms",
            "ms",
            sleep["step_ms"],
            "plain_loop",
            "consumer transferring itself",
            plain_sleep["step_ms"],
            higher_is_better=False,
            ok=sleep["ok"] and plain_sleep["ok"],
        ),
        Row(
            "device_put",
            "step_consumer_numpy_5ms",
            "ms",
            numpy_work["step_ms"],
            "work_alone",
            "the 5 ms of work alone",
            numpy_work["work_alone_ms"],
            higher_is_better=False,
            ok=numpy_work["ok"],
        ),
    ]


def bench_convert(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("convert", ctx.sizes("convert"))
    cases = {line["case"]: line for line in lines}
    rows = []
    for case, line in cases.items():
        if case.startswith(("local_workers_", "ray_")) and case != "ray_startup":
            # The single process measured in the same phase (beside Ray's daemons for Ray).
            single = cases[line.get("reference", "single_process")]
            rows.append(
                Row(
                    "convert",
                    case,
                    "records/s",
                    line["records_per_s"],
                    "single",
                    "single-process converter (same run)",
                    single["records_per_s"],
                    ok=line["ok"] and single["ok"],
                    note=f"{line['mb_per_s']:.2f} MB/s, single {single['mb_per_s']:.2f} MB/s",
                )
            )
    if "ray_startup" in cases:
        rows.append(
            Row(
                "convert",
                "ray_startup",
                "s",
                cases["ray_startup"]["seconds"],
                higher_is_better=False,
                ok=cases["ray_startup"]["ok"],
                note="ray.init(num_cpus=2) and a first task's round trip",
            )
        )
    return rows


def bench_ray_tier(ctx: Context) -> list[Row]:
    """mp_prefetch on 2 Ray actors against 1 local worker, 2 local workers and Ray Data."""
    lines, _ = ctx.run("ray_tier", ctx.sizes("ray_tier"))
    cases = {line["case"]: line for line in lines}
    rows = []
    ray = cases.get("ray_2")
    if ray is None:
        return rows
    for peer_case, peer_name in (
        ("local_1", "1 local worker process (same run)"),
        ("local_2", "2 local worker processes (same run)"),
        ("ray_data_2", "Ray Data iter_batches (same run)"),
    ):
        peer = cases[peer_case]
        rows.append(
            Row(
                "ray_tier",
                "ray_2_actors",
                "batches/s",
                ray["batches_per_s"],
                peer_case,
                peer_name,
                peer["batches_per_s"],
                ok=ray["ok"] and peer["ok"],
                note=f"first batch {ray['first_batch_s']:.2f} s, "
                f"{peer_case} {peer['first_batch_s']:.2f} s",
            )
        )
    # Past the start (actors take seconds to start, processes fork): the steady state.
    local = cases["local_1"]
    rows.append(
        Row(
            "ray_tier",
            "ms_per_batch_after_first",
            "ms",
            ray["ms_per_batch_after_first"],
            "local_1",
            "1 local worker process (same run)",
            local["ms_per_batch_after_first"],
            higher_is_better=False,
            ok=ray["ok"] and local["ok"],
        )
    )
    light, light_local = cases["light_ray_2"], cases["light_local_2"]
    rows.append(
        Row(
            "ray_tier",
            "ms_per_batch_no_work",
            "ms",
            light["ms_per_batch_after_first"],
            "light_local_2",
            "2 local worker processes, no work (same run)",
            light_local["ms_per_batch_after_first"],
            higher_is_better=False,
            ok=light["ok"] and light_local["ok"],
            note=f"overhead {light['overhead_ms_per_batch']:.2f} ms per batch",
        )
    )
    return rows


def bench_object_store(ctx: Context) -> list[Row]:
    """Random reads from buckets against the C++ reader on the same files, locally.

    The local reader is the reference, not a target: a bucket costs a request per
    record (or per batch); the figures are for docs/sources.md.
    """
    lines, _ = ctx.run("object_store", ctx.sizes("object_store"))
    local = {line["case"]: line for line in lines if line.get("server_id") == "local"}
    rows = []
    for line in lines:
        case, server = line["case"], line.get("server_id")
        if case == "amplification":
            rows.append(
                Row(
                    "object_store",
                    f"amplification {line['format']}",
                    "bytes/byte",
                    line["bytes_per_byte"],
                    higher_is_better=False,
                    ok=line["ok"],
                    note="bytes moved per byte delivered, random records (moto)",
                )
            )
        elif case == "first_batch_s":
            rows.append(
                Row(
                    "object_store",
                    f"{server}_first_batch",
                    "s",
                    line["seconds"],
                    higher_is_better=False,
                    ok=line["ok"],
                    note=f"{line['server']}: open the footers, read a batch of 32",
                )
            )
        elif server != "local":
            peer = local.get(case.replace("_no_hash", ""))
            rows.append(
                Row(
                    "object_store",
                    f"{server}_{case}",
                    "records/s",
                    line["records_per_s"],
                    "local_cpp",
                    "C++ reader, local path (same run)",
                    None if peer is None else peer["records_per_s"],
                    ok=line["ok"] and (peer is None or peer["ok"]),
                    note=line["server"],
                )
            )
    return rows


def _freethreaded_rows(lines: list[dict[str, Any]]) -> list[Row]:
    """The rows of one run of freethreaded.py, named after its interpreter."""
    by_case = {line["case"]: line for line in lines}
    head = by_case["interpreter"]
    where = (
        f"{head['python']}{'t' if head['free_threaded_build'] else ''}, "
        f"GIL {'on' if head['gil_enabled'] else 'off'}"
    )
    rows = []
    for name in ("pure_python", "numpy", "jpeg"):
        two = by_case.get(f"map/{name}/threads_2")
        if two is None:
            continue
        for peer_case, peer_id, peer in (
            ("threads_1", "threads_1", "1 worker thread"),
            ("serial", "serial", "the pipeline alone"),
            ("processes_2", "processes", "2 worker processes"),
        ):
            other = by_case.get(f"map/{name}/{peer_case}")
            rows.append(
                Row(
                    "freethreaded",
                    f"{name}_threads_2 ({where})",
                    "elements/s",
                    two["elements_per_s"],
                    peer_id,
                    peer,
                    other["elements_per_s"] if other else None,
                    ok=two["ok"] and (other is None or other["ok"]),
                    note=f"CPU ms/element {two['cpu_ms_per_element']} (2 threads)"
                    + (f", {other['cpu_ms_per_element']} ({peer})" if other else ""),
                )
            )
    threads, processes = (by_case.get(f"transport_150kb/{k}_2") for k in ("threads", "processes"))
    if threads and processes:
        rows.append(
            Row(
                "freethreaded",
                f"transport_150kb_threads_2 ({where})",
                "MB/s",
                threads["mb_per_s"],
                "processes",
                "2 worker processes",
                processes["mb_per_s"],
                ok=threads["ok"] and processes["ok"],
            )
        )
    for kind in ("threads", "processes"):
        line = by_case.get(f"first_batch/{kind}_2")
        if line:
            spread = line["spread_ms"]
            rows.append(
                Row(
                    "freethreaded",
                    f"first_batch_{kind}_2 ({where})",
                    "s",
                    line["first_batch_s"],
                    higher_is_better=False,
                    ok=line["ok"],
                    note=f"{spread['min']}-{spread['max']} ms over {line['repeats']} iterators",
                )
            )
    return rows


def bench_jpeg(ctx: Context) -> list[Row]:
    """jpeg.py: each case against upstream's, and each thread count against 0 threads."""
    arguments = [*ctx.sizes("jpeg"), "--repeats", "1"]
    # Ours also runs plain threads without grain: what the machine allowed that round.
    ours, upstream = _rounds(ctx, "jpeg", arguments, ctx.rounds, ours_arguments=["--plain"])
    _check_sides(ours, upstream)
    grain_only = [[line for line in lines if line["shape"] != "plain"] for lines in ours]
    rows = _versus_upstream_rows(ctx, "jpeg", "images/s", grain_only, upstream)
    cases = _by_case(ours)
    for case, lines in cases.items():
        shape, workers, threads = case.split("_")
        base = cases.get(f"{shape}_{workers}_t0")
        if threads == "t0" or base is None:
            continue
        ratios = [b["median_s"] / line["median_s"] for line, b in zip(lines, base, strict=True)]
        rows.append(
            Row(
                "jpeg",
                case,
                "images/s",
                _rate(lines),
                "t0",
                "0 threads (same run)",
                _rate(base),
                ratio=statistics.median(ratios),
                ok=all(line["ok"] for line in lines + base),
                note=_per_round(ratios),
            )
        )
    return rows


def bench_waiting(ctx: Context) -> list[Row]:
    """waiting.py: each case against upstream's, and against T threads that always wait."""
    arguments = [*ctx.sizes("waiting"), "--repeats", "1"]
    ours, upstream = _rounds(ctx, "waiting", arguments, ctx.rounds)
    _check_sides(ours, upstream)
    rows = _versus_upstream_rows(ctx, "waiting", "elements/s", ours, upstream)
    for case, lines in _by_case(ours).items():
        first = statistics.median(line["first_batch_s"] for line in lines)
        rows.append(
            Row(
                "waiting",
                case,
                "elements/s",
                _rate(lines),
                "ideal",
                f"{lines[0]['read_threads']} threads each waiting {lines[0]['wait_ms']} ms",
                lines[0]["ideal_per_s"],
                ok=all(line["ok"] for line in lines),
                note=f"first batch {first:.3f} s",
            )
        )
    return rows


def bench_freethreaded(ctx: Context) -> list[Row]:
    """freethreaded.py on this interpreter and on free-threaded CPython (GIL off) if present."""
    lines, _ = ctx.run("freethreaded", ctx.sizes("freethreaded"))
    rows = _freethreaded_rows(lines)
    python = FREETHREADED_VENV / "bin" / "python"
    if python.exists():
        ctx.freethreaded_python = str(python)
        lines, _ = ctx.run("freethreaded", ctx.sizes("freethreaded"), "freethreaded")
        rows += _freethreaded_rows(lines)
    else:
        log(f"no {python}: tools/freethreaded/test.sh --co -q makes it; GIL build only")
    return rows


def bench_user_source(ctx: Context) -> list[Row]:
    ours_runs, upstream_runs = _rounds(ctx, "user_source", ctx.sizes("user_source"), ctx.rounds)
    _check_sides(ours_runs, upstream_runs)
    ours, upstream = _by_case(ours_runs), _by_case(upstream_runs)

    def median(lines: list[dict[str, Any]], field: str) -> float | None:
        return _median([line.get(field) for line in lines])

    loop = ours["numpy_loop"]
    rows = []
    for case, lines in ours.items():
        if case == "numpy_loop":
            continue  # the reference, in the rows below
        peer = upstream.get(case, [])
        theirs = median(peer, "ratio")
        note = f"{median(lines, 'overhead_us'):.2f} us/element above the loop; upstream " + (
            f"{theirs:.3f}x its loop" if theirs else f"not run: {ctx.upstream_missing}"
        )
        ok = all(line["ok"] for line in [*lines, *loop])
        rows.append(
            Row(
                "user_source",
                case,
                "elements/s",
                median(lines, "elements_per_s"),
                "numpy_loop",
                "hand-written numpy loop (same run)",
                median(loop, "elements_per_s"),
                ratio=median(lines, "ratio"),
                ok=ok,
                note=note,
            )
        )
        if peer:
            rows.append(
                Row(
                    "user_source",
                    case,
                    "elements/s",
                    median(lines, "elements_per_s"),
                    "upstream",
                    UPSTREAM,
                    median(peer, "elements_per_s"),
                    ok=ok and all(line["ok"] for line in peer),
                )
            )
    return rows


def bench_token_mix(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("token_mix", ctx.sizes("token_mix"))
    rows = []
    records = {
        (line["corpus"], line["window"]): line
        for line in lines
        if line["kind"] == "share" and line["mix"] == "map_records"
    }
    for line in lines:
        if line["kind"] == "share" and line["mix"] != "map_records":
            peer = records[(line["corpus"], line["window"])]
            window = f"1e{len(str(line['window'])) - 1}"
            rows.append(
                Row(
                    "token_mix",
                    f"{line['corpus']}_{line['mix']}_window_{window}",
                    "% max deviation",
                    100 * line["max_dev"],
                    "map_records",
                    "record weights (same run)",
                    100 * peer["max_dev"],
                    higher_is_better=False,
                    note=f"largest document {100 * line['largest_doc_share']:.2f} % of a window",
                )
            )
        elif line["kind"] == "throughput":
            rows.append(
                Row(
                    "token_mix",
                    f"throughput_{line['case']}",
                    "elements/s",
                    line["elements_per_s"],
                    line["reference"],
                    "the record-weighted mix (same run)",
                    line["reference_elements_per_s"],
                    ratio=line["ratio"],
                    note=f"first element {line['build_s']} s, {line['peak_mb']} MB",
                )
            )
    return rows


def bench_token_budget(ctx: Context) -> list[Row]:
    lines, _ = ctx.run("token_budget", ctx.sizes("token_budget"))
    cases = {line["case"]: line for line in lines}
    reference = cases["fixed_pad_max"]
    return [
        Row(
            "token_budget",
            case,
            "tokens/s",
            line["tokens_per_s"],
            "fixed_pad_max",
            "batch(8) padded to 2048 (same run)",
            reference["tokens_per_s"],
            ratio=line["ratio"],
            ok=line["ok"],
            note=f"padding {line['padding_fraction']:.1%}, {line['distinct_shapes']} shapes"
            + (
                f", restore {line['restore_ms_median']:.2f} ms"
                if "restore_ms_median" in line
                else ""
            ),
        )
        for case, line in cases.items()
        if case != "fixed_pad_max"
    ]


def bench_llm_tokens(ctx: Context) -> list[Row]:
    arguments = [*ctx.sizes("llm_tokens"), "--repeats", "1"]
    ours, upstream = _rounds(ctx, "llm_tokens", arguments, ctx.rounds)
    _check_sides(ours, upstream)
    rows = []
    ours_cases, upstream_cases = _by_case(ours), _by_case(upstream)
    for row in _versus_upstream_rows(ctx, "llm_tokens", "tokens/s", ours, upstream):
        lines, peer = ours_cases[row.case], upstream_cases.get(row.case, [])
        per_core = _median([line["tokens_per_s_per_core"] for line in lines])
        first = _median([line["first_batch_s"] for line in lines])
        text = f"{per_core:,.0f} tokens/s per core; first batch {first:.2f} s"
        row.note = "; ".join(filter(None, [text, row.note]))
        rows.append(row)
        # Per CPU second of the process and its workers: what a busy machine disturbs least.
        per_round = [
            mine["tokens_per_cpu_s"] / theirs["tokens_per_cpu_s"]
            for mine, theirs in zip(lines, peer, strict=False)
        ]
        rows.append(
            Row(
                "llm_tokens",
                f"{row.case}_per_cpu_s",
                "tokens/CPU-s",
                _median([line["tokens_per_cpu_s"] for line in lines]),
                "upstream",
                UPSTREAM,
                _median([line["tokens_per_cpu_s"] for line in peer]),
                ratio=_median(per_round),
                ok=row.ok,
                note=_per_round(per_round) or row.note,
            )
        )
    return rows


BENCHES: dict[str, Callable[[Context], list[Row]]] = {
    "index_shuffle": bench_index_shuffle,
    "pipeline": bench_pipeline,
    "source_read": bench_source_read,
    "array_record_read": bench_array_record_read,
    "packing": bench_packing,
    "stats_overhead": bench_stats_overhead,
    "elastic": bench_elastic,
    "mp": bench_mp,
    "latency_memory": bench_latency_memory,
    "device_put": bench_device_put,
    "convert": bench_convert,
    "object_store": bench_object_store,
    "ray_tier": bench_ray_tier,
    "freethreaded": bench_freethreaded,
    "jpeg": bench_jpeg,
    "waiting": bench_waiting,
    "user_source": bench_user_source,
    "token_mix": bench_token_mix,
    "token_budget": bench_token_budget,
    "llm_tokens": bench_llm_tokens,
    "stage_chain": bench_stage_chain,
    "streaming_sources": bench_streaming_sources,
}

PEERS = {
    "index_shuffle": "numpy",
    "pipeline": UPSTREAM,
    "source_read": UPSTREAM,
    "array_record_read": "raw reader, list",
    "packing": UPSTREAM,
    "stats_overhead": "statistics off",
    "elastic": "plain sharded pipeline",
    "mp": f"serial, {TORCH}, {UPSTREAM}",
    "device_put": "jax.device_put loop",
    "latency_memory": f"{UPSTREAM}, numpy loop, raw reader, tf.data",
    "convert": "single-process converter",
    "object_store": "C++ reader on local files",
    "ray_tier": "local worker processes, Ray Data",
    "freethreaded": "1 worker thread, the pipeline alone, worker processes",
    "jpeg": f"0 threads, {UPSTREAM}",
    "waiting": f"{UPSTREAM}, threads that always wait",
    "user_source": f"numpy loop, {UPSTREAM}",
    "token_mix": "record-weighted mix",
    "token_budget": "fixed-size batches",
    "llm_tokens": UPSTREAM,
    "stage_chain": UPSTREAM,
    "streaming_sources": "ParquetIterDataset, HF's own iteration",
}


def scripts_without_collector() -> list[str]:
    """Benchmark scripts in benchmarks/ that this entry point does not know."""
    names = {path.stem for path in BENCHMARKS.glob("*.py") if not path.stem.startswith("_")}
    return sorted(names - NOT_BENCHMARKS - set(BENCHES))


# --- the report -----------------------------------------------------------------------


def _number(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "ms":
        return f"{value:.2f} ms"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.2f}"


def _ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def _met(row: Row) -> str:
    met = row.met
    if row.target is None:
        return "—"
    if met is None:
        return "not measured"
    return "met" if met else "**not met**"


def _checks(row: Row) -> str:
    if row.ok is None:
        return "—"
    return "ok" if row.ok else "**FAILED**"


def render_table(rows: Sequence[Row]) -> str:
    """The markdown table of the rows."""
    header = (
        "| benchmark | case | unit | ours | peer | peer's figure | ratio | target | met "
        "| checks | note |"
    )
    lines = [header, "|" + "---|" * 11]
    for row in rows:
        target = row.target
        cells = [
            row.benchmark,
            row.case,
            row.unit,
            _number(row.ours, row.unit),
            row.peer or "—",
            _number(row.peer_value, row.unit) if row.peer else "—",
            _ratio(row.ratio),
            target.label if target else "—",
            _met(row),
            _checks(row),
            row.note.replace("|", "/").replace("\n", " "),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_chart(rows: Sequence[Row], path: Path) -> Path:
    """A horizontal bar chart of the rows' ratios (log scale), with their targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotted = [row for row in rows if row.ratio is not None and row.ratio > 0]
    height = max(3.0, 0.32 * len(plotted) + 1.5)
    figure, axes = plt.subplots(figsize=(10, height))
    try:
        labels, colours = [], []
        for row in plotted:
            label = f"{row.benchmark}/{row.case} vs {row.peer_id}"
            target = row.target
            if target is not None and target.on == "ours":
                label += f" [target on ours: {target.label}]"
            labels.append(label)
            met = row.met
            colours.append("#9e9e9e" if met is None else "#2e7d32" if met else "#c62828")
        positions = list(range(len(plotted)))[::-1]
        ratios = [row.ratio for row in plotted]
        axes.barh(positions, ratios, color=colours, height=0.7)
        for position, ratio in zip(positions, ratios, strict=True):
            axes.annotate(
                _ratio(ratio),
                (ratio, position),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
        for position, row in zip(positions, plotted, strict=True):
            target = row.target
            if target is not None and target.on == "ratio":
                axes.plot([target.value] * 2, [position - 0.42, position + 0.42], color="black")
        axes.axvline(1.0, color="#424242", linewidth=0.8, linestyle="--")
        axes.set_xscale("log")
        axes.set_yticks(positions, labels, fontsize=8)
        axes.set_xlabel("ratio (> 1: ours better; black tick: the target)")
        axes.set_title("grain benchmarks: ours against each peer (green met, red not met)")
        if plotted:
            low = min(min(ratios), 0.5)
            high = max(max(ratios), 2.0)
            axes.set_xlim(low / 1.5, high * 3)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
    return path


def render_report(rows: Sequence[Row], meta: dict[str, Any], chart_name: str) -> str:
    """The whole markdown report: conditions, the table, a summary and the chart."""
    targeted = [row for row in rows if row.target is not None]
    met = [row for row in targeted if row.met]
    missed = [row for row in targeted if row.met is False]
    unmeasured = [row for row in targeted if row.met is None]
    failed = [row for row in rows if row.ok is False]
    out = ["# Benchmark report", ""]
    command = meta.get("command", "uv run python -m benchmarks")
    if meta.get("note"):  # the note has its own line
        command = command.replace(meta["note"], "...")
    out.append(
        f"Generated by `{command}` on "
        f"{meta.get('started', '?')} (took {meta.get('duration_s', 0) / 60:.1f} min)."
    )
    out.append("")
    out.append("## Conditions")
    out.append("")
    for key, label in (
        ("machine", "Machine"),
        ("python", "Python"),
        ("upstream", "Upstream"),
        ("torch", "PyTorch"),
        ("load", "Load average (1 min) at each benchmark's start"),
        ("sizes", "Sizes"),
        ("note", "Note"),
    ):
        if meta.get(key):
            out.append(f"- {label}: {meta[key]}")
    out += [
        "",
        "Ratio: how many times better ours is than the peer: ours / peer for rates,",
        "peer / ours for times (s, ms), so > 1 always favours ours. Peers measured in",
        "the same script run (serial loop, raw reader, statistics off, ...) share its",
        "conditions; upstream and PyTorch runs interleave with ours, round by round,",
        "and each figure is the median over the rounds. `checks`: every run's output",
        "was verified by the benchmark itself (both sides where there are two).",
        "",
        "## Results",
        "",
        render_table(rows),
        f"Targets (from benchmarks/README.md): {len(met)} of {len(targeted)} met"
        + (f", {len(missed)} not met" if missed else "")
        + (f"; not measured: {', '.join(_row_name(r) for r in unmeasured)}" if unmeasured else "")
        + ".",
        "",
    ]
    if missed:
        out += ["Targets not met, with what benchmarks/README.md says about them:", ""]
        reasons: dict[str, list[str]] = {}
        for row in missed:
            reasons.setdefault(known_reason(row), []).append(_row_name(row))
        for reason, names in reasons.items():
            out.append(f"- {', '.join(names)}" + (f": {reason}." if reason else "."))
        out.append("")
    if failed:
        out += [f"Correctness checks FAILED: {', '.join(_row_name(r) for r in failed)}.", ""]
    for name, error in meta.get("errors", {}).items():
        out += [f"Benchmark `{name}` did not run: {error.splitlines()[0]}", ""]
    out += [f"![ratios of ours to each peer]({chart_name})", ""]
    return "\n".join(out)


def _row_name(row: Row) -> str:
    name = f"{row.benchmark}/{row.case}"
    return f"{name} vs {row.peer_id}" if row.peer_id else name


def write_report(rows: Sequence[Row], meta: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Writes REPORT.md and the ratio chart into `out_dir`; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chart = write_chart(rows, out_dir / CHART_NAME)
    report = out_dir / REPORT_NAME
    report.write_text(render_report(rows, meta, CHART_NAME))
    return report, chart


# --- main -----------------------------------------------------------------------------


def render_saved(saved: Path, out: Path | None) -> int:
    """Rewrites REPORT.md and the chart from the raw results of an earlier run."""
    data = json.loads(saved.read_text())
    meta = data["meta"]
    fields = {field.name for field in dataclasses.fields(Row)}
    rows = [Row(**{k: v for k, v in line.items() if k in fields}) for line in data["rows"]]
    partial = meta.get("partial", meta.get("sizes", "").startswith("quick"))
    report, chart = write_report(rows, meta, out or (RESULTS if partial else BENCHMARKS))
    log(f"rewrote {report} and {chart} from {saved}")
    return 0


def _find_upstream(ctx: Context, venv: Path) -> None:
    try:
        ctx.upstream_python = str(compare.ensure_venv(venv, False, ctx.cwd))
    except SystemExit as error:  # compare.py reports its failures by exiting
        ctx.upstream_missing = str(error) or "the venv could not be made"
        log(f"upstream grain not available: {ctx.upstream_missing}")


def _find_torch(ctx: Context, torch_path: Path) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(torch_path), os.environ.get("PYTHONPATH", "")])
    )
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, torch.utils.data; print(torch.__version__)"],
        cwd=ctx.cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0 or not torch_path.is_dir():
        ctx.torch_missing = f"torch is not importable from {torch_path}"
        log(f"{ctx.torch_missing}: the PyTorch rows say 'not run'")
        return "not run (not importable)"
    ctx.torch_env = env
    version = probe.stdout.strip()
    return f"torch {version} from PYTHONPATH={torch_path}"


def _find_tf(ctx: Context, tf_python: str) -> None:
    python = tf_python or ctx.upstream_python or ""
    probe = subprocess.run(
        [python or sys.executable, "-c", "import tensorflow"],
        cwd=ctx.cwd,
        env=compare._clean_env(),
        capture_output=True,
        text=True,
    )
    if not python or probe.returncode != 0:
        ctx.tf_missing = f"tensorflow does not import in {python or 'no interpreter'}"
        log(f"{ctx.tf_missing}: pip install tensorflow-cpu there, or pass --tf-python")
        return
    ctx.tf_python = python


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one round: a smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {list(BENCHES)}")
    parser.add_argument("--out", type=Path, default=None, help="where REPORT.md and the PNG go")
    parser.add_argument("--venv", type=Path, default=compare.DEFAULT_VENV)
    parser.add_argument("--torch-path", type=Path, default=DEFAULT_TORCH_PATH)
    parser.add_argument(
        "--tf-python",
        default="",
        help="an interpreter with tensorflow for the tf.data rows (default: the upstream "
        "venv's, if `pip install tensorflow-cpu` was run in it)",
    )
    parser.add_argument("--note", default="", help="a line on the conditions, for the report")
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="only rewrite the report from a results/report-*.json of an earlier run",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        return render_saved(args.render, args.out)
    names = [name for name in args.only.split(",") if name] or list(BENCHES)
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        parser.error(f"--only: unknown {unknown}; choose from {list(BENCHES)}")
    partial = args.quick or bool(args.only)
    out_dir = args.out or (RESULTS if partial else BENCHMARKS)
    for script in scripts_without_collector():
        log(f"warning: benchmarks/{script}.py has no collector here and is not in the report")

    started = datetime.datetime.now().astimezone()
    start = time.perf_counter()
    rows: list[Row] = []
    errors: dict[str, str] = {}
    loads = []
    with tempfile.TemporaryDirectory(prefix="grain-report-") as scratch:
        ctx = Context(quick=args.quick, cwd=Path(scratch))
        if any(name in ROUND_BY_ROUND for name in names):
            _find_upstream(ctx, args.venv)
        torch_line = _find_torch(ctx, args.torch_path) if "mp" in names else ""
        if "latency_memory" in names:
            _find_tf(ctx, args.tf_python)
        for number, name in enumerate(names, 1):
            load = _load()
            loads.append(f"{name} {load}")
            log(f"[{number}/{len(names)}] {name} against {PEERS[name]} (load {load}) ...")
            began = time.perf_counter()
            try:
                new = BENCHES[name](ctx)
                if not isinstance(new, list):
                    raise BenchmarkError(f"its collector returned {type(new).__name__}, not rows")
            except (BenchmarkError, KeyError, TypeError, ValueError) as error:
                message = f"{type(error).__name__}: {error}"
                errors[name] = message
                log(f"[{number}/{len(names)}] {name} FAILED: {message}")
                new = [Row(name, "(did not run)", "", None, note=message.splitlines()[0][:200])]
            rows += new
            log(
                f"[{number}/{len(names)}] {name} done in {time.perf_counter() - began:.0f} s "
                f"({len(new)} rows)"
            )
    duration = time.perf_counter() - start
    upstream = (
        f"grain=={compare.UPSTREAM_VERSION} in {args.venv}"
        if ctx.upstream_python
        else f"not run ({ctx.upstream_missing})"
    )
    given = list(sys.argv[1:] if argv is None else argv)
    profile = "quick" if args.quick else "full"
    sizes = "; ".join(
        f"{name} `{' '.join(SIZES[name][profile])}`"
        + (f" x {ROUNDS[profile]} round(s)" if name in ROUND_BY_ROUND else "")
        for name in names
    )
    meta = {
        "command": " ".join(["uv run python -m benchmarks", *given]),
        "started": started.strftime("%Y-%m-%d %H:%M %Z"),
        "duration_s": duration,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "upstream": upstream if ctx.upstream_python or ctx.upstream_missing else "",
        "torch": torch_line,
        "load": ", ".join(loads),
        "sizes": ("quick (a smoke run, not figures to quote): " if args.quick else "") + sizes,
        "note": args.note,
        "errors": errors,
        "partial": partial,
    }
    report, chart = write_report(rows, meta, out_dir)
    RESULTS.mkdir(parents=True, exist_ok=True)
    raw = RESULTS / f"report-{started.strftime('%Y%m%d-%H%M%S')}.json"
    rows_json = [row.as_json() for row in rows]
    raw.write_text(json.dumps({"meta": meta, "rows": rows_json, "runs": ctx.runs}, indent=1))
    log(f"wrote {report}, {chart} and {raw} in {duration / 60:.1f} min")
    sys.stdout.write(render_table(rows))
    if errors:
        return 1
    if any(row.ok is False for row in rows):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
