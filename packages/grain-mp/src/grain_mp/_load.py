"""`load`: Grain's one-call DataLoader over a data source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_dataset import Batch, ReadOptions
from grain_index import IndexSampler, NoSharding, ShardOptions
from grain_mp._data_loader import DataLoader


def load(
    source: Any,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions = NoSharding(),  # noqa: B008 (frozen, as in Grain)
    transformations: Sequence[Any] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | None = 0,
    read_options: ReadOptions | None = None,
) -> DataLoader:
    """A DataLoader reading `source` through an IndexSampler, then `transformations`.

    Args:
      source: a random-access data source (``__len__``, ``__getitem__``), e.g.
        `grain.sources.ArrayRecordDataSource` or ``tfds.data_source(...)``.
      num_epochs: epochs to read; None (the default) repeats forever.
      shuffle: shuffle globally, a new order every epoch (needs `seed`).
      seed: the sampler's seed, an integer in [0, 2**32).
      shard_options: which shard of the records this process reads.
      transformations: transforms (or operations) applied in order.
      batch_size: if given, a final ``Batch(batch_size, drop_remainder)``.
      drop_remainder: drop a last partial batch (only with `batch_size`).
      worker_count: worker processes; 0 reads in this process, None one per CPU.
      read_options: threads and buffer of each process's reading.

    Equivalent to::

        DataLoader(
            data_source=source,
            sampler=IndexSampler(len(source), shard_options, shuffle, num_epochs, seed),
            operations=[*transformations, Batch(batch_size, drop_remainder)],
            worker_count=worker_count,
            read_options=read_options,
        )

    Example::

        loader = grain.load(source, num_epochs=1, shuffle=True, seed=0, batch_size=32)
    """
    if not hasattr(source, "__len__"):
        raise TypeError(
            "`source` must be a random-access data source with `__len__` and `__getitem__` "
            f"(e.g. grain.sources.ArrayRecordDataSource), got {type(source).__name__}."
        )
    if isinstance(transformations, str | bytes) or not hasattr(transformations, "__iter__"):
        raise TypeError(
            "`transformations` must be a sequence of transforms (a list, even for one; () "
            f"for none), got {type(transformations).__name__}."
        )
    operations = list(transformations)
    if batch_size is not None:
        operations.append(Batch(batch_size, drop_remainder=drop_remainder))
    sampler = IndexSampler(
        num_records=len(source),
        shard_options=shard_options,
        shuffle=shuffle,
        num_epochs=num_epochs,
        seed=seed,
    )
    return DataLoader(
        data_source=source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        read_options=read_options,
    )
