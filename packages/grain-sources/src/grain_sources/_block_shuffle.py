"""BlockShuffle: an opt-in shuffle that keeps neighbouring records together, for locality.

A global shuffle of a bucket reads every record with a request of its own. A
block shuffle orders *blocks* of `block_records` consecutive records at random,
and the records inside each block at random, so a batch of positions touches a
few stretches of a file: their chunks are read with one coalesced request per
stretch, and chunks of group_size > 1 files are read once per block.

The price is randomness: the records of one block come out together (within
`block_records` positions of each other), so elements that are neighbours in
the files stay correlated in the stream. Every record still appears exactly once
per epoch, and the block order is a uniform random permutation. Keep
`block_records` small against the dataset (e.g. 16-256), write the files
pre-shuffled when their order is meaningful, and mix several sources to spread
blocks further.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from grain_sources._checks import as_index, record_index, record_indices
from grain_sources._protocol import reads_in_batches


def block_permutation(length: int, block_records: int, seed: int) -> np.ndarray:
    """A permutation of range(length): random blocks of consecutive indices, shuffled inside."""
    rng = np.random.default_rng(seed)
    blocks = -(-length // block_records)
    order = rng.permutation(blocks)
    # Position k of the output is record k % block_records of block order[k // block_records];
    # the last block may be short, so positions past the end are dropped.
    starts = order * block_records
    within = rng.permuted(np.tile(np.arange(block_records, dtype=np.int64), (blocks, 1)), axis=1)
    indices = (starts[:, None] + within).reshape(-1)
    return indices[indices < length]


class BlockShuffle:
    """`source` read in a block-shuffled order (see the module's note on randomness).

    Args:
      source: a random-access source (an ArrayRecordDataSource over a bucket).
      block_records: how many consecutive records stay together.
      seed: the seed of the order; use a new one per epoch for a new order.

    Example::

        source = grain.sources.ArrayRecordDataSource("s3://bucket/train@64")
        ds = grain.MapDataset.source(grain_sources.BlockShuffle(source, 64, seed=epoch))
    """

    # __getitems__ returns [self[i] for i in indices]: see RandomAccessDataSource.
    batched_reads: ClassVar[bool] = True

    def __init__(self, source: Any, block_records: int, seed: int):
        self._block = as_index(block_records, "block_records")
        if self._block < 1:
            raise ValueError(f"`block_records` must be >= 1, got {self._block}.")
        self._source = source
        # The wrapped source's own batched read only where it declares one.
        self._batched = reads_in_batches(source)
        self._seed = as_index(seed, "seed")
        self._order = block_permutation(len(source), self._block, self._seed)

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, index: int) -> Any:
        return self._source[int(self._order[record_index(index, len(self._order), self)])]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        wanted = self._order[record_indices(indices, len(self._order), self)]
        if not self._batched:
            return [self._source[i] for i in wanted.tolist()]
        return list(self._source.__getitems__(wanted))

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self._source, "block": self._block, "seed": self._seed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["source"], state["block"], state["seed"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"BlockShuffle({self._source!r}, block_records={self._block}, seed={self._seed})"
