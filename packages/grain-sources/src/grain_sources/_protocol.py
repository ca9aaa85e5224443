"""The RandomAccessDataSource protocol: what `MapDataset.source` reads from."""

from __future__ import annotations

from typing import Protocol, SupportsIndex, TypeVar, runtime_checkable

T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class RandomAccessDataSource(Protocol[T_co]):
    """A source of records with random access: `__len__` and `__getitem__`.

    Inheriting is optional: any object with these two methods (a list, a numpy
    array) works. A source may also define ``__getitems__(indices)`` returning
    the records of many indices at once; pipelines then ask once per batch of
    indices instead of once per record. Sources must be picklable so that worker
    processes can read them.

    Example::

        class Squares(grain.sources.RandomAccessDataSource):
            def __len__(self):
                return 100

            def __getitem__(self, index):
                return index * index

        ds = grain.MapDataset.source(Squares())
    """

    def __len__(self) -> int:
        """The number of records."""
        ...

    def __getitem__(self, index: SupportsIndex) -> T_co:
        """The record at `index`, 0 <= index < len(self)."""
        ...
