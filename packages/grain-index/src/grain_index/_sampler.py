"""Samplers: the global index math of the DataLoader.

A sampler turns a step number k = 0, 1, 2, ... of one shard into a
`RecordMetadata`: a globally unique `index` (for checkpointing), the
`record_key` to read, and a per-record `rng`. Everything is arithmetic on k,
so ``sampler[k]`` is O(1) for any k and nothing is materialized::

    epoch, offset = divmod(k, shard_size)
    position      = shard_start + offset                     # this shard's slice
    record_key    = shuffle_epoch(position)  or  position    # global shuffle
    index         = k * shard_count + shard_index            # unique over shards

Every epoch shuffles all n positions with its own derived seed, and each shard
reads its own slice of them; so each epoch's shards still partition the records
while a record moves between shards from epoch to epoch.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from grain_index import _seeds, _shuffle, _validate
from grain_index._sharding import NoSharding, ShardOptions, shard_bounds

T = TypeVar("T")


@dataclasses.dataclass
class RecordMetadata:
    """What a sampler says about one record.

    Attributes:
      index: a monotonically increasing number, unique for each record over
        all shards; the pipeline's position, used for checkpointing.
      record_key: the key of the record in the data source.
      rng: a generator for random transformations of this record, or None
        when the sampler has no seed.
    """

    index: int
    record_key: int | None = None
    rng: np.random.Generator | None = None

    def __repr__(self) -> str:
        # A generator's own repr carries its memory address: show its kind only.
        rng = None if self.rng is None else f"Generator({type(self.rng.bit_generator).__name__})"
        return f"RecordMetadata(index={self.index}, record_key={self.record_key}, rng={rng})"

    def remove_record_key(self) -> RecordMetadata:
        """Returns a copy without the record key (after the record was read)."""
        return dataclasses.replace(self, record_key=None)


@dataclasses.dataclass
class Record(Generic[T]):
    """A record's data together with its metadata."""

    metadata: RecordMetadata
    data: T


@runtime_checkable
class Sampler(Protocol):
    """Anything that maps a step number to a `RecordMetadata`.

    ``sampler[k]`` returns the metadata of step k and raises IndexError when
    the sampler has fewer steps. A custom sampler only needs `__getitem__`::

        class EveryOther:
            def __getitem__(self, k):
                return RecordMetadata(index=k, record_key=2 * k)
    """

    def __getitem__(self, index: int) -> RecordMetadata: ...


SEED_LIMIT = 1 << 32
"""Sampler seeds are integers in [0, SEED_LIMIT), as in Grain 0.2.18."""


def _check_num_records(num_records: Any) -> int:
    value = _validate.as_int(num_records, "num_records")
    if value < 1:
        raise ValueError(
            f"Invalid number of records in Sampler. Got {value} records, but number of "
            "records must be greater than 0. "
            f"`num_records` must be >= 1, got {value}: a sampler needs records to read "
            "(pass len(data_source), and check that the data source is not empty)."
        )
    return value


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise TypeError(
            f"Expected seed of int type. Got seed with type {type(seed)}. "
            "`seed` must be an integer in [0, 2**32)."
        )
    value = _validate.as_int(seed, "seed")
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(
            "Seed should be positive 32-bit integer. "
            f"`seed` must be an integer in [0, 2**32), got {value}; derive a smaller one, "
            "e.g. seed % 2**32."
        )
    return value


class IndexSampler:
    """Shards, shuffles (a fresh global order each epoch) and repeats record keys.

    Args:
      num_records: the number of records in the data source, >= 1.
      shard_options: which shard to read; `NoSharding()` (the default) reads all.
      shuffle: whether to shuffle globally; every epoch gets a new order.
      num_epochs: how many epochs, >= 1; None (the default) repeats forever.
      seed: an integer in [0, 2**32); needed when `shuffle` is True. With a
        seed each record also gets its own `rng`.

    Example::

        sampler = IndexSampler(num_records=5, shuffle=True, num_epochs=2, seed=0)
        for metadata in sampler:   # the sampler is an iterator: this consumes it
            print(metadata.index, metadata.record_key)
        sampler[7]                 # any step, in O(1)

    ``len(sampler)`` is the number of steps; ``sys.maxsize`` when it repeats
    forever (as in Grain), where `num_steps` is None.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions = NoSharding(),  # noqa: B008 (frozen, as in Grain)
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ):
        self._num_records = _check_num_records(num_records)
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                "`shard_options` must be a ShardOptions (e.g. grain.sharding.NoSharding()), "
                f"got {type(shard_options).__name__}."
            )
        if not isinstance(shuffle, bool):
            raise TypeError(f"`shuffle` must be a bool, got {type(shuffle).__name__}.")
        if num_epochs is not None:
            num_epochs = _validate.as_int(num_epochs, "num_epochs")
            if num_epochs < 1:
                raise ValueError(
                    f"Invalid number of epochs in Index Sampler.Got {num_epochs} epochs, but "
                    "number of epochs must be greater than 0. "
                    f"`num_epochs` must be >= 1, got {num_epochs}; pass None to repeat forever."
                )
        if seed is not None:
            seed = _check_seed(seed)
        elif shuffle:
            raise ValueError(
                "Shuffling requires specifying a seed. "
                "`shuffle=True` needs a seed: pass seed=<int in [0, 2**32)>."
            )
        self._shard_options = shard_options
        self._shuffle = shuffle
        self._num_epochs = num_epochs
        self._seed = seed
        self._start, end = shard_bounds(self._num_records, shard_options)
        self._shard_size = end - self._start
        self._next = 0

    def __repr__(self) -> str:
        # Deterministic on purpose: checkpoints compare it to detect a changed sampler.
        return (
            f"{type(self).__name__}(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r}, shuffle={self._shuffle}, "
            f"num_epochs={self._num_epochs}, seed={self._seed})"
        )

    @property
    def num_steps(self) -> int | None:
        """Steps this shard yields over all epochs; None when it repeats forever."""
        if self._num_epochs is None:
            return None if self._shard_size else 0
        return self._num_epochs * self._shard_size

    def __len__(self) -> int:
        """The number of steps; ``sys.maxsize`` when the sampler repeats forever."""
        steps = self.num_steps
        return sys.maxsize if steps is None else steps

    def __iter__(self) -> Iterator[RecordMetadata]:
        return self

    def __next__(self) -> RecordMetadata:
        steps = self.num_steps
        if steps is not None and self._next >= steps:
            raise StopIteration
        self._next += 1
        return self[self._next - 1]

    def _check_step(self, step: Any) -> int:
        step = _validate.as_int(step, "index")
        steps = self.num_steps
        if step < 0 or (steps is not None and step >= steps):
            bound = "inf" if steps is None else steps
            raise IndexError(
                f"RecordMetadata object index is out of bounds; Got index {step}, allowed "
                f"indices should be in [0, {bound}]. Step {step} is out of range: steps count "
                f"from 0 and this sampler has {bound} steps."
            )
        return step

    def _epoch_seed(self, epoch: int) -> int:
        assert self._seed is not None
        return _seeds.derive_seed(self._seed, "index_sampler/shuffle", epoch)

    def __getitem__(self, step: int) -> RecordMetadata:
        step = self._check_step(step)
        epoch, offset = divmod(step, self._shard_size)
        position = self._start + offset
        if self._shuffle:
            key = _shuffle.index_shuffle(
                position, self._num_records - 1, self._epoch_seed(epoch), _shuffle.DEFAULT_ROUNDS
            )
        else:
            key = position
        index = step * self._shard_options.shard_count + self._shard_options.shard_index
        rng = None
        if self._seed is not None:
            rng = np.random.Generator(
                np.random.Philox(key=_seeds.derive_seed(self._seed, "index_sampler/rng", index))
            )
        return RecordMetadata(index=index, record_key=key, rng=rng)

    def record_keys(self, steps: Any) -> np.ndarray:
        """Vectorized record keys of `steps` (an integer array), as int64.

        ``record_keys(steps)[i] == self[steps[i]].record_key``, without building
        metadata objects: the form a batched reader wants.
        """
        array = _validate.index_array(steps, "steps").astype(np.int64, copy=False)
        if array.size:
            low, high = int(array.min()), int(array.max())
            if low < 0:
                raise IndexError(f"`steps` must be >= 0, got {low}.")
            self._check_step(high)
        if not array.size:
            return array.copy()
        # floor_divide and a subtraction: numpy's divmod is several times slower.
        epochs = array // self._shard_size
        positions = array - epochs * self._shard_size + self._start
        if not self._shuffle:
            return positions
        first, last = int(epochs.min()), int(epochs.max())
        if first == last:
            return _shuffle.index_shuffle_array(
                positions, self._num_records - 1, self._epoch_seed(first)
            )
        keys = np.empty_like(positions)
        # A batch of steps spans few epochs; each epoch is one vectorized call.
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            keys[mask] = _shuffle.index_shuffle_array(
                positions[mask], self._num_records - 1, self._epoch_seed(int(epoch))
            )
        return keys

    def indices(self, steps: Any) -> np.ndarray:
        """Vectorized global `index` of `steps`, as int64."""
        array = _validate.index_array(steps, "steps").astype(np.int64, copy=False)
        return array * self._shard_options.shard_count + self._shard_options.shard_index


class SequentialSampler(IndexSampler):
    """Reads the records of a shard once, in order.

    Args:
      num_records: the number of records in the data source, >= 1.
      shard_options: which shard to read; `NoSharding()` (the default) reads all.
      seed: an integer in [0, 2**32) or None; with a seed each record gets its
        own `rng` (Grain's SequentialSampler ignores its seed).

    Example::

        list(m.record_key for m in SequentialSampler(3)) == [0, 1, 2]
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions | None = NoSharding(),  # noqa: B008 (frozen)
        seed: int | None = None,
    ):
        super().__init__(
            num_records,
            NoSharding() if shard_options is None else shard_options,
            shuffle=False,
            num_epochs=1,
            seed=seed,
        )

    def __repr__(self) -> str:
        return (
            f"SequentialSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r}, seed={self._seed})"
        )
