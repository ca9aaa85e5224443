"""The DataLoader's operations, and where each one runs: worker side or parent side.

A DataLoader is a MapDataset over the positions k = 0, 1, ... of its sampler
(`SamplerSourceMapDataset`: position k reads ``data_source[sampler[k].record_key]``)
followed by the user's `operations`. `plan_operations` splits them in two:

  worker side   the longest prefix that keeps *one output per position*: maps,
                random maps, maps with index, filters (a filtered position is
                None), and batches as long as no filter came before them. It runs
                as MapDataset stages, so position u of the result depends on u
                only, in whichever process reads it.
  parent side   the rest (the "tail"), from the first batch that follows a filter
                or the first flat map. It runs as a chain of small generators in
                the process that iterates the DataLoader.

Why: mp_prefetch's round robin over slices ``w::n`` of the positions gives back
the single-process order exactly when every position yields exactly one item
(filtered positions travel as None and are dropped by the parent). A batch after
a filter cannot be formed per position, so the worker side groups the positions
it hands over: `unit` is "chunk" (a list of the surviving items of `chunk_size`
consecutive positions, one message per chunk instead of one per element) or
"fan_out" (the list of a flat map's outputs for one position), and the parent
flattens the lists before the tail.

Records: operations see the record data only. When an operation needs the
record's metadata (a RandomMapTransform its `rng`, a MapWithIndex its `index`),
items are `Record(metadata, data)`; otherwise they are the bare data, which is
cheaper to move between processes. A batch's metadata is that of its last record.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from grain_dataset import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    stack,
)
from grain_dataset._stage import MapStage
from grain_index import Record, RecordMetadata

# The kinds of per-element operations, with the method each one calls.
_ELEMENT_KINDS: tuple[tuple[type, str], ...] = (
    (MapTransform, "map"),
    (RandomMapTransform, "random_map"),
    (MapWithIndex, "map_with_index"),
    (FilterTransform, "filter"),
)
_METADATA_KINDS = ("random_map", "map_with_index")


def _name(transform: Any) -> str:
    return type(transform).__qualname__


class ElementOperation:
    """One per-element operation, as a callable on items: the new item, or None to drop it.

    Example::

        op = ElementOperation(MyFilter(), "filter", with_metadata=False)
        op(5)  # 5 when MyFilter().filter(5) is true, else None
    """

    def __init__(self, transform: Any, kind: str, with_metadata: bool):
        self.transform = transform
        self.kind = kind
        self.with_metadata = with_metadata
        self._method = getattr(transform, kind)
        # grain_dataset names a failing stage after its function's __qualname__.
        self.__qualname__ = f"{kind}({_name(transform)})"

    def __call__(self, item: Any) -> Any:
        if self.with_metadata:
            metadata, data = item.metadata, item.data
        else:
            metadata, data = None, item
        kind = self.kind
        if kind == "filter":
            return item if self._method(data) else None
        if kind == "map":
            result = self._method(data)
        elif kind == "random_map":
            rng = metadata.rng
            if rng is None:
                raise ValueError(
                    f"{_name(self.transform)} is a RandomMapTransform but the sampler gave "
                    "record no `rng`: create the sampler with a seed (IndexSampler(..., seed=0))."
                )
            result = self._method(data, rng)
        else:  # map_with_index
            result = self._method(metadata.index, data)
        if result is None:
            # None marks a filtered position inside the pipeline: a map must not make one.
            raise ValueError(
                f"{_name(self.transform)}.{kind} returned None, which the DataLoader cannot "
                "pass on; return a value, or drop elements with a FilterTransform."
            )
        return Record(metadata, result) if self.with_metadata else result

    def __repr__(self) -> str:
        return f"ElementOperation({self.__qualname__})"


class BatchOperation:
    """Combines a list of items into one batch item (`batch_fn`, or stacking the PyTrees).

    With metadata, the batch is ``Record(last item's metadata, batch of the data)``.
    """

    def __init__(self, batch: Batch, with_metadata: bool):
        self.batch = batch
        self.batch_size = batch.batch_size
        self.drop_remainder = batch.drop_remainder
        self.with_metadata = with_metadata
        self._fn: Callable[[Sequence[Any]], Any] = batch.batch_fn or stack
        self.__qualname__ = f"Batch(batch_size={batch.batch_size})"

    def __call__(self, items: Sequence[Any]) -> Any:
        if self.with_metadata:
            return Record(items[-1].metadata, self._fn([item.data for item in items]))
        return self._fn(items)

    def __repr__(self) -> str:
        return f"BatchOperation({self.batch!r})"


class FlatMapOperation:
    """Splits one item into the list of its flat map's outputs (each with the same metadata)."""

    def __init__(self, transform: FlatMapTransform, with_metadata: bool):
        max_fan_out = getattr(transform, "max_fan_out", None)
        if isinstance(max_fan_out, bool) or not isinstance(max_fan_out, int) or max_fan_out < 1:
            raise ValueError(
                f"{_name(transform)} is a FlatMapTransform and needs an integer "
                f"`max_fan_out` >= 1 (the most outputs per element), got {max_fan_out!r}."
            )
        self.transform = transform
        self.max_fan_out = max_fan_out
        self.with_metadata = with_metadata
        self.__qualname__ = f"flat_map({_name(transform)})"

    def __call__(self, item: Any) -> list[Any]:
        data = item.data if self.with_metadata else item
        outputs = list(self.transform.flat_map(data))
        if len(outputs) > self.max_fan_out:
            raise ValueError(
                f"{_name(self.transform)}.flat_map returned {len(outputs)} elements, more than "
                f"its max_fan_out={self.max_fan_out}; raise `max_fan_out`."
            )
        if self.with_metadata:
            return [Record(item.metadata, output) for output in outputs]
        return outputs

    def __repr__(self) -> str:
        return f"FlatMapOperation({self.__qualname__})"


def strip_metadata(item: Record) -> Any:
    """The data of a Record: the last worker-side step when the parent needs no metadata."""
    return item.data


def as_list(items: Sequence[Any]) -> Sequence[Any]:
    """The `batch_fn` that groups a chunk's surviving items without combining them."""
    return items


def operation_kind(transform: Any, position: int) -> str:
    """The kind of one element of `operations`, or a TypeError naming it and the fix."""
    if isinstance(transform, Batch):
        return "batch"
    for cls, kind in _ELEMENT_KINDS:
        if isinstance(transform, cls):
            return kind
    if isinstance(transform, FlatMapTransform):
        return "flat_map"
    raise TypeError(
        f"`operations[{position}]` must be a grain transform (MapTransform, "
        "RandomMapTransform, FilterTransform, MapWithIndexTransform, FlatMapTransform or "
        f"Batch), got {type(transform).__name__} {transform!r}. Wrap a plain function in a "
        "MapTransform subclass."
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """Where the operations run; see the module docstring.

    Attributes:
      worker: the worker-side operations, in order.
      unit: what one position of the worker side hands over: "item" (an item,
        or None if filtered), "chunk" or "fan_out" (a list of items, or None).
      tail: the parent-side operations, in order.
      chunk_size: positions per chunk (unit "chunk"), else 1.
      fan_out: the flat map that makes the "fan_out" lists.
      steps_per_unit: the loader steps (sampler positions) one unit starts past
        the previous one; unit u starts at step ``u * steps_per_unit``.
      metadata: what the source attaches to records: "none", "index" or "full".
      worker_metadata, tail_metadata: whether items are Records on each side.
    """

    worker: tuple[Any, ...]
    unit: str
    tail: tuple[Any, ...]
    chunk_size: int
    fan_out: FlatMapOperation | None
    steps_per_unit: int
    metadata: str
    worker_metadata: bool
    tail_metadata: bool

    @property
    def list_units(self) -> bool:
        return self.unit != "item"

    @property
    def flat_maps_in_tail(self) -> int:
        return sum(isinstance(op, FlatMapOperation) for op in self.tail)


def plan_operations(operations: Sequence[Any]) -> Plan:
    """Checks `operations` and splits them into worker side and parent side.

    Example::

        plan = plan_operations([Parse(), KeepShort(), Batch(8)])
        plan.worker  # (Parse, KeepShort): a filter, so the batch cannot follow
        plan.unit    # "chunk": lists of the surviving items of 8 positions
        plan.tail    # (Batch(8),)
    """
    kinds = [operation_kind(transform, i) for i, transform in enumerate(operations)]
    split = len(kinds)
    seen_filter = False
    for i, kind in enumerate(kinds):
        if kind == "flat_map" or (kind == "batch" and seen_filter):
            split = i
            break
        seen_filter = seen_filter or kind == "filter"
    worker_metadata = any(kind in _METADATA_KINDS for kind in kinds)
    tail_start = split + 1 if split < len(kinds) and kinds[split] == "flat_map" else split
    tail_metadata = any(kind in _METADATA_KINDS for kind in kinds[tail_start:])
    metadata = "full" if "random_map" in kinds else "index" if "map_with_index" in kinds else "none"

    def wrap(transform: Any, kind: str, with_metadata: bool) -> Any:
        if kind == "batch":
            return BatchOperation(transform, with_metadata)
        if kind == "flat_map":
            return FlatMapOperation(transform, with_metadata)
        return ElementOperation(transform, kind, with_metadata)

    worker = tuple(
        wrap(t, k, worker_metadata) for t, k in zip(operations[:split], kinds[:split], strict=True)
    )
    steps_per_unit = 1
    for op in worker:
        if isinstance(op, BatchOperation):
            steps_per_unit *= op.batch_size
    unit, chunk_size, fan_out = "item", 1, None
    if split < len(kinds):
        if kinds[split] == "batch":
            unit, chunk_size = "chunk", operations[split].batch_size
            steps_per_unit *= chunk_size
        else:
            unit, fan_out = "fan_out", FlatMapOperation(operations[split], tail_metadata)
    tail = tuple(
        wrap(t, k, tail_metadata)
        for t, k in zip(operations[tail_start:], kinds[tail_start:], strict=True)
    )
    return Plan(
        worker=worker,
        unit=unit,
        tail=tail,
        chunk_size=chunk_size,
        fan_out=fan_out,
        steps_per_unit=steps_per_unit,
        metadata=metadata,
        worker_metadata=worker_metadata,
        tail_metadata=tail_metadata,
    )


class SamplerSourceMapDataset(MapStage):
    """Position k reads ``data_source[sampler[shard_index + k * shard_count].record_key]``.

    Many positions are read at once: record keys come from the sampler's
    vectorized `record_keys` (when it has one) and records from the source's
    `__getitems__` (when it has one). With `metadata` "index" or "full" each
    element is a `Record` carrying the sampler's metadata ("full" builds it with
    ``sampler[step]``, for its per-record `rng`).

    Example::

        ds = SamplerSourceMapDataset(sampler, source, length=len(sampler))
        ds[3] == source[sampler[3].record_key]
    """

    def __init__(
        self,
        sampler: Any,
        data_source: Any,
        *,
        length: int,
        shard_index: int = 0,
        shard_count: int = 1,
        metadata: str = "none",
    ):
        super().__init__()
        self._sampler = sampler
        self._source = data_source
        self._length = length
        self._shard_index = shard_index
        self._shard_count = shard_count
        self._metadata = metadata
        self._vector_keys = callable(getattr(sampler, "record_keys", None))
        self._vector_indices = callable(getattr(sampler, "indices", None))
        self._batched_read = callable(getattr(data_source, "__getitems__", None))

    def __len__(self) -> int:
        return self._length

    def _read(self, keys: list[int]) -> list[Any]:
        if self._batched_read:
            return list(self._source.__getitems__(keys))
        source = self._source
        return [source[key] for key in keys]

    def _getitem(self, index: int) -> Any:
        return self._getitems(np.array([index], dtype=np.int64))[0]

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        steps = indices * self._shard_count + self._shard_index
        sampler = self._sampler
        if self._metadata == "full" or not self._vector_keys:
            metadata = [sampler[step] for step in steps.tolist()]
            data = self._read([m.record_key for m in metadata])
            if self._metadata == "none":
                return data
            if self._metadata == "index":
                metadata = [RecordMetadata(index=m.index) for m in metadata]
            return [Record(m, d) for m, d in zip(metadata, data, strict=True)]
        data = self._read(sampler.record_keys(steps).tolist())
        if self._metadata == "none":
            return data
        if self._vector_indices:
            record_indices = sampler.indices(steps).tolist()
        else:
            record_indices = [sampler[step].index for step in steps.tolist()]
        return [
            Record(RecordMetadata(index=i), d) for i, d in zip(record_indices, data, strict=True)
        ]

    def _describe(self) -> str:
        return f"sampler={self._sampler!r}, source={type(self._source).__name__}"


def build_units(plan: Plan, source: MapDataset[Any]) -> MapDataset[Any]:
    """The worker-side MapDataset: one unit per position (see `Plan.unit`)."""
    ds = source
    for op in plan.worker:
        if isinstance(op, BatchOperation):
            ds = ds.batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=op)
        else:
            ds = ds.map(op)
    if plan.worker_metadata and not plan.tail_metadata:
        ds = ds.map(strip_metadata)  # no Record (or rng) crosses to the parent needlessly
    if plan.unit == "chunk":
        ds = ds.batch(plan.chunk_size, batch_fn=as_list)
    elif plan.unit == "fan_out":
        ds = ds.map(plan.fan_out)
    return ds


# -- the parent side -------------------------------------------------------------------


class Units:
    """The items of the worker side's units, in order, with the position they came from.

    `cursor()` is ``(u, j)``: resume at unit u after skipping j of its items.
    Created at ``(start, skip)`` it continues exactly there.
    """

    def __init__(self, upstream: Iterator[Any], lists: bool, start: int = 0, skip: int = 0):
        self._upstream = upstream
        self._lists = lists
        self._next_unit = start  # the position of the next unit to pull
        self._items: list[Any] = []
        self._taken = 0
        if skip:
            unit = next(upstream, None)
            self._next_unit += 1
            if not lists or not isinstance(unit, list) or len(unit) < skip:
                raise ValueError(
                    f"the state says to skip {skip} elements of unit {start}, which has "
                    "fewer: it was saved by a DataLoader with other operations or data."
                )
            self._items, self._taken = unit, skip

    def cursor(self) -> tuple[int, int]:
        if self._taken < len(self._items):
            return self._next_unit - 1, self._taken
        return self._next_unit, 0

    def __iter__(self) -> Units:
        return self

    def __next__(self) -> Any:
        if self._taken < len(self._items):
            self._taken += 1
            return self._items[self._taken - 1]
        upstream = self._upstream
        while True:
            unit = next(upstream)
            self._next_unit += 1
            if unit is None:
                continue  # a filtered position
            if not self._lists:
                return unit
            if unit:
                self._items, self._taken = unit, 1
                return unit[0]


def _elementwise(items: Iterator[Any], op: ElementOperation) -> Iterator[Any]:
    for item in items:
        result = op(item)
        if result is not None:
            yield result


def _batched(items: Iterator[Any], op: BatchOperation) -> Iterator[Any]:
    size, drop = op.batch_size, op.drop_remainder
    while True:
        group = list(itertools.islice(items, size))
        if not group or (drop and len(group) < size):
            return
        yield op(group)


def _flat_mapped(items: Iterator[Any], op: FlatMapOperation, pending: list[int]) -> Iterator[Any]:
    # pending[0]: outputs of the current element not yet handed on (0 = nothing held).
    for item in items:
        outputs = op(item)
        pending[0] = len(outputs)
        for output in outputs:
            pending[0] -= 1
            yield output


def build_tail(plan: Plan, items: Iterator[Any]) -> tuple[Iterator[Any], list[list[int]]]:
    """The parent-side chain over `items`; also the pending counters of its flat maps."""
    counters: list[list[int]] = []
    for op in plan.tail:
        if isinstance(op, BatchOperation):
            items = _batched(items, op)
        elif isinstance(op, FlatMapOperation):
            counters.append([0])
            items = _flat_mapped(items, op, counters[-1])
        else:
            items = _elementwise(items, op)
    return items, counters
