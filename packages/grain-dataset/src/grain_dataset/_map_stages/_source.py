"""Where MapDatasets start: a random-access source or Sequence, and `range`."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

import numpy as np

from grain_dataset._core._base import register
from grain_dataset._core._stage import MapStage, epochs_of
from grain_dataset._runtime._fingerprint import token
from grain_index import checks
from grain_sources import ArrayDataSource, reads_in_batches

_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


def _bound_reads(source: Any) -> bool:
    """Whether `source.__getitem__` is exactly what `source[i]` calls.

    True for an instance of a class written in Python whose bases, up to
    `object`, are all written in Python too, none defining `__getattribute__`,
    and with no instance attribute `__getitem__`:
    mapping the bound method then makes the same calls as ``source[i]`` without
    the type-slot dispatch per record. Built-in and C types keep ``source[i]``.
    """
    for cls in type(source).__mro__[:-1]:
        if not cls.__flags__ & _HEAP_TYPE or "__getattribute__" in vars(cls):
            return False
    return "__getitem__" not in getattr(source, "__dict__", {})


@register("source")
class SourceMapDataset(MapStage):
    """Reads a random-access source: anything with `__len__` and `__getitem__`.

    Index i reads record ``i % len(source)``: every epoch reads the same records.
    Records are read with ``source[i]``, as Grain reads them; a source whose class
    declares ``batched_reads = True`` (see grain_sources.RandomAccessDataSource)
    is asked with `__getitems__(indices)` once per batch of indices instead.
    """

    def _fingerprint_token(self) -> str | None:
        return token("source", type(self._source).__name__, f"len={self._length}")

    def __init__(self, source: Any):
        super().__init__()
        if (
            isinstance(source, Mapping)
            and source
            and all(isinstance(value, np.ndarray) for value in source.values())
        ):
            # A dict of arrays is columnar data: record i holds row i of each.
            source = ArrayDataSource(source)
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(
                "`source` must support random access (`__len__` and `__getitem__`), like a "
                f"list or a grain.sources.RandomAccessDataSource; got {type(source).__name__}."
            )
        self._source = source
        self._length = checks.int_in_range(len(source), "len(source)", 0)
        # Decided once per source: an undeclared `__getitems__` (a tfds mock's raises,
        # a torch-style one may collate) is never called.
        self._batched = reads_in_batches(source)
        self._bound_reads = _bound_reads(source)
        # What reads many records stacked (grain_dataset._map_stages._gather): an array of
        # numbers or strings (as an ArrayDataSource over it, no copy), or a declared source with
        # `gather`.
        self._gatherer: Any = None
        if isinstance(source, np.ndarray):
            if source.dtype != object and source.ndim >= 1:
                self._gatherer = ArrayDataSource(source)
        elif self._batched and reads_in_batches(source, "gather"):
            self._gatherer = source

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        return self._source[index % self._length]

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        if not self._length:
            raise IndexError("the dataset is empty: it has no element at any index.")
        records = epochs_of(indices, self._length)[1].tolist()
        if self._batched:
            return list(self._source.__getitems__(records))
        source = self._source
        if self._bound_reads:
            return list(map(source.__getitem__, records))
        return [source[record] for record in records]

    def _gatherable(self) -> bool:
        return self._gatherer is not None

    def _gather(self, indices: np.ndarray) -> Any:
        if self._gatherer is None:
            return NotImplemented
        if not self._length:
            raise IndexError("the dataset is empty: it has no element at any index.")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= self._length):
            indices = epochs_of(indices, self._length)[1]
        return self._gatherer.gather(indices)

    def _describe(self) -> str:
        return f"source={type(self._source).__name__}, len={self._length}"


@register("range")
class RangeMapDataset(MapStage):
    """The integers of ``range(start, stop, step)``, the same in every epoch."""

    def _fingerprint_token(self) -> str | None:
        r = self._range
        return token("range", (r.start, r.stop, r.step))

    def __init__(self, start: int, stop: int | None = None, step: int = 1):
        super().__init__()
        start = checks.as_int(start, "start")
        if stop is None:
            start, stop = 0, start
        stop = checks.as_int(stop, "stop")
        step = checks.as_int(step, "step")
        if step == 0:
            raise ValueError("`step` of MapDataset.range must not be 0.")
        self._range = builtins.range(start, stop, step)

    def __len__(self) -> int:
        return len(self._range)

    def _getitem(self, index: int) -> int:
        return self._range[index % len(self._range)]

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        r = self._range
        if not len(r):
            raise IndexError("the dataset is empty: it has no element at any index.")
        offsets = epochs_of(indices, len(r))[1]
        if abs(r.start) + abs(r.step) * len(r) < 1 << 62:
            return (offsets * r.step + r.start).tolist()
        return [r[offset] for offset in offsets.tolist()]

    def _describe(self) -> str:
        r = self._range
        return f"start={r.start}, stop={r.stop}, step={r.step}"
