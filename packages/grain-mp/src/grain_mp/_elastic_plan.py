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

from grain_index import encode_runs


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
