"""A JPEG-decode pipeline with threads and worker processes swept, as JSON lines.

Usage: python benchmarks/jpeg.py [--repeats 3] [--size 3840] [--threads 0,2]
       [--workers 0] [--shapes mapbatch,iterbatch] [--cases a,b]

Runs unchanged against this workspace's `grain` and against upstream grain==0.2.18
(`benchmarks/compare.py --bench jpeg` runs it under both, round by round): public API
only. The work is ImageNet-shaped: decode a 256x256 JPEG (Pillow), crop 224x224 at a
position given by the index, flip every other image; batches of 128. Pillow releases
the GIL while it decodes, so threads can pay here where they cannot for pure Python.

Two pipeline shapes, each with ``--threads`` read threads (``ReadOptions(num_threads=
T)``; 0 reads in the consumer's thread) and ``--workers`` worker processes
(``mp_prefetch``; 0: none):

  mapbatch   MapDataset.source(src).map(decode).batch(128).to_iter_dataset(options)
  iterbatch  MapDataset.source(src).map(decode).to_iter_dataset(options).batch(128)

A case is ``SHAPE_wW_tT``. With ``--plain``, ``plain_w0_tT`` decodes the same images
in T plain threads without grain (the caller stacks the batches): the ceiling that the
interpreter and the machine allow at that moment. One timed run reads `size` images
from ``iter()`` on, the first batch and any tuning included, so a read-ahead that
decides slowly shows; a line is the median of `repeats` runs (taken round the
cases, one run of each in turn) after one untimed warm-up (the JPEGs are encoded
once, before any run), with the time to the first batch. Every run's output is
checked: the checksum of a sparse sample of every batch's pixels, against the same
computed serially without grain (`ok`); `digest` is the checksum.

On a many-core machine sweep threads and workers, e.g. ``--threads 0,2,4,8,16
--workers 0,4,8,15``; the defaults are the 2-core case of benchmarks/REPORT.md.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import io
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _bench_common import grain_version, implementation
from PIL import Image

import grain

SIDE = 256
CROP = 224
BATCH = 128
DISTINCT = 64  # distinct JPEGs, repeated: decode cost, not memory, is measured
SHAPES = ("mapbatch", "iterbatch")


def _jpegs() -> list[bytes]:
    """DISTINCT photo-like JPEGs: blocks of colour with noise, quality 90."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(DISTINCT):
        blocks = rng.integers(0, 255, (SIDE // 8, SIDE // 8, 3), dtype=np.uint8)
        image = np.kron(blocks, np.ones((8, 8, 1), dtype=np.uint8))
        image = image + rng.integers(0, 30, image.shape, dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


class JpegSource:
    """Random access to `n` records ``(index, jpeg bytes)``; a user's plain source."""

    def __init__(self, n: int):
        self._n = n
        self._jpegs = _jpegs()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> tuple[int, bytes]:
        index = int(index)
        return index, self._jpegs[index % DISTINCT]


def decode(record: tuple[int, bytes]) -> np.ndarray:
    """Decodes, crops 224x224 where the index says, flips odd indices."""
    index, data = record
    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    dy = (index * 7919) % (SIDE - CROP + 1)
    dx = (index * 104729) % (SIDE - CROP + 1)
    out = image[dy : dy + CROP, dx : dx + CROP]
    if index & 1:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


def _sample(batch: np.ndarray) -> int:
    return int(batch[:, ::37, ::41].sum(dtype=np.int64))


def _pipeline(source: JpegSource, shape: str, threads: int, workers: int) -> Any:
    options = grain.ReadOptions(num_threads=threads)
    ds = grain.MapDataset.source(source).map(decode)
    if shape == "mapbatch":
        ds = ds.batch(BATCH, drop_remainder=True).to_iter_dataset(options)
    else:
        ds = ds.to_iter_dataset(options).batch(BATCH, drop_remainder=True)
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


def _run(ds: Any, batches: int) -> tuple[float, float, list[int]]:
    """Seconds to the first batch and to `batches` batches, and each batch's sample."""
    start = time.perf_counter()
    iterator = iter(ds)
    samples, first = [], 0.0
    for _ in range(batches):
        batch = next(iterator)
        if not samples:
            first = time.perf_counter() - start
        samples.append(_sample(batch))
    elapsed = time.perf_counter() - start
    del iterator
    return first, elapsed, samples


class _PlainThreads:
    """No grain: `threads` plain threads decode in order, the caller stacks batches.

    The ceiling that the interpreter and the machine allow at that moment; 0
    threads decodes in the caller's thread.
    """

    def __init__(self, source: JpegSource, threads: int):
        self._source, self._threads = source, threads

    def __iter__(self) -> Any:
        images = self._decoded()
        while batch := list(itertools.islice(images, BATCH)):
            yield np.stack(batch)

    def _decoded(self) -> Any:
        """The images in order: decoded here, or by the threads a bounded window ahead."""
        indices = range(len(self._source) // BATCH * BATCH)
        if not self._threads:
            yield from (decode(self._source[i]) for i in indices)
            return
        with concurrent.futures.ThreadPoolExecutor(self._threads) as pool:
            # A bounded window of futures, as a loader's buffer: memory stays flat.
            todo, pending = iter(indices), collections.deque()
            for i in itertools.islice(todo, 4 * self._threads):
                pending.append(pool.submit(self._decode, i))
            while pending:
                image = pending.popleft().result()
                for i in itertools.islice(todo, 1):
                    pending.append(pool.submit(self._decode, i))
                yield image

    def _decode(self, index: int) -> np.ndarray:
        return decode(self._source[index])


def _cases(shapes: Sequence[str], workers: Sequence[int], threads: Sequence[int]) -> list[str]:
    return [f"{s}_w{w}_t{t}" for s in shapes for w in workers for t in threads]


def _parse(case: str) -> tuple[str, int, int]:
    shape, w, t = case.split("_")
    if shape not in (*SHAPES, "plain") or not w.startswith("w") or not t.startswith("t"):
        raise SystemExit(f"--cases: expected SHAPE_wW_tT with SHAPE in {SHAPES}: {case!r}")
    return shape, int(w[1:]), int(t[1:])


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=3840, help="images per run (whole batches)")
    parser.add_argument("--threads", default="0,2")
    parser.add_argument("--workers", default="0")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--cases", default="", help="SHAPE_wW_tT[,...]; overrides the sweep")
    parser.add_argument(
        "--plain", action="store_true", help="also plain_w0_tT: T plain threads, no grain"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.size < BATCH:
        parser.error(f"--repeats must be positive and --size at least {BATCH}")
    shapes = [s for s in args.shapes.split(",") if s]
    cases = [c for c in args.cases.split(",") if c] or _cases(
        shapes, _ints(args.workers), _ints(args.threads)
    )
    if args.plain:
        cases += [f"plain_w0_t{t}" for t in _ints(args.threads)]
    try:  # upstream's workers read absl flags: a script without absl.app marks them parsed
        from absl import flags

        flags.FLAGS.mark_as_parsed()
    except ImportError:
        pass
    batches = args.size // BATCH
    source = JpegSource(batches * BATCH)
    expected = [
        _sample(np.stack([decode(source[b * BATCH + i]) for i in range(BATCH)]))
        for b in range(batches)
    ]
    digest = hashlib.sha256(np.array(expected, dtype=np.int64).tobytes()).hexdigest()[:16]
    pipelines = {}
    for case in cases:
        shape, workers, threads = _parse(case)
        pipelines[case] = (
            _PlainThreads(source, threads)
            if shape == "plain"
            else (_pipeline(source, shape, threads, workers))
        )
        _run(pipelines[case], min(batches, 4))  # warm-up: imports, worker start-up code paths
    # Repeats go round the cases, so that what drifts while the benchmark runs (the
    # machine's load, the heap, the clock) reaches every case alike: one case after
    # another gave whichever ran first in a fresh process a 15% head start.
    firsts: dict[str, list[float]] = {case: [] for case in cases}
    times: dict[str, list[float]] = {case: [] for case in cases}
    ok = dict.fromkeys(cases, True)
    for _ in range(args.repeats):
        for case in cases:
            first, elapsed, samples = _run(pipelines[case], batches)
            firsts[case].append(first)
            times[case].append(elapsed)
            ok[case] = ok[case] and samples == expected
    for case in cases:
        shape, workers, threads = _parse(case)
        median = statistics.median(times[case])
        line = {
            "benchmark": "jpeg",
            "case": case,
            "implementation": implementation(),
            "grain_version": grain_version(),
            "python": sys.version.split()[0],
            "shape": shape,
            "workers": workers,
            "read_threads": threads,
            "elements": batches * BATCH,
            "median_s": round(median, 6),
            "images_per_s": round(batches * BATCH / median, 1),
            "first_batch_s": round(statistics.median(firsts[case]), 4),
            "ok": bool(ok[case]),
            "digest": digest,
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
