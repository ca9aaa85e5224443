"""The DataLoader's operations, and where each one runs: worker side or parent side.

A DataLoader is a MapDataset over the positions k = 0, 1, ... of its sampler
(`SamplerSourceMapDataset`: position k reads ``data_source[sampler[k].record_key]``)
followed by the user's `operations`. `plan_operations` splits them in two:

  worker side   the longest prefix that keeps *one output per position*: maps,
                random maps, maps with index, filters (a filtered position is
                None), and batches as long as no filter came before them. It runs
                as MapDataset stages, so position u of the result depends on u
                only, in whichever process reads it.
  parent side   the rest (the "tail"), from the first batch that follows a filter,
                the first flat map or the first record operation (any other
                callable: it takes the iterator of Records). It runs as
                IterDataset stages in the process that iterates the DataLoader
                (`grain_mp._loader_pipeline`).

Why: mp_prefetch's round robin over slices ``w::n`` of the positions gives back
the single-process order exactly when every position yields exactly one item
(filtered positions travel as None and are dropped by the parent). A batch after
a filter cannot be formed per position, so the worker side groups the positions
it hands over: `unit` is "chunk" (a list of the surviving items of `chunk_size`
consecutive positions, one message per chunk instead of one per element) or
"fan_out" (the list of a flat map's outputs for one position), and the parent
flattens the lists before the tail (`grain_mp._loader_positions`).

Records: transforms see the record data only. When an operation needs the
record's metadata (a RandomMapTransform its `rng`, a MapWithIndex its `index`, a
record operation the whole Record), items are `Record(metadata, data)`; otherwise
they are the bare data, which is cheaper to move between processes. A batch's
metadata is that of its last record.

Grain's per-record operations (`grain_mp._record_ops`: MapOperation,
RandomMapOperation, FilterOperation, BatchOperation) are planned exactly like the
transforms they match, so they too run in the workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from grain_dataset import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    stack,
)
from grain_dataset.extension import MapStage, reads_in_batches
from grain_index import Record, RecordMetadata
from grain_mp._record_ops import (
    BatchOperation,
    FilterOperation,
    MapOperation,
    RandomMapOperation,
)

# The kinds of per-element operations, with the method each one calls.
_ELEMENT_KINDS: tuple[tuple[type, str], ...] = (
    (MapTransform, "map"),
    (RandomMapTransform, "random_map"),
    (MapWithIndex, "map_with_index"),
    (FilterTransform, "filter"),
    (MapOperation, "map"),
    (RandomMapOperation, "random_map"),
    (FilterOperation, "filter"),
)
_METADATA_KINDS = ("random_map", "map_with_index", "records")


def _name(transform: Any) -> str:
    return type(transform).__qualname__


class ElementStep:
    """One per-element operation, as a callable on items: the new item, or None to drop it.

    Example::

        op = ElementStep(MyFilter(), "filter", with_metadata=False)
        op(5)  # 5 when MyFilter().filter(5) is true, else None
    """

    def __init__(self, transform: Any, kind: str, with_metadata: bool):
        self.transform = transform
        self.kind = kind
        self.with_metadata = with_metadata
        # A record operation's `apply` re-raises the user's errors as Grain does (naming
        # the record's index), and its Records lose their `record_key`, as in Grain.
        self._record_op = isinstance(transform, MapOperation | RandomMapOperation | FilterOperation)
        self._method: Callable[..., Any] = (
            transform.apply if self._record_op else getattr(transform, kind)
        )
        # grain_dataset names a failing stage after its function's __qualname__.
        self.__qualname__ = f"{kind}({_name(transform)})"

    def __call__(self, item: Any) -> Any:
        if self.with_metadata:
            metadata, data = item.metadata, item.data
        else:
            metadata, data = None, item
        kind = self.kind
        extra = {"index": metadata.index} if self._record_op and metadata is not None else {}
        if self._record_op and metadata is not None:
            metadata = metadata.remove_record_key()
        if kind == "filter":
            if not self._method(data, **extra):
                return None
            return Record(metadata, data) if self.with_metadata else item
        if kind == "map":
            result = self._method(data, **extra)
        elif kind == "random_map":
            rng = metadata.rng
            if rng is None:
                raise ValueError(
                    f"{_name(self.transform)} draws random numbers but the sampler gave the "
                    "record no `rng`: create the sampler with a seed (IndexSampler(..., seed=0))."
                )
            result = self._method(data, rng, **extra)
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
        return f"ElementStep({self.__qualname__})"


class BatchStep:
    """Combines a list of items into one batch item (`batch_fn`, or stacking the PyTrees).

    `batch` is a `Batch` transform or a `BatchOperation`. With metadata, the
    batch is ``Record(last item's metadata, batch of the data)``.
    """

    def __init__(self, batch: Batch | BatchOperation, with_metadata: bool):
        self.batch = batch
        self.batch_size = batch.batch_size
        self.drop_remainder = bool(batch.drop_remainder)
        self.with_metadata = with_metadata
        self._record_op = isinstance(batch, BatchOperation)
        self._fn: Callable[[Sequence[Any]], Any] = (
            batch.combine if isinstance(batch, BatchOperation) else batch.batch_fn or stack
        )
        self.__qualname__ = f"Batch(batch_size={batch.batch_size})"

    def __call__(self, items: Sequence[Any]) -> Any:
        if self.with_metadata:
            metadata = items[-1].metadata
            if self._record_op:
                metadata = metadata.remove_record_key()  # as Grain's BatchOperation does
            return Record(metadata, self._fn([item.data for item in items]))
        return self._fn(items)

    def __repr__(self) -> str:
        return f"BatchStep({self.batch!r})"


class FlatMapStep:
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
        return f"FlatMapStep({self.__qualname__})"


class AsFlatMap(FlatMapTransform):
    """A `FlatMapStep` as the FlatMapTransform of an IterDataset flat map (the parent side's)."""

    def __init__(self, step: FlatMapStep):
        self.max_fan_out = step.max_fan_out
        self.step = step

    def flat_map(self, element: Any) -> Sequence[Any]:
        return self.step(element)

    def __repr__(self) -> str:
        return f"AsFlatMap({self.step.__qualname__})"


class RecordsStep:
    """A record operation (any callable from an iterator of Records to one) in the tail.

    `run` checks what it yields: Records, whose metadata `index` the loader's state
    follows (see `grain_mp._tail`).
    """

    def __init__(self, operation: Any, position: int):
        self.operation = operation
        self.position = position
        name = getattr(operation, "__qualname__", None)
        if not isinstance(name, str) or not callable(getattr(operation, "__get__", None)):
            name = _name(operation)  # an instance: its class
        self.__qualname__ = f"operations[{position}] ({name})"

    def outputs(self, items: Iterator[Any]) -> Iterator[Any]:
        """The operation's outputs for `items`, each checked to be a Record."""
        try:
            outputs = self.operation(item for item in items)  # a plain generator of Records
        except (TypeError, AttributeError) as error:
            # What a per-element function does with an iterator of Records.
            raise TypeError(
                f"{self.__qualname__} is called as an operation, with the iterator of "
                f"grain.python.Record objects, and raised {type(error).__name__}: {error}. "
                "If it is a function of one element, wrap it: grain.python.MapOperation(fn), "
                "or a MapTransform subclass."
            ) from error
        if not isinstance(outputs, Iterator):
            try:
                outputs = iter(outputs)
            except TypeError:
                raise TypeError(
                    f"{self.__qualname__} returned {type(outputs).__name__}, not an iterator: "
                    "an operation takes an iterator of grain.python.Record objects and yields "
                    "Records. Wrap a per-element function in grain.python.MapOperation(fn) "
                    "or a MapTransform."
                ) from None
        for output in outputs:
            index = getattr(getattr(output, "metadata", None), "index", None)
            integer = isinstance(index, int | np.integer) and not isinstance(index, bool)
            if not integer or not hasattr(output, "data"):
                raise TypeError(
                    f"{self.__qualname__} yielded {type(output).__name__} {output!r:.200}, but "
                    "an operation must yield grain.python.Record(metadata, data) objects whose "
                    "metadata has an integer `index` (keep the metadata of the last input "
                    "record used)."
                )
            yield output

    def __repr__(self) -> str:
        return f"RecordsStep({self.__qualname__})"


def strip_metadata(item: Record) -> Any:
    """The data of a Record: the last worker-side step when the parent needs no metadata."""
    return item.data


def as_list(items: Sequence[Any]) -> Sequence[Any]:
    """The `batch_fn` that groups a chunk's surviving items without combining them."""
    return items


def operation_kind(transform: Any, position: int) -> str:
    """The kind of one element of `operations`, or a TypeError naming it and the fix."""
    if isinstance(transform, Batch | BatchOperation):
        return "batch"
    for cls, kind in _ELEMENT_KINDS:
        if isinstance(transform, cls):
            return kind
    if isinstance(transform, FlatMapTransform):
        return "flat_map"
    if callable(transform):
        return "records"
    raise TypeError(
        f"`operations[{position}]` must be a grain transform (MapTransform, "
        "RandomMapTransform, FilterTransform, MapWithIndexTransform, FlatMapTransform or "
        "Batch) or an operation (a callable from an iterator of grain.python.Record to "
        f"one, e.g. grain.python.MapOperation(fn)), got {type(transform).__name__} "
        f"{transform!r}."
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
      needs_rng: whether an operation draws from the records' `rng`.
    """

    worker: tuple[Any, ...]
    unit: str
    tail: tuple[Any, ...]
    chunk_size: int
    fan_out: FlatMapStep | None
    steps_per_unit: int
    metadata: str
    worker_metadata: bool
    tail_metadata: bool
    needs_rng: bool = False

    @property
    def list_units(self) -> bool:
        return self.unit != "item"

    @property
    def drops_failing(self) -> bool:
        """Whether the tail has a stage that goes past an element its function fails on.

        The IterDataset map, filter and flat map do; the other stages stay
        before it (the worker side's reading, a batch), or restore to a point
        before it (a record operation's stage), so their state after an error
        is where the loader resumes.
        """
        return any(isinstance(op, ElementStep | FlatMapStep) for op in self.tail)

    @property
    def may_replay(self) -> bool:
        """Whether the tail holds a flat map or record operation (a version-1 state replays)."""
        return any(isinstance(op, FlatMapStep | RecordsStep) for op in self.tail)


def plan_operations(operations: Sequence[Any]) -> Plan:
    """Checks `operations` and splits them into worker side and parent side.

    Example::

        plan = plan_operations([Parse(), KeepShort(), Batch(8)])
        plan.worker  # (Parse, KeepShort): a filter, so the batch cannot follow
        plan.unit    # "chunk": lists of the surviving items of 8 positions
        plan.tail    # (Batch(8),)
    """
    operations = list(operations)
    kinds = [operation_kind(transform, i) for i, transform in enumerate(operations)]
    split = len(kinds)
    seen_filter = False
    for i, kind in enumerate(kinds):
        if kind in ("flat_map", "records") or (kind == "batch" and seen_filter):
            split = i
            break
        seen_filter = seen_filter or kind == "filter"
    worker_metadata = any(kind in _METADATA_KINDS for kind in kinds)
    tail_start = split + 1 if split < len(kinds) and kinds[split] == "flat_map" else split
    # Record operations get Records, and the state follows their indices: all Records after.
    tail_metadata = any(kind in _METADATA_KINDS for kind in kinds[tail_start:]) or (
        "records" in kinds
    )
    metadata = (
        "full"
        if "random_map" in kinds or "records" in kinds
        else "index"
        if "map_with_index" in kinds
        else "none"
    )

    def wrap(transform: Any, kind: str, with_metadata: bool, position: int) -> Any:
        if kind == "batch":
            return BatchStep(transform, with_metadata)
        if kind == "flat_map":
            return FlatMapStep(transform, with_metadata)
        if kind == "records":
            return RecordsStep(transform, position)
        return ElementStep(transform, kind, with_metadata)

    worker = tuple(wrap(operations[i], kinds[i], worker_metadata, i) for i in range(split))
    steps_per_unit = 1
    for op in worker:
        if isinstance(op, BatchStep):
            steps_per_unit *= op.batch_size
    unit, chunk_size, fan_out = "item", 1, None
    if split < len(kinds) and kinds[split] != "records":
        if kinds[split] == "batch":
            unit, chunk_size = "chunk", operations[split].batch_size
            steps_per_unit *= chunk_size
        else:
            unit, fan_out = "fan_out", FlatMapStep(operations[split], tail_metadata)
    tail = tuple(
        wrap(operations[i], kinds[i], tail_metadata, i) for i in range(tail_start, len(kinds))
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
        needs_rng="random_map" in kinds,
    )


class SamplerSourceMapDataset(MapStage):
    """Position k reads ``data_source[sampler[shard_index + k * shard_count].record_key % n]``.

    n is `source_length` (``len(data_source)``): as in Grain's DataLoader, a sampler
    over more records than the source holds reads the source again from its start.

    Many positions are read at once: record keys come from the sampler's
    vectorized `record_keys` (when it has one) and records with ``source[key]``,
    or with the source's `__getitems__` where its class declares
    ``batched_reads = True`` (see grain.sources.RandomAccessDataSource). With
    `metadata` "index" or "full" each element is a `Record` carrying the
    sampler's metadata ("full" builds it with ``sampler[step]``, for its
    per-record `rng`).

    Example::

        ds = SamplerSourceMapDataset(sampler, source, length=len(sampler))
        ds[3] == source[sampler[3].record_key]
    """

    _order_as_grain = False  # a shuffling sampler's order

    def __init__(
        self,
        sampler: Any,
        data_source: Any,
        *,
        length: int,
        shard_index: int = 0,
        shard_count: int = 1,
        metadata: str = "none",
        source_length: int | None = None,
    ):
        super().__init__()
        self._sampler = sampler
        self._source = data_source
        self._source_length = len(data_source) if source_length is None else source_length
        self._length = length
        self._shard_index = shard_index
        self._shard_count = shard_count
        self._metadata = metadata
        self._vector_keys = callable(getattr(sampler, "record_keys", None))
        self._vector_indices = callable(getattr(sampler, "indices", None))
        # Once per source: an undeclared `__getitems__` (a tfds mock's) is never called.
        self._batched_read = reads_in_batches(data_source)

    def __len__(self) -> int:
        return self._length

    def _read(self, keys: Any) -> list[Any]:
        keys = (np.asarray(keys, dtype=np.int64) % self._source_length).tolist()
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
        data = self._read(sampler.record_keys(steps))
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
