"""Time to the first batch, large elements, and batches at memory speed, as JSON lines.

Usage: python benchmarks/latency_memory.py [--repeats 3] [--size 60000] [--cases a,b]

Runs unchanged against this workspace's `grain` and upstream grain==0.2.18 (the
cases upstream cannot express, a dict-of-arrays source, print ``"skipped"``). It
touches `grain.MapDataset`, `grain.ReadOptions` and `grain.sources` only.

Cases (each the median of `repeats` runs after a warm-up; `_t0` reads with
``ReadOptions(num_threads=0)``, `_tdefault` with ``ReadOptions()``):

- ``first_batch_t0/_tdefault``: ``range(10 000).map(f).batch(32).to_iter_dataset()``
  with a 2 ms `f`: seconds to the first batch, and how many elements `f` had
  computed 0.1 s later (`computed`; one batch is 32).
- ``large_150kb_t0``: ``range(n).map(returns a ready 150 KB array).batch(32)``:
  bytes handed out per second.
- ``mnist_*``: an MNIST-shaped epoch (`--size` 28x28 uint8 images and int64
  labels, global shuffle, batch 128, normalize to float32): ``list_map_batch``
  (a list of per-record dicts, normalize per record, then batch),
  ``seq_batch_map`` (a Sequence source, batch, then normalize the batch),
  ``arrays_batch_map`` / ``arrays_map_batch`` (``MapDataset.source({"image": ...,
  "label": ...})``), and ``numpy_loop``, the hand-written reference (permute,
  gather each batch by fancy indexing, normalize). Images per second.
- ``ar_pipeline_t0``: the same records as 785-byte ArrayRecord records,
  shuffled and batched by the pipeline, against ``ar_raw_bulk``: the raw
  ArrayRecordReader's ``read(indices)`` over a permutation in chunks of 1024.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _bench_common import checked_cases, grain_version, implementation, json_stdout

import grain

CASES = [
    "first_batch_t0",
    "first_batch_tdefault",
    "large_150kb_t0",
    "mnist_numpy_loop",
    "mnist_list_map_batch_t0",
    "mnist_list_map_batch_tdefault",
    "mnist_seq_batch_map_t0",
    "mnist_seq_batch_map_tdefault",
    "mnist_arrays_map_batch_t0",
    "mnist_arrays_map_batch_tdefault",
    "mnist_arrays_batch_map_t0",
    "mnist_arrays_batch_map_tdefault",
    "ar_raw_bulk",
    "ar_pipeline_t0",
]
BATCH = 128


def _options(name: str) -> Any:
    return grain.ReadOptions(num_threads=0) if name.endswith("_t0") else grain.ReadOptions()


def _normalize(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"image": batch["image"].astype(np.float32) / 255.0, "label": batch["label"]}


def _normalize_one(record: dict[str, Any]) -> dict[str, Any]:
    return {"image": record["image"].astype(np.float32) / 255.0, "label": record["label"]}


class _Rows:
    """A Sequence of per-record dicts over two arrays (what a user writes by hand)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self._images, self._labels = images, labels

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self._images[index], "label": self._labels[index]}


class Data:
    def __init__(self, size: int, directory: str):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 255, (size, 28, 28), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size).astype(np.int64)
        self.records = [{"image": self.images[i], "label": self.labels[i]} for i in range(size)]
        self.path = os.path.join(directory, "mnist.array_record")
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(self.path, "group_size:1")
        for i in range(size):
            writer.write(self.images[i].tobytes() + bytes([int(self.labels[i])]))
        writer.close()


def _first_batch(name: str, data: Data) -> dict[str, Any]:
    calls: list[None] = []

    def slow(x: int) -> int:
        calls.append(None)
        time.sleep(0.002)
        return x

    ds = grain.MapDataset.range(10_000).map(slow).batch(32).to_iter_dataset(_options(name))
    start = time.perf_counter()
    iterator = iter(ds)
    batch = next(iterator)
    seconds = time.perf_counter() - start
    time.sleep(0.1)
    computed = len(calls)
    if hasattr(iterator, "close"):
        iterator.close()
    ok = list(np.asarray(batch)) == list(range(32))
    return {"seconds": seconds, "computed": computed, "ok": ok, "unit": "s"}


def _large(name: str, data: Data) -> dict[str, Any]:
    block = np.ones(150_000 // 8, dtype=np.float64)
    ds = grain.MapDataset.range(20_000).map(lambda _: block).batch(32)
    start = time.perf_counter()
    moved = 0
    for batch in ds.to_iter_dataset(_options(name)):
        moved += batch.nbytes
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rate": moved / seconds, "unit": "bytes/s", "ok": True}


def _mnist_pipeline(name: str, data: Data) -> Any:
    form = name.removeprefix("mnist_").rsplit("_t", 1)[0]
    if form == "list_map_batch":
        ds = grain.MapDataset.source(data.records).shuffle(seed=1).map(_normalize_one)
        return ds.batch(BATCH)
    if form == "seq_batch_map":
        ds = grain.MapDataset.source(_Rows(data.images, data.labels)).shuffle(seed=1)
        return ds.batch(BATCH).map(_normalize)
    arrays = grain.MapDataset.source({"image": data.images, "label": data.labels})
    if form == "arrays_map_batch":
        return arrays.shuffle(seed=1).map(_normalize_one).batch(BATCH)
    return arrays.shuffle(seed=1).batch(BATCH).map(_normalize)


def _mnist(name: str, data: Data) -> dict[str, Any]:
    if name == "mnist_numpy_loop":
        start = time.perf_counter()
        order = np.random.default_rng(1).permutation(len(data.labels))
        seen = 0
        for low in range(0, len(order), BATCH):
            rows = order[low : low + BATCH]
            batch = _normalize({"image": data.images[rows], "label": data.labels[rows]})
            seen += len(batch["label"])
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "rate": seen / seconds, "unit": "images/s", "ok": True}
    start = time.perf_counter()
    try:
        ds = _mnist_pipeline(name, data)
        labels = [batch["label"] for batch in ds.to_iter_dataset(_options(name))]
    except Exception as error:
        if "arrays" not in name:
            raise
        # Upstream has no dict-of-arrays source (it reads the dict by key).
        return {"skipped": f"{type(error).__name__}: {error}"}
    seconds = time.perf_counter() - start
    seen = np.concatenate(labels)
    ok = (
        len(seen) == len(data.labels)
        and np.bincount(seen).tolist() == np.bincount(data.labels).tolist()
    )
    return {"seconds": seconds, "rate": len(seen) / seconds, "unit": "images/s", "ok": ok}


def _array_record(name: str, data: Data) -> dict[str, Any]:
    size = len(data.labels)
    start = time.perf_counter()
    if name == "ar_raw_bulk":
        from array_record.python.array_record_module import ArrayRecordReader

        reader = ArrayRecordReader(data.path, "readahead_buffer_size:0,max_parallelism:0")
        order = np.random.default_rng(1).permutation(size).tolist()
        count = sum(len(reader.read(order[low : low + 1024])) for low in range(0, size, 1024))
        reader.close()
    else:
        source = grain.sources.ArrayRecordDataSource(data.path)
        ds = grain.MapDataset.source(source).shuffle(seed=1).batch(BATCH)
        count = sum(len(batch) for batch in ds.to_iter_dataset(_options(name)))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rate": count / seconds, "unit": "records/s", "ok": count == size}


def _runner(name: str) -> Callable[[str, Data], dict[str, Any]]:
    if name.startswith("first_batch"):
        return _first_batch
    if name.startswith("large"):
        return _large
    if name.startswith("mnist"):
        return _mnist
    return _array_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=60_000)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    names = checked_cases(parser, args, CASES)
    out = json_stdout()
    with tempfile.TemporaryDirectory() as directory:
        data = Data(args.size, directory)
        for name in names:
            run = _runner(name)
            first = run(name, data)  # warm-up (and the answer for skipped cases)
            line: dict[str, Any] = {
                "case": name,
                "implementation": implementation(),
                "grain_version": grain_version(),
                "python": platform.python_version(),
            }
            if "skipped" in first:
                line["skipped"] = first["skipped"]
            else:
                runs = [run(name, data) for _ in range(args.repeats)]
                line.update(
                    unit=runs[0]["unit"],
                    median_s=statistics.median(r["seconds"] for r in runs),
                    ok=all(r["ok"] for r in [first, *runs]),
                )
                if "rate" in runs[0]:
                    line["rate"] = statistics.median(r["rate"] for r in runs)
                if "computed" in runs[0]:
                    line["computed"] = max(r["computed"] for r in runs)
                line["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(json.dumps(line), file=out, flush=True)


if __name__ == "__main__":
    main()
