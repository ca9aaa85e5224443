"""RecordFilesDataSource: the records of streaming formats as a random-access source.

A `RecordFiles` numbers its records, so it can answer ``source[i]``: read
record i. Read one at a time that costs a row group per Parquet row; read in
batches (`__getitems__`, declared with `batched_reads`, as the read-ahead,
batches and workers ask) the sorted batch is read forward in one pass, and a
thread keeps its open file and Parquet row group between batches, so a
pipeline reading positions in order decodes each row group about once per
reader. That makes every MapDataset feature available to Parquet, TFRecord
and JSON-lines files: global shuffles (at a row group's decode per record),
`ElasticIterator` and its resizes, worker-count-independent `mp_prefetch`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_sources._checks import record_index, record_indices
from grain_sources._record_files import RecordFiles, RecordReader


class RecordFilesDataSource:
    """A random-access source over the records of a `RecordFiles`.

    Args:
      files: a ParquetRecordFiles, TFRecordRecordFiles or JsonLinesRecordFiles.

    Each thread reading it keeps its own open file (and Parquet row group)
    between reads; pickling keeps only `files`.

    Example::

        source = RecordFilesDataSource(ParquetRecordFiles("train-*.parquet"))
        ds = grain.MapDataset.source(source).shuffle(seed=0).batch(32)
    """

    batched_reads = True

    def __init__(self, files: RecordFiles):
        if not isinstance(files, RecordFiles):
            raise TypeError(
                "`files` must be a grain_sources RecordFiles (ParquetRecordFiles, "
                f"TFRecordRecordFiles or JsonLinesRecordFiles), got {type(files).__name__}."
            )
        self._files = files
        self._local = threading.local()

    @property
    def files(self) -> RecordFiles:
        """The files read."""
        return self._files

    def __len__(self) -> int:
        return self._files.num_records

    def _reader(self) -> RecordReader:
        reader = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = self._files.reader()
        return reader

    def __getitem__(self, index: int) -> Any:
        return self._reader().read(np.array([record_index(index, len(self), self)]))[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        wanted = record_indices(indices, len(self), self)
        unique, where = np.unique(wanted, return_inverse=True)
        records = self._reader().read(unique)
        if len(unique) == len(wanted):
            return [records[i] for i in where.tolist()]
        # A record asked for twice is returned as two objects: a map that changes one
        # in place must not change the other.
        seen: set[int] = set()
        out = []
        for i in where.tolist():
            out.append(copy.deepcopy(records[i]) if i in seen else records[i])
            seen.add(i)
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"_files": self._files}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._files = state["_files"]
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"RecordFilesDataSource({self._files!r})"
