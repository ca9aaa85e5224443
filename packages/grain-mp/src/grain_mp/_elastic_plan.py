"""The index math of `ElasticIterator`: which global positions each shard reads.

A *plan* is what all shards of one run share: the positions still owed from
before the last resize (`leftovers`, in the order they are handed out) and the
`frontier`, the first position that no earlier run has touched. Its sequence
is ``leftovers ++ [frontier, frontier + 1, ...]``; shard s of M reads entries
s, s + M, s + 2M, ... of it, and its own state adds one integer: `taken`, how
many of its entries it has read up to the end of the last batch it delivered.

`replan` turns the states of all old shards into the plan of the next run:
every entry that no old shard took is owed again. Entries below ``M * min(taken)``
were all taken, so only the band between the slowest and the fastest shard is
looked at: the new leftovers number about ``M * (max(taken) - min(taken))``,
whatever the length of the run, and the frontier moves past the band. States
are therefore bounded after any number of resizes.

Leftovers are stored as arithmetic runs ``[start, step, count]``: the fresh
band left by old shard s is one run of step M (they are ordered old shard by
old shard, after the leftovers still owed, which keep their order and so
their runs), so a plan costs a few integers per old shard.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Plan:
    """The shared part of a run's state (see the module docstring)."""

    frontier: int
    leftovers: np.ndarray  # int64 positions, in the order they are handed out

    def runs(self) -> list[list[int]]:
        return encode_runs(self.leftovers)

    def shard_positions(self, shard_index: int, shard_count: int) -> tuple[np.ndarray, int]:
        """(the leftovers shard `shard_index` reads, its first fresh position); step shard_count."""
        owed = self.leftovers
        first_fresh = self.frontier + (shard_index - len(owed)) % shard_count
        return owed[shard_index::shard_count], first_fresh


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


def replan(plan: Plan, taken: Sequence[int]) -> Plan:
    """The plan after all ``len(taken)`` shards of `plan` took ``taken[s]`` entries each.

    Every position that no shard took comes once in the new plan (as a leftover
    or at or past the new frontier), and no position that one took comes again.
    """
    count = len(taken)
    took = np.asarray(taken, dtype=np.int64)
    owed = plan.leftovers
    # Entries below count * min(took) were taken by every shard; past the last one that
    # any shard took, nothing was: only the band between needs a look.
    low = count * int(took.min())
    ends = np.arange(count, dtype=np.int64) + count * (took - 1) + 1
    ends[took == 0] = 0
    end = max(int(ends.max()), len(owed))
    entries = np.arange(low, end, dtype=np.int64)
    shard, row = entries % count, entries // count
    free = entries[row >= took[shard]]
    # Owed entries keep their order (their runs stay whole but for what was taken); fresh
    # ones go old shard by old shard, one run of step `count` each.
    again = owed[free[free < len(owed)]]
    fresh = free[free >= len(owed)]
    fresh = fresh[np.lexsort((fresh // count, fresh % count))]
    positions = np.concatenate([again, plan.frontier + fresh - len(owed)])
    frontier = plan.frontier + max(0, end - len(owed))
    return Plan(frontier=frontier, leftovers=positions.astype(np.int64))
