"""tf.data on the MNIST-shaped epoch of latency_memory.py, as JSON lines.

Usage: python benchmarks/tfdata_mnist.py [--repeats 3] [--size 60000]

Runs under an interpreter that has tensorflow (``pip install tensorflow-cpu`` in
the throwaway comparison venv; tensorflow never enters uv.lock). The same data
and work as latency_memory.py's ``mnist_*`` cases, in tf.data's two forms:

- ``tf_per_element``: from_tensor_slices, shuffle(whole epoch), map(normalize,
  num_parallel_calls=AUTOTUNE) per record, batch(128);
- ``tf_batch_then_map``: from_tensor_slices, shuffle, batch(128),
  map(normalize, AUTOTUNE) on whole batches, prefetch(AUTOTUNE): the idiomatic
  fast form.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # tensorflow prints to stdout: only JSON lines go there
import tensorflow as tf  # noqa: E402

BATCH = 128


def _normalize(record: dict[str, Any]) -> dict[str, Any]:
    return {"image": tf.cast(record["image"], tf.float32) / 255.0, "label": record["label"]}


def _dataset(form: str, images: np.ndarray, labels: np.ndarray) -> Any:
    ds = tf.data.Dataset.from_tensor_slices({"image": images, "label": labels})
    ds = ds.shuffle(len(labels), seed=1)
    if form == "tf_per_element":
        return ds.map(_normalize, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
    ds = ds.batch(BATCH).map(_normalize, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", type=int, default=60_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (args.size, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, args.size).astype(np.int64)
    for form in ("tf_per_element", "tf_batch_then_map"):
        runs = []
        for _ in range(args.repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            seen = sum(int(batch["label"].shape[0]) for batch in _dataset(form, images, labels))
            runs.append((time.perf_counter() - start, seen))
        seconds = statistics.median(s for s, _ in runs[1:])
        line = {
            "case": form,
            "implementation": "tf.data",
            "tensorflow": tf.__version__,
            "python": sys.version.split()[0],
            "unit": "images/s",
            "median_s": seconds,
            "rate": args.size / seconds,
            "ok": all(seen == args.size for _, seen in runs),
        }
        print(json.dumps(line), file=out, flush=True)


if __name__ == "__main__":
    main()
