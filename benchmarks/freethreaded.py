"""Worker threads against worker processes for mp_prefetch, on this interpreter, as JSON lines.

Usage: python -m benchmarks.freethreaded [--repeats 5] [--quick] [--executors threads,processes]
       (or python benchmarks/freethreaded.py ...)
       python -m benchmarks.freethreaded --table RUN.jsonl [RUN.jsonl ...]   # markdown table

Run it on each interpreter to compare (free-threaded CPython 3.13t with the GIL
off, the same with ``PYTHON_GIL=1``, a GIL build): every line names the
interpreter (``python``, ``gil_enabled``, ``free_threaded_build``). Each
executor is chosen with ``grain.config.update("py_worker_executor", kind)``
before its pipeline is built; both kinds run on every interpreter.

(a) Maps, elements/s over a whole pass (from iter() to the last element, so the
    workers' start is in it), for 0 workers (the pipeline alone, no mp_prefetch:
    the reference) and 1 and 2 workers of each executor::

        MapDataset.source(items).map(f).to_iter_dataset(ReadOptions(num_threads=0))
            .mp_prefetch(MultiprocessingOptions(num_workers=k))

    (no read threads in a worker, so a worker is one thread of work). `f`:
    ``pure_python``, an integer loop of ``PY_LOOP`` steps (~1-1.4 ms; CPU-bound
    Python, holds the GIL); ``numpy``, elementwise ufuncs on a 256x256 float32
    array (~1-1.5 ms; numpy releases the GIL in its loops); ``jpeg``, Pillow
    decoding one of 32 256x256 JPEGs (~33 KB each, made at start and carried in
    the source; ~1 ms). Also ``plain_threads_2``: the map over the items in 2
    plain threads, no grain: what this interpreter and the machine's load allow
    at that moment, so ``threads_2_vs_plain_threads_2`` is the library's share
    of a shortfall. Each returns its index and a small value, so the maps
    measure work, not transport (that is (b)).
(b) Transport: a map returning a ready 150 KB uint8 array (64 of them, made once
    per process), through 2 workers, the consumer reading the first and last
    byte of each (an index check); MB/s from the first element on, as in mp.py,
    for each executor and for the pipeline with no workers (the hand-off costs
    nothing there: the per-element cost of the pipeline itself).
(c) Time to the first batch: iter() to the first element of
    ``range.map(small).to_iter_dataset(...).batch(32).mp_prefetch(2 workers)``,
    median of ``--first-repeats`` fresh iterators per executor.
    Each map line also gives the CPU time per element (this process and its
    worker processes, from getrusage), a figure that load on the machine barely
    moves: if 2 workers cost the same CPU per element as 1, they scale on free cores.
(d) Memory: one untimed pass each of (b) and of the numpy map with 2 workers per
    executor, the proportional set size (PSS, /proc/<pid>/smaps_rollup) of this
    process and its descendants sampled every 20 ms: the peak, and the peak over
    what this process held before. The last line gives getrusage's ru_maxrss for
    the process and its largest child, over the whole run.

Repeats interleave: each repeat runs every case once, so a load change hits
every case alike; each figure is the median, with its min and max. Ratio lines
(``"case": "ratio/..."``) compare medians of the same run: 2 workers over 1 and
over the pipeline alone for each map and executor, threads over processes for
the maps and transport. Targets of issue 30 are on three of them: 2 threads >=
1.8x 1 thread for pure Python (``applies`` only where the GIL is off), threads
carry 150 KB arrays at >= 5x the processes' rate, first batch <= 50 ms.

Outputs are checked: each map pass must give every index once, in order, with
the values of the pipeline alone; a transport pass every array, in order.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import resource
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import grain

TRANSPORT_BYTES = 150 * 1024
READY_COUNT = 64
JPEG_COUNT = 32
JPEG_SIDE = 256
FIRST_BATCH = 32
EXECUTORS = ("threads", "processes")
MAPS = ("pure_python", "numpy", "jpeg")
# The loop of the pure-Python map: ~1.0 ms of CPU on CPython 3.11 here, ~1.2-1.4 ms
# on 3.13t (whose specializing interpreter is off in free-threaded builds).
PY_LOOP = 20_000


# --- the work ------------------------------------------------------------------------


def _pure_python(index: int) -> tuple[int, int]:
    # Only constants <= 256 in the loop: those are immortal. On 3.13t a larger int
    # constant of a code object loaded from a .pyc is not, and two threads loading it
    # fight over its reference count (this loop with 1103515245 and 0x7FFFFFFF ran
    # 1.26x faster on 2 threads than on 1 here, against 1.4-2x from source).
    acc = index
    for step in range(PY_LOOP):
        acc = (acc * 31 + step) % 251
    return index, acc


# Made on first use, by whichever thread comes first (two may both make it: harmless),
# and published whole: a worker thread never sees it half made.
_BASE: tuple[np.ndarray, ...] = ()


def _numpy(index: int) -> tuple[int, float]:
    global _BASE
    base = _BASE
    if not base:
        base = _BASE = (np.linspace(0.0, 1.0, 256 * 256, dtype=np.float32).reshape(256, 256),)
    array = base[0] + np.float32(index % 7)
    for _ in range(4):
        array = np.sqrt(np.abs(np.sin(array) * np.float32(1.5) + np.cos(array * np.float32(0.5))))
    return index, float(array[17, 31])


def _jpeg(item: tuple[int, bytes]) -> tuple[int, int]:
    from PIL import Image

    index, data = item
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image)
    if pixels.shape != (JPEG_SIDE, JPEG_SIDE, 3):
        raise ValueError(f"decoded a {pixels.shape} image, expected 256x256x3")
    return index, int(pixels[100, 100, 0]) + 256 * int(pixels[200, 50, 2])


def _make_jpegs() -> list[bytes]:
    from PIL import Image

    y, x = np.mgrid[0:JPEG_SIDE, 0:JPEG_SIDE]
    out = []
    for k in range(JPEG_COUNT):
        rng = np.random.default_rng(k)
        image = np.stack([x + k, y, (x + y) // 2], -1).astype(np.float32)
        image += rng.normal(0.0, 20.0, image.shape)
        buffer = io.BytesIO()
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
            buffer, format="JPEG", quality=90
        )
        out.append(buffer.getvalue())
    return out


_READY: tuple[np.ndarray, ...] = ()


def _ready_array(index: int) -> np.ndarray:
    """A ready 150 KB array (made once per process, published whole as `_BASE` is):
    transport alone is measured."""
    global _READY
    ready = _READY
    if not ready:
        ready = _READY = tuple(
            np.full(TRANSPORT_BYTES, k, dtype=np.uint8) for k in range(READY_COUNT)
        )
    return ready[index % READY_COUNT]


def _small(index: int) -> np.ndarray:
    return np.full(8, index, dtype=np.int64)


# --- pipelines -----------------------------------------------------------------------


def _pipeline(
    items: Sequence[Any], fn: Callable[[Any], Any], executor: str, workers: int, buffer: int = 1
) -> Any:
    ds = grain.MapDataset.source(items).map(fn).to_iter_dataset(grain.ReadOptions(num_threads=0))
    if not workers:
        return ds
    # The kind is read when mp_prefetch's stage is built.
    grain.config.update("py_worker_executor", executor)
    options = grain.MultiprocessingOptions(num_workers=workers)
    if buffer > 1:
        options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
    return ds.mp_prefetch(options)


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (and were waited for)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed_pass(ds: Any) -> tuple[float, float, float, list[Any]]:
    """Wall time of a whole pass (iter() included), time to its first element, CPU time
    (workers included: a pass waits for its worker processes to end), the elements."""
    cpu = _cpu_s()
    start = time.perf_counter()
    first = 0.0
    out = []
    for element in ds:
        if not out:
            first = time.perf_counter() - start
        out.append(element)
    wall = time.perf_counter() - start
    return wall, first, _cpu_s() - cpu, out


def _plain_threads_pass(
    items: Sequence[Any], fn: Callable[[Any], Any], workers: int
) -> tuple[float, float, float, list[Any]]:
    """`fn` over `items` in `workers` plain threads (no grain), as `_timed_pass` times it:
    what the interpreter and the machine allow at this moment."""
    parts: list[list[Any]] = [[] for _ in range(workers)]

    def work(w: int) -> None:
        parts[w].extend(fn(item) for item in items[w::workers])

    cpu = _cpu_s()
    start = time.perf_counter()
    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    out = [parts[i % workers][i // workers] for i in range(len(items))]
    return wall, 0.0, _cpu_s() - cpu, out


def _transport_pass(ds: Any, n: int) -> tuple[float, float, bool]:
    """Seconds from the first element to the last, time to the first, and the check."""
    begin = time.perf_counter()
    start = first = 0.0
    ok = True
    count = 0
    for i, array in enumerate(ds):
        if not i:
            start = time.perf_counter()
            first = start - begin
        # The consumer touches each array: its first and last byte name the element.
        k = i % READY_COUNT
        ok = ok and int(array[0]) == k and int(array[-1]) == k
        count += 1
    return time.perf_counter() - start, first, ok and count == n


# --- memory --------------------------------------------------------------------------


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                children = [int(c) for c in task.read_text().split()]
            except OSError:
                continue
            out += children
            todo += children
    return out


class _MemorySampler:
    """The peak PSS (KB) of this process and its descendants, sampled every `period` s."""

    def __init__(self, period: float = 0.02):
        self.period = period
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = os.getpid()
        return _pss_kb(me) + sum(_pss_kb(pid) for pid in _descendants(me))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, self._sample())
            self._stop.wait(self.period)

    def __enter__(self) -> _MemorySampler:
        self.before_kb = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# --- the run -------------------------------------------------------------------------


def _interpreter() -> dict[str, Any]:
    probe = getattr(sys, "_is_gil_enabled", None)
    return {
        "python": sys.version.split()[0],
        "gil_enabled": True if probe is None else bool(probe()),
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    }


class _Emitter:
    def __init__(self, out: Any, interpreter: dict[str, Any]):
        self._out = out
        self._interpreter = interpreter

    def __call__(self, line: dict[str, Any]) -> None:
        self._out.write(json.dumps({**line, **self._interpreter}) + "\n")
        self._out.flush()


def _spread(values: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, float]:
    return {
        "median": round(scale * statistics.median(values), digits),
        "min": round(scale * min(values), digits),
        "max": round(scale * max(values), digits),
    }


def _map_items(name: str, n: int, jpegs: list[bytes]) -> tuple[Sequence[Any], Callable]:
    if name == "pure_python":
        return range(n), _pure_python
    if name == "numpy":
        return range(n), _numpy
    return [(i, jpegs[i % len(jpegs)]) for i in range(n)], _jpeg


def _run_maps(args: argparse.Namespace, emit: _Emitter, jpegs: list[bytes] | None) -> dict:
    """Every map case, repeats interleaved; returns the median rates by (map, executor, k)."""
    sizes = {"pure_python": args.py_elements, "numpy": args.np_elements, "jpeg": args.jpeg_elements}
    maps = [name for name in MAPS if name != "jpeg" or jpegs is not None]
    if jpegs is None:
        emit({"case": "map/jpeg", "skipped": "Pillow is not importable"})
    cases = [(name, "none", 0) for name in maps]
    cases += [(name, e, k) for name in maps for e in args.executors for k in (1, 2)]
    cases += [(name, "plain_threads", 2) for name in maps]
    walls: dict[tuple[str, str, int], list[float]] = {case: [] for case in cases}
    firsts: dict[tuple[str, str, int], list[float]] = {case: [] for case in cases}
    cpus: dict[tuple[str, str, int], list[float]] = {case: [] for case in cases}
    ok = dict.fromkeys(cases, True)
    expected: dict[str, list[Any]] = {}
    for repeat in range(args.repeats):
        for case in cases:
            name, executor, workers = case
            items, fn = _map_items(name, sizes[name], jpegs or [])
            if executor == "plain_threads":
                wall, first, cpu, out = _plain_threads_pass(items, fn, workers)
            else:
                wall, first, cpu, out = _timed_pass(_pipeline(items, fn, executor, workers))
            walls[case].append(wall)
            cpus[case].append(cpu)
            firsts[case].append(first)
            if name not in expected:  # the pipeline alone, first repeat: the reference
                expected[name] = [tuple(x) for x in out]
            ok[case] = ok[case] and [tuple(x) for x in out] == expected[name]
            ok[case] = ok[case] and [x[0] for x in out] == list(range(sizes[name]))
        print(f"freethreaded: maps, repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    rates = {}
    for case in cases:
        name, executor, workers = case
        n = sizes[name]
        per_s = [n / wall for wall in walls[case]]
        rates[case] = statistics.median(per_s)
        emit(
            {
                "case": f"map/{name}/{executor}_{workers}" if workers else f"map/{name}/serial",
                "map": name,
                "executor": executor,
                "workers": workers,
                "elements": n,
                "elements_per_s": round(rates[case], 1),
                "spread": _spread(per_s),
                "ms_per_element": round(1000 / rates[case], 3),
                # What the work costs, whatever the load: the same for 1 and 2 workers
                # unless they get in each other's way (or the hand-off costs).
                "cpu_ms_per_element": round(1000 * statistics.median(cpus[case]) / n, 3),
                "first_element_s": round(statistics.median(firsts[case]), 4),
                "ok": bool(ok[case]),
            }
        )
    return rates


def _run_transport(args: argparse.Namespace, emit: _Emitter) -> dict[str, float]:
    n = args.transport_elements
    kinds = ["none", *args.executors]
    walls: dict[str, list[float]] = {kind: [] for kind in kinds}
    firsts: dict[str, list[float]] = {kind: [] for kind in kinds}
    ok = dict.fromkeys(kinds, True)
    for _ in range(args.repeats):
        for kind in kinds:
            ds = _pipeline(range(n), _ready_array, kind, 0 if kind == "none" else 2, buffer=16)
            wall, first, good = _transport_pass(ds, n)
            walls[kind].append(wall)
            firsts[kind].append(first)
            ok[kind] = ok[kind] and good
    megabytes = (n - 1) * TRANSPORT_BYTES / 1e6
    rates = {}
    for kind in kinds:
        per_s = [megabytes / wall for wall in walls[kind]]
        rates[kind] = statistics.median(per_s)
        emit(
            {
                "case": f"transport_150kb/{kind}_2" if kind != "none" else "transport_150kb/serial",
                "executor": kind,
                "workers": 0 if kind == "none" else 2,
                "elements": n,
                "mb_per_s": round(rates[kind], 1),
                "spread": _spread(per_s),
                "us_per_element": round(TRANSPORT_BYTES / rates[kind], 2),
                "first_element_s": round(statistics.median(firsts[kind]), 4),
                "ok": bool(ok[kind]),
            }
        )
    return rates


def _run_first_batch(args: argparse.Namespace, emit: _Emitter) -> dict[str, float]:
    times: dict[str, list[float]] = {kind: [] for kind in args.executors}
    ok = dict.fromkeys(args.executors, True)
    for _ in range(args.first_repeats):
        for kind in args.executors:
            grain.config.update("py_worker_executor", kind)
            ds = (
                grain.MapDataset.range(10_000)
                .map(_small)
                .to_iter_dataset(grain.ReadOptions(num_threads=0))
                .batch(FIRST_BATCH)
                .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
            )
            start = time.perf_counter()
            iterator = iter(ds)
            batch = next(iterator)
            times[kind].append(time.perf_counter() - start)
            # The single-process order: the first batch holds elements 0..31.
            ok[kind] = ok[kind] and np.array_equal(batch[:, 0], np.arange(FIRST_BATCH))
            iterator.close()
    medians = {}
    for kind in args.executors:
        medians[kind] = statistics.median(times[kind])
        emit(
            {
                "case": f"first_batch/{kind}_2",
                "executor": kind,
                "workers": 2,
                "batch": FIRST_BATCH,
                "first_batch_s": round(medians[kind], 4),
                "spread_ms": _spread(times[kind], 1000.0, 1),
                "repeats": args.first_repeats,
                "ok": bool(ok[kind]),
            }
        )
    return medians


def _run_memory(args: argparse.Namespace, emit: _Emitter) -> None:
    for kind in args.executors:
        for name, ds, n in (
            (
                "transport_150kb",
                _pipeline(range(args.transport_elements), _ready_array, kind, 2, buffer=16),
                args.transport_elements,
            ),
            ("map_numpy", _pipeline(range(args.np_elements), _numpy, kind, 2), args.np_elements),
        ):
            with _MemorySampler() as sampler:
                count = sum(1 for _ in ds)
            emit(
                {
                    "case": f"memory/{name}/{kind}_2",
                    "executor": kind,
                    "workers": 2,
                    "peak_pss_mb": round(sampler.peak_kb / 1024, 1),
                    "before_pss_mb": round(sampler.before_kb / 1024, 1),
                    "added_pss_mb": round((sampler.peak_kb - sampler.before_kb) / 1024, 1),
                    "ok": count == n,
                }
            )


def _ratio(
    emit: _Emitter,
    case: str,
    top: float | None,
    bottom: float | None,
    target: float | None = None,
    applies: bool = True,
) -> None:
    if not top or not bottom:
        return
    ratio = top / bottom
    line: dict[str, Any] = {"case": f"ratio/{case}", "ratio": round(ratio, 3)}
    if target is not None:
        line |= {"target": f">= {target}x", "applies": applies, "met": ratio >= target}
    emit(line)


def _ratios(
    args: argparse.Namespace,
    emit: _Emitter,
    maps: dict,
    transport: dict[str, float],
    first: dict[str, float],
    gil: bool,
) -> None:
    for name in MAPS:
        serial = maps.get((name, "none", 0))
        for kind in args.executors:
            one, two = maps.get((name, kind, 1)), maps.get((name, kind, 2))
            target = 1.8 if (name, kind) == ("pure_python", "threads") else None
            _ratio(emit, f"{name}/{kind}_2_vs_{kind}_1", two, one, target, applies=not gil)
            _ratio(emit, f"{name}/{kind}_2_vs_serial", two, serial)
            # Against what 2 plain threads reach now: the library's share of a shortfall.
            _ratio(
                emit,
                f"{name}/{kind}_2_vs_plain_threads_2",
                two,
                maps.get((name, "plain_threads", 2)),
            )
        if set(args.executors) == set(EXECUTORS):
            _ratio(emit, f"{name}/threads_2_vs_processes_2", maps.get((name, "threads", 2)),
                   maps.get((name, "processes", 2)))  # fmt: skip
    if set(args.executors) == set(EXECUTORS):
        _ratio(emit, "transport_150kb/threads_vs_processes", transport["threads"],
               transport["processes"], 5.0)  # fmt: skip
    for kind in args.executors:
        _ratio(emit, f"transport_150kb/{kind}_vs_serial", transport[kind], transport["none"])
        emit(
            {
                "case": f"target/first_batch/{kind}_2",
                "first_batch_s": round(first[kind], 4),
                "target": "<= 0.05 s",
                "met": first[kind] <= 0.05,
            }
        )


# --- a table of several runs (--table) ---------------------------------------------------


def _label(lines: dict[str, dict[str, Any]]) -> str:
    head = lines["interpreter"]
    build = "t" if head["free_threaded_build"] else ""
    gil = "GIL on" if head["gil_enabled"] else "GIL off"
    return f"{head['python']}{build}, {gil}"


def _cell(line: dict[str, Any] | None, key: str, digits: int = 0, spread: bool = True) -> str:
    """`line[key]`, with the min-max of the repeats where `spread` and the line has one."""
    if line is None or line.get(key) is None:
        return "—"
    value = line[key]
    spread = spread and line.get("spread")
    text = f"{value:,.{digits}f}".replace(",", " ")
    if spread and spread["min"] != spread["max"]:
        low, high = (f"{spread[k]:,.{digits}f}".replace(",", " ") for k in ("min", "max"))
        text += f" ({low}-{high})"
    return text


def render_table(paths: Sequence[Path]) -> str:
    """A markdown table of runs of this script, one column per run (its JSON lines files)."""
    runs = []
    for path in paths:
        lines = [json.loads(text) for text in Path(path).read_text().splitlines() if text.strip()]
        runs.append({line["case"]: line for line in lines})
    header = "| figure | " + " | ".join(_label(run) for run in runs) + " |"
    out = [header, "|---" * (len(runs) + 1) + "|"]

    def row(name: str, cells: list[str]) -> None:
        out.append(f"| {name} | " + " | ".join(cells) + " |")

    row("load (1 min) at start / end", [
        f"{run['interpreter']['load_1min']} / {run.get('rusage', {}).get('load_1min_end', '?')}"
        for run in runs
    ])  # fmt: skip
    for name in MAPS:
        row(f"**{name}**, ms per element, pipeline alone", [
            _cell(run.get(f"map/{name}/serial"), "ms_per_element", 2, False) for run in runs
        ])  # fmt: skip
        for case in (
            "serial", "threads_1", "threads_2", "processes_1", "processes_2", "plain_threads_2"
        ):  # fmt: skip
            row(f"{name}, {case.replace('_', ' ')}: CPU ms per element", [
                _cell(run.get(f"map/{name}/{case}"), "cpu_ms_per_element", 2, False)
                for run in runs
            ])  # fmt: skip
        for case in (
            "serial", "threads_1", "threads_2", "processes_1", "processes_2", "plain_threads_2"
        ):  # fmt: skip
            row(f"{name}, {case.replace('_', ' ')}: elements/s", [
                _cell(run.get(f"map/{name}/{case}"), "elements_per_s") for run in runs
            ])  # fmt: skip
        for ratio in (
            "threads_2_vs_threads_1",
            "threads_2_vs_serial",
            "threads_2_vs_plain_threads_2",
            "processes_2_vs_serial",
        ):
            row(f"{name}: {ratio.replace('_vs_', ' / ').replace('_', ' ')}", [
                _cell(run.get(f"ratio/{name}/{ratio}"), "ratio", 2) for run in runs
            ])  # fmt: skip
    for kind in ("serial", "threads_2", "processes_2"):
        row(f"transport 150 KB, {kind.replace('_', ' ')}: MB/s", [
            _cell(run.get(f"transport_150kb/{kind}"), "mb_per_s") for run in runs
        ])  # fmt: skip
    row("transport: threads / processes", [
        _cell(run.get("ratio/transport_150kb/threads_vs_processes"), "ratio", 1) for run in runs
    ])  # fmt: skip
    for kind in EXECUTORS:
        cells = []
        for run in runs:
            line = run.get(f"first_batch/{kind}_2")
            cells.append("—" if line is None else (
                f"{line['spread_ms']['median']} ({line['spread_ms']['min']}-"
                f"{line['spread_ms']['max']})"
            ))  # fmt: skip
        row(f"first batch, 2 {kind}: ms", cells)
    for case in ("transport_150kb", "map_numpy"):
        for kind in EXECUTORS:
            row(f"memory, {case} 2 {kind}: peak PSS added, MB", [
                _cell(run.get(f"memory/{case}/{kind}_2"), "added_pss_mb", 1) for run in runs
            ])  # fmt: skip
    row("ru_maxrss self / largest child, MB", [
        f"{run['rusage']['self_max_rss_mb']} / {run['rusage']['largest_child_max_rss_mb']}"
        if "rusage" in run else "—"
        for run in runs
    ])  # fmt: skip
    ok = ["all" if all(line.get("ok", True) for line in run.values()) else "**FAILED**"
          for run in runs]  # fmt: skip
    row("checks ok", ok)
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--first-repeats", type=int, default=9)
    parser.add_argument("--py-elements", type=int, default=200)
    parser.add_argument("--np-elements", type=int, default=400)
    parser.add_argument("--jpeg-elements", type=int, default=500)
    parser.add_argument("--transport-elements", type=int, default=10_000)
    parser.add_argument("--executors", default=",".join(EXECUTORS))
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory passes")
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="JSONL",
        help="print a markdown table of earlier runs (files of their JSON lines; globs ok)",
    )
    args = parser.parse_args(argv)
    if args.table:
        paths = [Path(p) for pattern in args.table for p in sorted(glob.glob(pattern)) or [pattern]]
        sys.stdout.write(render_table(paths))
        return 0
    args.executors = [e for e in args.executors.split(",") if e]
    if not args.executors or set(args.executors) - set(EXECUTORS):
        parser.error(f"--executors: choose from {list(EXECUTORS)}")
    if args.quick:
        args.repeats, args.first_repeats = 1, 3
        args.py_elements, args.np_elements, args.jpeg_elements = 40, 80, 100
        args.transport_elements = 1000
    if min(args.repeats, args.first_repeats, args.py_elements, args.np_elements) < 1:
        parser.error("--repeats and the sizes must be positive")

    # JSON lines on the real stdout; print() and warnings go to stderr.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    interpreter = _interpreter()
    emit = _Emitter(out, interpreter)
    try:
        jpegs: list[bytes] | None = _make_jpegs()
    except ImportError:
        jpegs = None
    began = time.perf_counter()
    emit(
        {
            "case": "interpreter",
            "version": sys.version,
            "executable": sys.executable,
            "python_gil_env": os.environ.get("PYTHON_GIL"),
            "cpus": os.cpu_count(),
            "load_1min": round(os.getloadavg()[0], 2),
            "executors": args.executors,
            "repeats": args.repeats,
            "py_loop": PY_LOOP,
            "jpeg_bytes_mean": round(statistics.mean(map(len, jpegs))) if jpegs else None,
        }
    )
    maps = _run_maps(args, emit, jpegs)
    transport = _run_transport(args, emit)
    first = _run_first_batch(args, emit)
    if not args.no_memory:
        _run_memory(args, emit)
    _ratios(args, emit, maps, transport, first, interpreter["gil_enabled"])
    emit(
        {
            "case": "rusage",
            "self_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "largest_child_max_rss_mb": round(
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
            ),
            "wall_s": round(time.perf_counter() - began, 1),
            "load_1min_end": round(os.getloadavg()[0], 2),
            # Still the GIL state at the end: an extension module can turn it back on.
            "gil_enabled_end": _interpreter()["gil_enabled"],
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
