"""Leak and memory soaks: half a million elements, and 200 abandoned iterators.

1. 500,000 cheap elements through a threaded pipeline (`to_iter_dataset` with
   reader threads, then a `ThreadPrefetchIterDataset`) and through an
   `mp_prefetch` pipeline (2 workers). The resident memory (VmRSS from
   /proc, of this process and, for mp, of the workers together) is sampled
   every 25,000 elements; after a warm-up of 150,000 elements its least-squares
   slope must be flat. Open file descriptors must not grow, and threads must stay
   within what the pipeline may start: those running at the warm-up, or, if more,
   every reader its options allow (the read-ahead's width is tuned while it runs,
   so a second reader may start after the warm-up; a leak grows past any bound).
2. 200 iterators created, partly read and dropped without `close()`: with
   reader threads, with worker processes (elements holding shared-memory
   arrays, some still held when the iterator is dropped), with `device_put`,
   and all three stacked. Run in a fresh interpreter, so that its exit shows
   what the resource tracker would complain about: afterwards no thread,
   process or /dev/shm segment of it may be left, and its stderr must be empty.

Each soak runs in a fresh interpreter, so that no other test's memory moves its
figures. Figures are printed (``pytest -s``); the same soaks run by hand with
``uv run python integration_tests/test_leak_soak.py [rss|threads|mp|abandon]``.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import multiprocessing.resource_tracker
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

ELEMENTS = 500_000
SAMPLE_EVERY = 25_000
WARM_UP = 150_000
# KB of resident memory per 100,000 elements. A leak of one small object per element
# (>= 28 bytes) is >= 2,700 KB per 100k; allocator noise over 350k elements is far below.
MAX_SLOPE_KB = 400
ABANDONED = 200


def _status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS (KB) and Threads of a process, from /proc/<pid>/status."""
    found = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                found[key] = int(value.split()[0])
    return found


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _workers() -> list[int]:
    return [p.pid for p in multiprocessing.active_children() if p.name.startswith("grain-worker")]


def _slope_kb_per_100k(samples: list[tuple[int, int]]) -> float:
    """Least-squares slope of (elements, KB) after the warm-up, in KB per 100,000 elements."""
    points = np.array([(n, kb) for n, kb in samples if n >= WARM_UP], dtype=np.float64)
    slope = np.polyfit(points[:, 0], points[:, 1], 1)[0]
    return float(slope * 100_000)


def _cheap(i: int) -> tuple[int, int]:
    return i, i & 0xFF


def soak_rss(kind: str) -> dict[str, Any]:
    """Iterates ELEMENTS elements through a `kind` ("threads" or "mp") pipeline; figures."""
    import grain
    import grain.experimental as ge

    ds = grain.MapDataset.range(ELEMENTS).map(_cheap)
    # Threads the pipeline may add to this process while it runs, at most.
    may_start = 0
    if kind == "threads":
        readers = 2
        ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=readers, prefetch_buffer_size=256))
        ds = ge.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=16)
        may_start = readers + 1
    else:
        ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0))
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=64))
    # Started by the first worker start, multiprocessing's resource tracker keeps a pipe
    # open for the life of the process: start it before counting.
    multiprocessing.resource_tracker.ensure_running()
    gc.collect()
    fds_before, threads_before = _open_fds(), threading.active_count()
    native_before = _status()["Threads"]
    began = time.perf_counter()
    rss: list[tuple[int, int]] = []
    workers_rss: list[tuple[int, int]] = []
    at_warm_up: dict[str, int] = {}
    threads_after_warm_up: list[int] = []
    iterator = iter(ds)
    count = 0
    for count, element in enumerate(iterator, 1):
        if element[0] != count - 1:
            raise AssertionError(f"element {count - 1} came as {element!r}")
        if count % SAMPLE_EVERY:
            continue
        rss.append((count, _status()["VmRSS"]))
        if kind == "mp":
            workers_rss.append((count, sum(_status(pid)["VmRSS"] for pid in _workers())))
        if count == WARM_UP:
            at_warm_up = {"fds": _open_fds(), "threads": _status()["Threads"]}
        if count >= WARM_UP:
            threads_after_warm_up.append(_status()["Threads"])
    fds_at_end = _open_fds()
    threads_bound = max(at_warm_up["threads"], native_before + may_start)
    iterator.close()
    del iterator
    gc.collect()
    figures: dict[str, Any] = {
        "pipeline": kind,
        "elements": count,
        "seconds": round(time.perf_counter() - began, 1),
        "rss_kb_at_warm_up": dict(rss)[WARM_UP],
        "rss_kb_at_end": rss[-1][1],
        "rss_slope_kb_per_100k": round(_slope_kb_per_100k(rss), 1),
        "fds_growth_while_iterating": fds_at_end - at_warm_up["fds"],
        "threads_at_warm_up": at_warm_up["threads"] - native_before,
        "threads_most_after_warm_up": max(threads_after_warm_up) - native_before,
        "threads_over_bound": max(threads_after_warm_up) - threads_bound,
    }
    if kind == "mp":
        figures["workers_rss_slope_kb_per_100k"] = round(_slope_kb_per_100k(workers_rss), 1)
    # What closing gives back: the workers and threads end, their descriptors close.
    deadline = time.monotonic() + 5
    while (
        _open_fds() > fds_before or threading.active_count() > threads_before or _workers()
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    figures["fds_left_after_close"] = _open_fds() - fds_before
    figures["threads_left_after_close"] = threading.active_count() - threads_before
    figures["workers_left_after_close"] = len(_workers())
    return figures


def _check_rss(figures: dict[str, Any]) -> None:
    print(json.dumps(figures))
    assert figures["elements"] == ELEMENTS
    assert abs(figures["rss_slope_kb_per_100k"]) < MAX_SLOPE_KB, figures
    assert abs(figures.get("workers_rss_slope_kb_per_100k", 0)) < MAX_SLOPE_KB, figures
    assert figures["fds_growth_while_iterating"] <= 0, figures
    assert figures["threads_over_bound"] <= 0, figures
    assert figures["fds_left_after_close"] <= 0, figures
    assert figures["threads_left_after_close"] <= 0, figures
    assert figures["workers_left_after_close"] == 0, figures


def _in_fresh_interpreter(
    mode: str, timeout: float, *flags: str
) -> tuple[dict[str, Any], str, int]:
    """Runs this file's `mode` in a fresh interpreter of its own session.

    Its last JSON line, its stderr and its pid. A fresh process measures the
    soak alone: in the test process, memory that earlier tests free (or keep
    allocating) moves the resident size as much as a leak would.
    """
    command = [sys.executable, *flags, __file__, mode]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err, child.pid


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_half_a_million_elements_through_threads_keep_memory_flat():
    _check_rss(_in_fresh_interpreter("threads", 100)[0])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_half_a_million_elements_through_worker_processes_keep_memory_flat():
    _check_rss(_in_fresh_interpreter("mp", 160)[0])


# -- abandoned iterators -----------------------------------------------------------------


def _with_array(i: int) -> dict[str, Any]:
    return {"i": i, "x": np.full(1024, i, dtype=np.float32)}  # 4 KiB: through shared memory


def _our_segments(pid: int) -> list[str]:
    """grain segments in /dev/shm owned or created by `pid` (names: see grain_mp._sweep)."""
    found = []
    for name in os.listdir("/dev/shm"):
        parts = name.split("_")
        if name.startswith("grain_") and len(parts) == 6 and str(pid) in parts[2:4]:
            found.append(name)
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in (b"Z", b"X"):
                found.append(int(entry))
    return found


def soak_abandon(count: int = ABANDONED) -> dict[str, Any]:
    """Creates `count` iterators, reads a little of each and drops it; what is left."""
    import jax

    import grain
    import grain.experimental as ge

    device = jax.devices()[0]
    me = os.getpid()

    def make(kind: str) -> Any:
        if kind == "threads":
            ds = grain.MapDataset.range(10_000).map(_with_array).to_iter_dataset()
            return ge.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=4)
        source = grain.MapDataset.range(10_000).map(_with_array)
        if kind == "workers":
            return source.to_iter_dataset(grain.ReadOptions(num_threads=0)).mp_prefetch(
                grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
            )
        if kind == "device_put":
            ds = source.to_iter_dataset(grain.ReadOptions(num_threads=2)).batch(4)
            return ge.device_put(ds, device)
        ds = source.to_iter_dataset().batch(4)  # all three: threads, workers, device_put
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        return ge.device_put(ds, device)

    # One of each first, so that lazily started machinery (jax's runtime, multiprocessing's
    # resource tracker) is running before the baseline is taken.
    for kind in ("threads", "workers", "device_put"):
        iterator = iter(make(kind))
        next(iterator)
        iterator.close()
    gc.collect()
    time.sleep(0.5)
    threads_before, native_before = threading.active_count(), _status()["Threads"]
    fds_before = _open_fds()
    children_before = set(_children(me))  # multiprocessing's resource tracker

    kinds = ("threads", "workers", "device_put", "all")
    held: list[Any] = []
    began = time.perf_counter()
    for i in range(count):
        iterator = iter(make(kinds[i % len(kinds)]))
        how = (i // len(kinds)) % 4
        if how >= 1:  # how 0: dropped before its first element
            element = next(iterator)
        if how >= 2:
            for _ in range(5):
                element = next(iterator)
        if how == 3:
            held.append(element)  # outlives its iterator (a zero-copy view, for workers)
        del iterator
        if how:
            del element
        if len(held) > 4:
            held.pop(0)
    held.clear()
    gc.collect()
    deadline = time.monotonic() + 10
    # Settling includes file handles: the last segments' mappings are released by the
    # collector, just after the threads that held them end (0.1-1 s; seen once in 200).
    while time.monotonic() < deadline and (
        threading.active_count() > threads_before
        or _status()["Threads"] > native_before
        or set(_children(me)) - children_before
        or _our_segments(me)
        or _open_fds() > fds_before
    ):
        time.sleep(0.05)
        gc.collect()

    return {
        "iterators_abandoned": count,
        "seconds": round(time.perf_counter() - began, 1),
        "threads_left": threading.active_count() - threads_before,
        "native_threads_left": _status()["Threads"] - native_before,
        "processes_left": len(set(_children(me)) - children_before),
        "shm_segments_left": len(_our_segments(me)),
        "fds_growth": _open_fds() - fds_before,
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_hundred_abandoned_iterators_leave_nothing_behind():
    figures, err, pid = _in_fresh_interpreter("abandon", 200, "-W", "error")
    # After the interpreter's exit: nothing of it may remain.
    time.sleep(0.5)
    figures["shm_segments_left_after_exit"] = len(_our_segments(pid))
    figures["stderr_after_exit"] = err.strip()
    print(json.dumps(figures))
    assert figures["iterators_abandoned"] == ABANDONED
    for key in ("threads_left", "native_threads_left", "processes_left", "shm_segments_left"):
        assert figures[key] <= 0, figures
    # The mapping of the last segment handed to jax (zero copy) goes a moment after its
    # iterator; the settle loop above waits for it, so none may stay.
    assert figures["fds_growth"] <= 0, figures
    assert figures["shm_segments_left_after_exit"] == 0, figures
    assert err.strip() == "", err  # no resource tracker warnings, nothing at exit


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    for pipeline in ("threads", "mp"):
        if which in (pipeline, "rss", "all"):
            print(json.dumps(soak_rss(pipeline)), flush=True)
    if which in ("abandon", "all"):
        print(json.dumps(soak_abandon()), flush=True)
