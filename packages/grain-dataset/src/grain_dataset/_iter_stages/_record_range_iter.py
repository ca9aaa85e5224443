"""Streaming datasets sharded by record range: Parquet rows, TFRecord records, JSON lines.

The records of all files are numbered 0 .. N-1 across the files in order
(grain_sources' RecordFiles). A host's shard is a contiguous range of those
numbers (`grain_index.shard_bounds`: sizes differ by at most one record, or
are equal with `drop_remainder`), whatever the number of files: two files
serve eight hosts. Inside a worker of `mp_prefetch` (the pipeline's worker
slice, see grain_dataset._worker_slice) the range is split again: worker w of
n takes the records w, w+n, ... of it, so that the workers' elements, taken in
turn as mp_prefetch takes them, are the records in the order one process reads
them; with ``sequential_slice`` it takes the w-th contiguous part.

So the records an iterator reads are a progression ``start + step * k`` for k
in [0, length), and its state is two integers: ``{"next": k, "record": the
number of the next record}`` (the second lets `set_state` refuse a state of
another shard; a state with k = 0 fits any, as mp_prefetch gives each worker
the initial state of an iterator made outside the workers). Restoring reads
only from that record on: a Parquet row group and an offset in it, a TFRecord
or JSON-lines byte offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from grain_dataset._core._base import DatasetIterator, IterDataset
from grain_dataset._core._state import check_state
from grain_index import NoSharding, ShardOptions, shard_bounds
from grain_sources import (
    JsonLinesRecordFiles,
    ParquetRecordFiles,
    RecordFiles,
    TFRecordRecordFiles,
)

T = TypeVar("T")

# Records read in one call of the files' reader: enough that the per-call cost (numpy
# locate, one Arrow conversion) is small per record, few enough to hold.
_BLOCK = 1024


class RecordRangeIterDataset(IterDataset[T]):
    """Base of the datasets that stream a shard of numbered records (see the module docstring).

    Args:
      files: the records, as a grain_sources RecordFiles.
      shard_options: which contiguous range of the records this host reads;
        None reads all of them (per worker, a share, inside `mp_prefetch`).
    """

    def __init__(self, files: RecordFiles, shard_options: ShardOptions | None = None):
        super().__init__()
        if shard_options is None:
            shard_options = NoSharding()
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                "`shard_options` must be a grain.sharding.ShardOptions (e.g. "
                "ShardOptions(shard_index=jax.process_index(), shard_count=jax.process_count())), "
                f"got {type(shard_options).__name__}."
            )
        self._files = files
        self._shard_options = shard_options
        self._range = shard_bounds(files.num_records, shard_options)

    @property
    def paths(self) -> list[str]:
        """The files, in the order their records are numbered."""
        return self._files.paths

    @property
    def num_records(self) -> int:
        """The number of records in all files together."""
        return self._files.num_records

    @property
    def shard_range(self) -> tuple[int, int]:
        """The [start, stop) record numbers this host's shard reads."""
        return self._range

    def __iter__(self) -> DatasetIterator[T]:
        return _RecordRangeIterator(self)

    def __repr__(self) -> str:
        start, stop = self._range
        return (
            f"{type(self).__name__}({len(self._files.paths)} files, records [{start}, {stop}) "
            f"of {self._files.num_records})"
        )


class _RecordRangeIterator(DatasetIterator[T]):
    def __init__(self, dataset: RecordRangeIterDataset[T]):
        super().__init__()
        self._dataset = dataset
        start, stop = dataset._range
        step = 1
        worker_slice = self._ctx.worker_slice
        if worker_slice is not None:
            index, count, sequential = worker_slice
            if sequential:
                size, extra = divmod(stop - start, count)
                start += index * size + min(index, extra)
                stop = start + size + (index < extra)
            else:
                start, step = start + index, count
        self._start, self._step = start, step
        self._length = len(range(start, stop, step))
        self._next = 0  # elements handed out
        self._block: list[T] = []
        self._block_start = 0  # the k of self._block[0]
        self._reader = dataset._files.reader()

    def __next__(self) -> T:
        k = self._next
        offset = k - self._block_start
        if not 0 <= offset < len(self._block):
            if k >= self._length:
                self._reader.close()
                raise StopIteration
            ks = np.arange(k, min(k + _BLOCK, self._length), dtype=np.int64)
            self._block = self._reader.read(self._start + self._step * ks)
            self._block_start, offset = k, 0
        self._next = k + 1
        return self._block[offset]

    def get_state(self) -> dict[str, Any]:
        return {"next": self._next, "record": self._start + self._step * self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("next", "record"))
        k, record = state["next"], state["record"]
        # k = 0 is the start of any share: mp_prefetch hands each worker the state of
        # an iterator made outside the workers, before it reads.
        if k > self._length or (k and record != self._start + self._step * k):
            raise ValueError(
                f"state {state!r} does not fit {stage}: this iterator reads records "
                f"{self._start}, {self._start + self._step}, ... ({self._length} of them), so "
                "the state was saved with other shard options, files or worker count: restore "
                "it into the pipeline it was saved from."
            )
        self._next = k
        self._block, self._block_start = [], 0

    def close(self) -> None:
        self._reader.close()
        self._block = []


class ShardedParquetIterDataset(RecordRangeIterDataset[dict[str, Any]]):
    """The rows of Parquet files as dicts, sharded over hosts and workers by row range.

    Args:
      paths: Parquet files (a path, a glob, ``name@N``, or a list of them);
        their rows are numbered across the files in this order.
      shard_options: which contiguous range of rows this host reads (sizes
        differ by at most one row); None reads all.
      columns: the columns to read; None reads all.

    A host's range may start inside a row group: it reads that row group and
    converts only its own rows. The state is ``{"next": k, "record": r}``;
    restoring reads from the row group holding row r, never an earlier one.

    Example::

        ds = ShardedParquetIterDataset(
            ["a.parquet", "b.parquet"],
            shard_options=grain.sharding.ShardOptions(process_index, process_count),
        )
    """

    def __init__(
        self,
        paths: Any,
        *,
        shard_options: ShardOptions | None = None,
        columns: Sequence[str] | None = None,
    ):
        super().__init__(ParquetRecordFiles(paths, columns=columns), shard_options)


class ShardedTFRecordIterDataset(RecordRangeIterDataset[bytes]):
    """The records of TFRecord files as bytes, sharded over hosts and workers by record range.

    Args:
      paths: TFRecord files (a path, a glob, ``name@N``, or a list of them).
      shard_options: which contiguous range of records this host reads;
        None reads all.
      verify_crc: check both checksums of every record read.

    Every record's byte offset comes from the file's sidecar index
    (`grain_sources.write_tfrecord_index`) or, without one, from one pass over
    the record headers when the dataset is built and again in each iterator
    that reads the file: write the index once for large files.
    """

    def __init__(
        self,
        paths: Any,
        *,
        shard_options: ShardOptions | None = None,
        verify_crc: bool = True,
    ):
        super().__init__(TFRecordRecordFiles(paths, verify_crc=verify_crc), shard_options)


class ShardedJsonLinesIterDataset(RecordRangeIterDataset[Any]):
    """The lines of JSON-lines files, parsed, sharded over hosts and workers by record range.

    Args:
      paths: JSON-lines files (a path, a glob, ``name@N``, or a list of them);
        each non-empty line is one record, parsed with ``json.loads``.
      shard_options: which contiguous range of records this host reads;
        None reads all.

    The line offsets are found with one vectorized pass over each file when
    the dataset is built, and again in each iterator that reads the file.
    """

    def __init__(self, paths: Any, *, shard_options: ShardOptions | None = None):
        super().__init__(JsonLinesRecordFiles(paths), shard_options)
