"""The DataLoader's operations API: callables from an iterator of Records to an iterator.

Model. An *operation* takes the iterator of `grain.python.Record` objects
(``Record(metadata, data)``, the metadata being the sampler's `RecordMetadata`:
`index`, `record_key`, `rng`) and yields Records::

    class Operation(Protocol):
        def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]: ...

Any callable of that shape is an operation (`DataLoader(operations=[...])` runs
it in the process that iterates the loader). The four below are Grain's
per-record operations; the DataLoader recognizes them and runs them like the
matching transforms (in the worker processes where it can):

    MapOperation(f)            Record(m, x) -> Record(m', f(x))
    RandomMapOperation(f)      Record(m, x) -> Record(m', f(x, m.rng))
    FilterOperation(f)         keeps the Records whose f(x) is true
    BatchOperation(n, ...)     n Records -> Record(last record's m', batch_fn([x...]))

where m' is m without its `record_key` (`RecordMetadata.remove_record_key`).

The contract that makes a loader's state exact (see `grain_mp._operations`): a
Record an operation yields carries the `index` of the last input it consumed to
make it, and once it has yielded the last Record with a given index it holds
nothing of the inputs up to that index (Grain resumes after that index too).

Errors raised by the user's function are re-raised as ValueError (as in Grain)
naming the operation and the record's index, with the original as `__cause__`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from grain_dataset import stack
from grain_dataset.extension import WrongTypeError
from grain_index import Record

_IN = TypeVar("_IN")
_OUT = TypeVar("_OUT")


class Operation(Protocol):
    """An operation of the DataLoader: an iterator of Records in, an iterator of Records out.

    Example::

        class Pairs:
            '''Joins consecutive records in pairs (a last odd one is dropped).'''

            def __call__(self, records):
                records = iter(records)
                for first in records:
                    second = next(records, None)
                    if second is not None:
                        yield grain.python.Record(second.metadata, (first.data, second.data))

        loader = grain.python.DataLoader(..., operations=[Pairs()])
    """

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]: ...


def _check_callable(value: Any, name: str, owner: str, example: str) -> None:
    if not callable(value):
        # Both types: Grain raises a ValueError for this (when the loader first calls it).
        raise WrongTypeError(
            f"`{name}` of {owner} must be callable, e.g. {example}; got {value!r}."
        )


def _failed(owner: str, name: str, index: int | None, error: Exception) -> ValueError:
    return ValueError(
        f"PyGrain encountered an error when calling {name.replace('_', ' ')}. "
        f"{owner}: `{name}` raised {type(error).__name__}: {error} on the record with "
        f"index {index} (the original exception is the __cause__)."
    )


def _metadata_of(record: Any, owner: str) -> Any:
    try:
        return record.metadata
    except AttributeError:
        raise TypeError(
            f"{owner} takes an iterator of grain.python.Record objects (Record(metadata, "
            f"data)), got a {type(record).__name__}: an operation before it yields other "
            "things."
        ) from None


@dataclasses.dataclass
class MapOperation(Generic[_IN, _OUT]):
    """Applies `map_function` to the data of every Record.

    Example::

        records = MapOperation(lambda x: x * 2)(iter(records))
    """

    map_function: Callable[[_IN], _OUT]

    def __post_init__(self) -> None:
        _check_callable(self.map_function, "map_function", "MapOperation", "lambda x: x + 1")

    def apply(self, data: _IN, index: int | None = None) -> _OUT:
        """`map_function(data)`, its errors re-raised as ValueError naming `index`."""
        try:
            return self.map_function(data)
        except Exception as error:
            raise _failed("MapOperation", "map_function", index, error) from error

    def __call__(self, input_iterator: Iterator[Record[_IN]]) -> Iterator[Record[_OUT]]:
        for record in input_iterator:
            metadata = _metadata_of(record, "MapOperation")
            data = self.apply(record.data, metadata.index)
            yield Record(metadata.remove_record_key(), data)


@dataclasses.dataclass
class RandomMapOperation(Generic[_IN, _OUT]):
    """Applies `random_map_function(data, rng)` with the `rng` of each Record's metadata.

    The sampler attaches a generator to every record when it has a seed
    (``IndexSampler(..., seed=0)``); a Record without one is an error.

    Example::

        records = RandomMapOperation(lambda x, rng: x + rng.normal())(iter(records))
    """

    random_map_function: Callable[[_IN, np.random.Generator], _OUT]

    def __post_init__(self) -> None:
        _check_callable(
            self.random_map_function,
            "random_map_function",
            "RandomMapOperation",
            "lambda x, rng: x + rng.normal()",
        )

    def apply(self, data: _IN, rng: np.random.Generator | None, index: int | None = None) -> _OUT:
        """`random_map_function(data, rng)`, its errors re-raised as ValueError naming `index`."""
        if rng is None:
            raise ValueError(
                f"RandomMapOperation needs each record's `rng`, and the record with index "
                f"{index} has none: create the sampler with a seed, e.g. "
                "IndexSampler(..., seed=0)."
            )
        try:
            return self.random_map_function(data, rng)
        except Exception as error:
            raise _failed("RandomMapOperation", "random_map_function", index, error) from error

    def __call__(self, input_iterator: Iterator[Record[_IN]]) -> Iterator[Record[_OUT]]:
        for record in input_iterator:
            metadata = _metadata_of(record, "RandomMapOperation")
            data = self.apply(record.data, metadata.rng, metadata.index)
            yield Record(metadata.remove_record_key(), data)


@dataclasses.dataclass
class FilterOperation(Generic[_IN]):
    """Keeps the Records whose data `condition_function` finds true.

    Example::

        records = FilterOperation(lambda x: x % 2 == 0)(iter(records))
    """

    condition_function: Callable[[_IN], bool]

    def __post_init__(self) -> None:
        _check_callable(
            self.condition_function, "condition_function", "FilterOperation", "lambda x: x > 0"
        )

    def apply(self, data: _IN, index: int | None = None) -> bool:
        """`bool(condition_function(data))`, its errors re-raised as ValueError naming `index`."""
        try:
            return bool(self.condition_function(data))
        except Exception as error:
            raise _failed("FilterOperation", "condition_function", index, error) from error

    def __call__(self, input_iterator: Iterator[Record[_IN]]) -> Iterator[Record[_IN]]:
        for record in input_iterator:
            metadata = _metadata_of(record, "FilterOperation")
            if self.apply(record.data, metadata.index):
                yield Record(metadata.remove_record_key(), record.data)


@dataclasses.dataclass
class BatchOperation(Generic[_IN, _OUT]):
    """Combines every `batch_size` consecutive Records into one.

    The batch's metadata is its last record's (without `record_key`), its data
    ``batch_fn([data, ...])``; by default the leaves of the elements' PyTrees
    are stacked into numpy arrays along a new first axis. With
    `drop_remainder`, a last batch smaller than `batch_size` is dropped.

    Example::

        batches = BatchOperation(batch_size=32, drop_remainder=True)(iter(records))
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[_IN]], _OUT] | None = None

    def __post_init__(self) -> None:
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int | np.integer):
            raise TypeError(f"`batch_size` must be a positive integer, got {size!r}.")
        if size < 1:
            raise ValueError(
                f"batch_size must be a positive integer. Got {size}. "
                f"`batch_size` must be a positive integer, got {size}: it is how many "
                "records go into one batch."
            )
        self.batch_size = int(size)
        if not isinstance(self.drop_remainder, bool | np.bool_):
            raise TypeError(f"`drop_remainder` must be a bool, got {self.drop_remainder!r}.")
        if self.batch_fn is not None:
            _check_callable(self.batch_fn, "batch_fn", "BatchOperation", "list")

    def combine(self, elements: Sequence[_IN]) -> Any:
        """The batch of `elements`: `batch_fn(list)`, or their PyTrees stacked."""
        return stack(elements) if self.batch_fn is None else self.batch_fn(list(elements))

    def disable_deprecation_message(self) -> None:
        """Accepted for compatibility: this library logs no deprecation message."""

    def __call__(self, input_iterator: Iterator[Record[_IN]]) -> Iterator[Record[_OUT]]:
        records: list[Record[_IN]] = []
        for record in input_iterator:
            _metadata_of(record, "BatchOperation")
            records.append(record)
            if len(records) == self.batch_size:
                yield self._batch(records)
                records = []
        if records and not self.drop_remainder:
            yield self._batch(records)

    def _batch(self, records: list[Record[_IN]]) -> Record[_OUT]:
        data = self.combine([record.data for record in records])
        return Record(records[-1].metadata.remove_record_key(), data)
