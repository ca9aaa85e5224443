"""Mixing by tokens: how far each component's token share strays from its target, JSON lines.

Usage: python benchmarks/token_mix.py [--tokens 50000000] [--repeats 5] [--seed 0]

Three components of documents with lognormal lengths (sigma 1) whose means
differ 10x (100, 316, 1000 tokens), target token shares 0.5 / 0.3 / 0.2.
Two corpora: lengths truncated at 4096 tokens (a context length: longer
documents are split upstream of the mix in LLM pipelines), and untruncated.

Share lines (``"kind": "share"``), one per corpus, mix and window: the stream
of tokens is cut into consecutive windows of `window` tokens (a window may
start or end inside a document), and each window's share of each component is
compared with its target; ``max_dev`` is the largest absolute deviation over
all windows and components (``p99_dev`` the 99th percentile of each window's
largest). The mixes:

  map_tokens          MapDataset.mix(parts, weights, costs=lengths)
  iter_tokens         IterDataset.mix(parts, weights, costs=length function),
                      which reads each component's next element ahead
  map_records         MapDataset.mix(parts, weights): today's record weights
  map_records_scaled  record weights divided by each component's mean length,
                      the best a user can do today with record weights

``largest_doc_share`` is the largest document over the window: a window
holding it (or most of it) is that far from any mixture, whatever the order.

Throughput lines (``"kind": "throughput"``): one pass over the same number
of elements of each mix (elements are ints, so the mix itself is what is
timed), repeats interleaved, medians, and the ratio of the token mix to the
record mix; ``build_s`` is the first element's latency (the token mix builds
its first chunk's table then) and ``peak_mb`` the memory it allocates
(tracemalloc).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np

import grain

MEANS = (100.0, 316.0, 1000.0)
WEIGHTS = (0.5, 0.3, 0.2)
SIGMA = 1.0
WINDOWS = (10**5, 10**6)
NO_THREADS = grain.ReadOptions(num_threads=0)


def corpus(tokens: int, seed: int, max_length: int | None) -> list[np.ndarray]:
    """Per-component document lengths, about `tokens` in all at the target shares (+10 %)."""
    rng = np.random.default_rng(seed)
    lengths = []
    for mean, weight in zip(MEANS, WEIGHTS, strict=True):
        count = int(1.1 * tokens * weight / mean) + 1
        # A lognormal of this mean: median = mean / exp(sigma^2 / 2).
        draws = rng.lognormal(np.log(mean) - SIGMA**2 / 2, SIGMA, count)
        draws = np.maximum(np.rint(draws), 1)
        if max_length is not None:
            draws = np.minimum(draws, max_length)
        lengths.append(draws.astype(np.int64))
    return lengths


def _parts(lengths: Sequence[np.ndarray]) -> list[grain.MapDataset]:
    # Element = length * 4 + component: the stream tells both without a lookup table.
    return [grain.MapDataset.source((lens * 4 + j).tolist()) for j, lens in enumerate(lengths)]


def _tokens_of(element: int) -> int:
    return element // 4


def mixes(lengths: Sequence[np.ndarray]) -> dict[str, Any]:
    """Each mix's builder (a function of nothing): the first element's latency includes it."""
    parts = _parts(lengths)
    means = [float(lens.mean()) for lens in lengths]
    scaled = [w / m for w, m in zip(WEIGHTS, means, strict=True)]

    def iters() -> list[grain.IterDataset]:
        return [p.repeat().to_iter_dataset(NO_THREADS) for p in parts]

    return {
        "map_tokens": lambda: grain.MapDataset.mix(parts, list(WEIGHTS), costs=list(lengths)),
        "iter_tokens": lambda: grain.IterDataset.mix(iters(), list(WEIGHTS), costs=_tokens_of),
        "map_records": lambda: grain.MapDataset.mix(parts, list(WEIGHTS)),
        "map_records_scaled": lambda: grain.MapDataset.mix(parts, scaled),
        "iter_records": lambda: grain.IterDataset.mix(iters(), list(WEIGHTS)),
    }


def _iterate(ds: Any, count: int) -> np.ndarray:
    if isinstance(ds, grain.MapDataset):
        ds = ds.repeat().to_iter_dataset(NO_THREADS)
    it = iter(ds)
    out = np.fromiter((next(it) for _ in range(count)), dtype=np.int64, count=count)
    if hasattr(it, "close"):
        it.close()
    return out


def window_deviation(stream: np.ndarray, window: int) -> tuple[float, float, int]:
    """(max, p99 of each window's max) deviation of the windows' token shares; windows."""
    components, tokens = stream % 4, stream // 4
    ends = np.cumsum(tokens)
    bounds = np.arange(window, int(ends[-1]) + 1, window, dtype=np.int64)
    # The document each bound falls in, and how many of its tokens come before the bound.
    at = np.searchsorted(ends, bounds, side="left")
    before = bounds - (ends[at] - tokens[at])
    deviations = np.zeros(len(bounds))
    for j, target in enumerate(WEIGHTS):
        mine = np.cumsum(np.where(components == j, tokens, 0))
        upto = np.where(at > 0, mine[at - 1], 0) + np.where(components[at] == j, before, 0)
        per_window = np.diff(np.concatenate([[0], upto])) / window
        deviations = np.maximum(deviations, np.abs(per_window - target))
    return float(deviations.max()), float(np.percentile(deviations, 99)), len(bounds)


def _timed_pass(ds: Any, count: int) -> float:
    start = time.perf_counter()
    _iterate(ds, count)
    return time.perf_counter() - start


def _first_element(build: Any) -> tuple[float, float]:
    """(seconds to build the mix and read its first element, peak MB allocated)."""
    tracemalloc.start()
    start = time.perf_counter()
    _iterate(build(), 1)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak / 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for corpus_name, max_length in (("truncated_4096", 4096), ("untruncated", None)):
        lengths = corpus(args.tokens, args.seed, max_length)
        builders = mixes(lengths)
        built = {name: build() for name, build in builders.items()}
        # Elements for about `tokens` tokens at the target mixture.
        mean = sum(w * m for w, m in zip(WEIGHTS, MEANS, strict=True))
        count = int(args.tokens / mean * 0.9)
        biggest = int(max(lens.max() for lens in lengths))
        streams = {name: _iterate(ds, count) for name, ds in built.items()}
        for name, stream in streams.items():
            if name == "iter_records":
                continue
            for window in WINDOWS:
                worst, p99, windows = window_deviation(stream, window)
                line = {
                    "kind": "share",
                    "corpus": corpus_name,
                    "mix": name,
                    "window": window,
                    "windows": windows,
                    "max_dev": round(worst, 5),
                    "p99_dev": round(p99, 5),
                    "largest_doc_share": round(biggest / window, 5),
                    "goal": 0.005 if window == 10**6 and name.endswith("tokens") else None,
                }
                print(json.dumps(line), flush=True)
        if corpus_name != "truncated_4096":
            continue
        # Throughput: the token mixes against the record mixes, interleaved.
        pairs = (("map_tokens", "map_records"), ("iter_tokens", "iter_records"))
        times: dict[str, list[float]] = {name: [] for pair in pairs for name in pair}
        for _ in range(args.repeats):
            for pair in pairs:
                for name in pair:
                    times[name].append(_timed_pass(built[name], count))
        for ours, reference in pairs:
            ours_s, ref_s = statistics.median(times[ours]), statistics.median(times[reference])
            line = {
                "kind": "throughput",
                "case": ours,
                "reference": reference,
                "elements": count,
                "repeats": args.repeats,
                "median_s": round(ours_s, 4),
                "reference_median_s": round(ref_s, 4),
                "elements_per_s": round(count / ours_s),
                "reference_elements_per_s": round(count / ref_s),
                "ratio": round(ref_s / ours_s, 4),
                "load_1min": load,
            }
            line["build_s"], line["peak_mb"] = (round(v, 4) for v in _first_element(builders[ours]))
            ref = _first_element(builders[reference])
            line["reference_build_s"], line["reference_peak_mb"] = (round(v, 4) for v in ref)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
