"""Integer positions written as arithmetic runs ``[start, step, count]``.

States that owe positions (ElasticIterator's leftovers, a resized record-range
read) store them this way: a few integers per run instead of one per position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def encode_runs(positions: np.ndarray) -> list[list[int]]:
    """`positions` as maximal arithmetic runs ``[start, step, count]``, left to right."""
    n = len(positions)
    if n == 0:
        return []
    if n == 1:
        return [[int(positions[0]), 1, 1]]
    steps = np.diff(positions)
    # A run is broken where the step changes; the element after a break starts a new run.
    breaks = np.flatnonzero(steps[1:] != steps[:-1]) + 1
    runs = []
    start = 0
    while start < n:  # one pass per run, not per element
        if start == n - 1:
            runs.append([int(positions[start]), 1, 1])
            break
        following = breaks[np.searchsorted(breaks, start + 1) :]
        end = int(following[0]) if len(following) else n - 1  # last element of the run
        runs.append([int(positions[start]), int(steps[start]), end - start + 1])
        start = end + 1
    return runs


def decode_runs(runs: Sequence[Sequence[int]]) -> np.ndarray:
    """The positions that `encode_runs` described."""
    if not runs:
        return np.zeros(0, dtype=np.int64)
    table = np.asarray(runs, dtype=np.int64).reshape(-1, 3)
    starts, steps, counts = table[:, 0], table[:, 1], table[:, 2]
    offsets = np.cumsum(counts) - counts
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(offsets, counts)
    return np.repeat(starts, counts) + np.repeat(steps, counts) * within
