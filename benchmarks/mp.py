"""Worker processes: CPU-bound speed-up, transport rate and time to first batch, as JSON lines.

Usage: python benchmarks/mp.py [--repeats 3] [--batches 100] [--torch]

(a) CPU-bound: element i is a 224x224x3 uint8 image made by ~1 ms of numpy work
    (`_make_image`), batch 32, `--batches` batches. Cases: the serial loop (no grain:
    make and stack, the reference), then
    ``MapDataset.range(n).map(_make_image).to_iter_dataset(ReadOptions(num_threads=0))
    .batch(32).mp_prefetch(MultiprocessingOptions(num_workers=w))`` for w = 0, 1, 2,
    and, with ``--torch`` (torch importable, e.g. via PYTHONPATH; never in uv.lock),
    PyTorch's DataLoader(num_workers=2, batch_size=32) over a map-style Dataset doing
    the same work. Each line: batches/s, speed-up over the serial loop measured in
    the same run, and time to the first batch (median of repeats).
(b) Transport: a map that returns a ready 150 KB uint8 array (made once per process, so
    no work), through 2 workers, the consumer dropping each element; MB/s from the
    first element on (worker start-up is the time to first batch above), beside a
    single-thread numpy copy rate of the same arrays, and the CPU time per element
    of the parent and of the workers together (start-up included): on 2 cores the
    three processes share them, so the rate follows the sum.

Outputs are checked: every batch has the expected shape and the first pixel of
each image encodes its index, so a wrong or missing element fails `ok`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

import grain

BATCH = 32
SHAPE = (224, 224, 3)
TRANSPORT_BYTES = 150 * 1024


def _make_image(index: int) -> np.ndarray:
    """About 1 ms of numpy work, then a 224x224x3 uint8 image whose first pixel says `index`."""
    rng = np.random.default_rng(index)
    noise = rng.standard_normal((224, 224, 3), dtype=np.float32)
    for _ in range(3):
        noise = np.tanh(noise * 1.1 + 0.1)
    image = ((noise + 1.0) * 127.5).astype(np.uint8)
    image[0, 0, 0] = index % 256
    image[0, 0, 1] = (index // 256) % 256
    return image


_READY: list[np.ndarray] = []
READY_COUNT = 64


def _ready_array(index: int) -> np.ndarray:
    """A ready 150 KB array (made once per process): transport alone is measured."""
    if not _READY:
        _READY.extend(np.full(TRANSPORT_BYTES, k, dtype=np.uint8) for k in range(READY_COUNT))
    return _READY[index % READY_COUNT]


def _image_index(image: np.ndarray) -> int:
    return int(image[0, 0, 0]) + 256 * int(image[0, 0, 1])


def _check_batches(batches: list[np.ndarray], n: int) -> bool:
    if len(batches) != n // BATCH:
        return False
    seen = [_image_index(image) for batch in batches for image in batch]
    shapes_ok = all(batch.shape == (BATCH, *SHAPE) for batch in batches)
    return shapes_ok and sorted(seen) == list(range(n))


def _time_run(run: Callable[[], Iterable[Any]]) -> tuple[float, float, list[Any]]:
    """Wall time of a full pass, time to its first element, and the elements."""
    start = time.perf_counter()
    first = None
    out = []
    for element in run():
        if first is None:
            first = time.perf_counter() - start
        out.append(element)
    return time.perf_counter() - start, first or 0.0, out


def _serial(n: int) -> Callable[[], Iterable[np.ndarray]]:
    def run() -> Iterable[np.ndarray]:
        for start in range(0, n - BATCH + 1, BATCH):
            yield np.stack([_make_image(i) for i in range(start, start + BATCH)])

    return run


def _grain(n: int, workers: int) -> Callable[[], Iterable[np.ndarray]]:
    ds = (
        grain.MapDataset.range(n)
        .map(_make_image)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .batch(BATCH, drop_remainder=True)
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return lambda: iter(ds)


def _torch(n: int, workers: int) -> Callable[[], Iterable[np.ndarray]] | None:
    try:
        import torch.utils.data as tud
    except ImportError:
        return None

    class Images(tud.Dataset):
        def __len__(self) -> int:
            return n

        def __getitem__(self, index: int) -> np.ndarray:
            return _make_image(index)

    def run() -> Iterable[np.ndarray]:
        loader = tud.DataLoader(Images(), batch_size=BATCH, num_workers=workers, drop_last=True)
        for batch in loader:
            yield batch.numpy()

    return run


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _cpu_bound(args: argparse.Namespace) -> None:
    n = args.batches * BATCH
    cases: list[tuple[str, Callable[[], Iterable[Any]] | None]] = [("serial_loop", _serial(n))]
    cases += [(f"grain_workers_{w}", _grain(n, w)) for w in (0, 1, 2)]
    if args.torch:
        cases.append(("torch_dataloader_workers_2", _torch(n, 2)))
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for name, run in cases:
            if run is None:
                continue
            wall, first, out = _time_run(run)
            result = results.setdefault(name, {"walls": [], "firsts": [], "ok": True})
            result["walls"].append(wall)
            result["firsts"].append(first)
            result["ok"] = result["ok"] and _check_batches(out, n)
    serial = statistics.median(results["serial_loop"]["walls"])
    for name, _ in cases:
        if name not in results:
            _emit({"case": name, "skipped": "torch is not importable"})
            continue
        result = results[name]
        wall = statistics.median(result["walls"])
        _emit(
            {
                "case": name,
                "batches": args.batches,
                "batches_per_s": round(args.batches / wall, 2),
                "speedup_vs_serial": round(serial / wall, 3),
                "first_batch_s": round(statistics.median(result["firsts"]), 4),
                "ok": bool(result["ok"]),
                "cpus": os.cpu_count(),
            }
        )


def _children_cpu() -> float:
    """User and system seconds of this process's reaped children (the ended workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _transport(args: argparse.Namespace) -> None:
    n = args.transport_elements
    ds = (
        grain.MapDataset.range(n)
        .map(_ready_array)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
    )
    mp = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=16))
    arrays = [_ready_array(i) for i in range(READY_COUNT)]
    copies = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(n // 64):
            for array in arrays:
                array.copy()
        copies.append(time.perf_counter() - start)
    walls, starts, ok = [], [], True
    parent_cpu, workers_cpu = [], []
    for _ in range(args.repeats):
        cpu_before = time.process_time()
        children_before = _children_cpu()
        # The consumer drops each element (as a training step does) after checking it.
        # The clock runs from the first element: starting the workers is measured
        # by the CPU-bound cases' time to first batch, not here.
        begin = time.perf_counter()
        start = 0.0
        count = 0
        for i, array in enumerate(mp):
            if not i:
                start = time.perf_counter()
                starts.append(start - begin)
            ok = ok and int(array[0]) == i % READY_COUNT and array.nbytes == TRANSPORT_BYTES
            count += 1
        walls.append(time.perf_counter() - start)
        ok = ok and count == n
        # The iterator ended, so its workers are reaped and their CPU time counted.
        parent_cpu.append((time.process_time() - cpu_before) / n)
        workers_cpu.append((_children_cpu() - children_before) / n)
    megabytes = (n - 1) * TRANSPORT_BYTES / 1e6
    copy_mb = (n // 64) * 64 * TRANSPORT_BYTES / 1e6
    _emit(
        {
            "case": "transport_150kb_workers_2",
            "elements": n,
            "mb_per_s": round(megabytes / statistics.median(walls), 1),
            "numpy_copy_mb_per_s": round(copy_mb / statistics.median(copies), 1),
            "first_element_s": round(statistics.median(starts), 4),
            "parent_cpu_us_per_element": round(statistics.median(parent_cpu) * 1e6, 2),
            "workers_cpu_us_per_element": round(statistics.median(workers_cpu) * 1e6, 2),
            "ok": bool(ok),
        }
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--transport-elements", type=int, default=20000)
    parser.add_argument("--torch", action="store_true", help="add PyTorch's DataLoader")
    args = parser.parse_args(argv)
    _cpu_bound(args)
    _transport(args)


if __name__ == "__main__":
    sys.exit(main())
