"""What the read-ahead's width tuner decided, run after run: a developer's tool.

Usage: uv run python packages/grain-dataset/tools/read_ahead_trace.py [--shape mapbatch|iterbatch]
       [--threads 2] [--runs 4] [--size 3840]

Runs benchmarks/jpeg.py's pipeline (JPEG decode, crop, flip; batches of 128) with
``ReadOptions(num_threads=THREADS)`` `runs` times in one process and prints, for each
run, images/s and every change of the tuner's width: (seconds since iter(), width
before, width after); 0 is reading in the consumer's thread. On a quiet machine the
same pipeline should show the same decisions on every run. It reaches into
grain_dataset's private `_read_ahead` module (it wraps `_WidthTuner.record`), so it
lives beside grain-dataset and not in benchmarks/, whose scripts also run under
upstream Grain.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import jpeg  # benchmarks/jpeg.py, found through the path above

from grain_dataset._threads import _read_ahead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=jpeg.SHAPES, default="iterbatch")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--size", type=int, default=3840)
    args = parser.parse_args()
    changes: list[tuple[float, int, int]] = []
    start = [0.0]
    record = _read_ahead._WidthTuner.record

    def traced(self: Any, *measured: Any) -> None:
        before = self.width
        record(self, *measured)
        if self.width != before:
            changes.append((round(time.perf_counter() - start[0], 3), before, self.width))

    _read_ahead._WidthTuner.record = traced  # type: ignore[method-assign]
    batches = args.size // jpeg.BATCH
    ds = jpeg._pipeline(jpeg.JpegSource(batches * jpeg.BATCH), args.shape, args.threads, 0)
    for run in range(1, args.runs + 1):
        changes.clear()
        start[0] = time.perf_counter()
        _, elapsed, _ = jpeg._run(ds, batches)
        rate = batches * jpeg.BATCH / elapsed
        print(f"run {run}: {rate:,.0f} images/s, width changes {changes}", flush=True)


if __name__ == "__main__":
    main()
