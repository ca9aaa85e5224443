"""A user's own source class (not an array) through shuffle, batch and map, as JSON lines.

Usage: python benchmarks/user_source.py [--repeats 5] [--size 60000] [--cases a,b]

Runs unchanged against this workspace's `grain` and upstream grain==0.2.18: it
touches `grain.MapDataset` and `grain.ReadOptions` only.

The source is what a user writes by hand around MNIST-shaped data (`--size`
records of a 28x28 uint8 image and an int label): a class with `__len__`,
`__getitem__` returning one dict ``{"image": ..., "label": ...}`` and
`__getitems__` returning a list of such dicts. It declares nothing, so both
implementations read it with ``src[i]``, one record at a time.

Cases (``ReadOptions(num_threads=0)``, batches of 128, normalize = image to
float32 / 255, label kept):

- ``numpy_loop``: the hand-written reference: a permutation, then per batch
  ``src.__getitems__(indices)``, the dicts' fields stacked with numpy, normalize.
- ``batch_map_t0``: ``MapDataset.source(src).seed(0).shuffle().batch(128)
  .map(normalize).to_iter_dataset(...)`` (the target: >= 0.4x the loop).
- ``map_batch_t0``: the same with the map per element, before the batch.

Each repeat runs every case once, in turn (interleaved, so they share the
machine's load); a line gives the median over the repeats after one untimed
warm-up (wall time, and `median_cpu_s`, the process's CPU time), and for the
pipelines `ratio`, the median of the per-repeat ratios to the loop, and
`overhead_us`, the median per-element time above the loop's.
`ok`: every run's batches equal, leaf by leaf (values, dtypes, shapes, dict
keys in order), those of the loop read in the pipeline's own order (taken
from ``MapDataset.range(size).seed(0).shuffle()``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _bench_common import checked_cases, grain_version, implementation, json_stdout

import grain

BATCH = 128
CASES = ["numpy_loop", "batch_map_t0", "map_batch_t0"]


class UserSource:
    """A user's source: records live in two arrays, each read builds a fresh dict."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self._images = images
        self._labels = labels

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self._images[index], "label": int(self._labels[index])}

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        images, labels = self._images, self._labels
        return [{"image": images[i], "label": int(labels[i])} for i in indices]


def normalize(batch: dict[str, Any]) -> dict[str, Any]:
    return {"image": batch["image"].astype(np.float32) / 255, "label": batch["label"]}


def numpy_loop(source: UserSource, order: np.ndarray) -> list[dict[str, Any]]:
    batches = []
    for low in range(0, len(order), BATCH):
        records = source.__getitems__(order[low : low + BATCH].tolist())
        image = np.stack([record["image"] for record in records])
        label = np.array([record["label"] for record in records])
        batches.append(normalize({"image": image, "label": label}))
    return batches


def _pipeline(name: str, source: UserSource) -> Any:
    ds = grain.MapDataset.source(source).seed(0).shuffle()
    if name == "batch_map_t0":
        ds = ds.batch(BATCH).map(normalize)
    else:
        ds = ds.map(normalize).batch(BATCH)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=0))


def _same(got: list[Any], expected: list[Any]) -> bool:
    if len(got) != len(expected):
        return False
    for batch, want in zip(got, expected, strict=True):
        if type(batch) is not dict or list(batch) != list(want):
            return False
        for key, value in want.items():
            leaf = batch[key]
            if not isinstance(leaf, np.ndarray) or leaf.dtype != value.dtype:
                return False
            if not np.array_equal(leaf, value):
                return False
    return True


def _digest(batches: list[Any]) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        digest.update(np.ascontiguousarray(batch["label"]).tobytes())
    return digest.hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=60_000)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args(argv)
    names = checked_cases(parser, args, CASES)
    if "numpy_loop" not in names:
        names.insert(0, "numpy_loop")  # the reference every ratio needs
    out = json_stdout()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.size, 28, 28), dtype=np.uint8)
    source = UserSource(images, rng.integers(0, 10, args.size))
    order = np.array(list(grain.MapDataset.range(args.size).seed(0).shuffle()), dtype=np.int64)
    expected = numpy_loop(source, order)

    runs: dict[str, Callable[[], list[Any]]] = {
        "numpy_loop": lambda: numpy_loop(source, np.random.default_rng(0).permutation(args.size)),
    }
    for name in names[1:]:
        runs[name] = _pipeline(name, source).__iter__
    ok = {name: _same(list(_pipeline(name, source)), expected) for name in names[1:]}
    ok["numpy_loop"] = True
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu_times: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        list(runs[name]())  # warm-up
    for _ in range(args.repeats):
        for name in names:
            cpu, start = time.process_time(), time.perf_counter()
            got = list(runs[name]())
            times[name].append(time.perf_counter() - start)
            cpu_times[name].append(time.process_time() - cpu)
            if name != "numpy_loop":
                ok[name] = ok[name] and _same(got, expected)
    loop = times["numpy_loop"]
    for name in names:
        median = statistics.median(times[name])
        line: dict[str, Any] = {
            "benchmark": "user_source",
            "case": name,
            "implementation": implementation(),
            "grain_version": grain_version(),
            "elements": args.size,
            "median_s": round(median, 6),
            "elements_per_s": round(args.size / median),
            # CPU time of the process: steadier than wall time on a busy machine.
            "median_cpu_s": round(statistics.median(cpu_times[name]), 6),
            "ok": bool(ok[name]),
            "digest": _digest(expected),
        }
        if name != "numpy_loop":
            pairs = list(zip(times[name], loop, strict=True))
            line["ratio"] = round(statistics.median(ref / ours for ours, ref in pairs), 4)
            line["overhead_us"] = round(
                statistics.median((ours - ref) / args.size * 1e6 for ours, ref in pairs), 3
            )
        print(json.dumps(line), file=out, flush=True)


if __name__ == "__main__":
    main()
