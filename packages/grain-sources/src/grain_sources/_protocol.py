"""The RandomAccessDataSource protocol: what `MapDataset.source` reads from.

Reading many records at once is opt-in. Grain reads a source with
``source[i]`` only, so a source's ``__getitems__`` is an unknown: the one of
``tfds.testing.mock_data`` raises a TypeError, a torch-style one may return a
collated batch rather than a list of records. Pipelines therefore call
``__getitems__`` only on a source whose class declares ``batched_reads = True``
(ours do) and decide that once per source, with `reads_in_batches`.
"""

from __future__ import annotations

from typing import Protocol, SupportsIndex, TypeVar, runtime_checkable

T_co = TypeVar("T_co", covariant=True)

# The class attribute that declares batched reads. It cannot be a member of the
# protocol's body: a runtime-checkable protocol requires all its members, so
# `isinstance([1, 2], RandomAccessDataSource)` would turn False.
_DECLARATION = "batched_reads"


@runtime_checkable
class RandomAccessDataSource(Protocol[T_co]):
    """A source of records with random access: `__len__` and `__getitem__`.

    Inheriting is optional: any object with these two methods (a list, a numpy
    array) works. Sources must be picklable so that worker processes can read
    them.

    Batched reads: pipelines read ``source[i]``, one record at a time, as Grain
    does. A source that can read many records faster in one call defines
    ``__getitems__(indices)`` (a list of ints in, a list of records out, in
    order) **and** declares it with the class attribute ``batched_reads =
    True``; batches, read-ahead threads and worker processes then ask for a
    chunk of indices at once. The declaration promises that
    ``source.__getitems__(indices) == [source[i] for i in indices]``. Without
    it, a ``__getitems__`` is never called (a tfds mock's, a HuggingFace or
    PyTorch dataset's), so the records are exactly those of ``source[i]``. A
    subclass that overrides ``__getitem__`` but inherits ``__getitems__`` is
    read one record at a time: the inherited batched read would bypass the
    override.

    Example::

        class Squares(grain.sources.RandomAccessDataSource):
            batched_reads = True  # __getitems__ below returns what __getitem__ would

            def __len__(self):
                return 100

            def __getitem__(self, index):
                return index * index

            def __getitems__(self, indices):
                return [i * i for i in indices]

        ds = grain.MapDataset.source(Squares())
    """

    def __len__(self) -> int:
        """The number of records."""
        ...

    def __getitem__(self, index: SupportsIndex) -> T_co:
        """The record at `index`, 0 <= index < len(self)."""
        ...


def _definer(cls: type, name: str) -> type | None:
    """The class of `cls`'s MRO whose body defines `name`."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def reads_in_batches(source: object, method: str = "__getitems__") -> bool:
    """Whether pipelines may read `source` many records at a time with `method`.

    True when the source's class declares ``batched_reads = True`` (exactly
    True: a mock's auto-created attribute does not count), has `method`
    (``"__getitems__"``, or ``"gather"`` for stacked reads), and does not
    override ``__getitem__`` below the class that defines `method`. Decide once
    per source, not per read.

    Raises:
      TypeError: the class declares ``batched_reads = True`` but has no
        ``__getitems__``.

    Example::

        reads_in_batches(grain.sources.RangeDataSource(0, 10, 1))  # True
        reads_in_batches([1, 2, 3])  # False: read with source[i]
    """
    cls = type(source)
    if getattr(cls, _DECLARATION, False) is not True:
        return False
    if not callable(getattr(cls, "__getitems__", None)):
        raise TypeError(
            f"{cls.__name__} declares `batched_reads = True` but defines no "
            "`__getitems__(indices)`: define it (returning `[self[i] for i in indices]`) "
            "or remove the declaration."
        )
    batched = _definer(cls, method)
    if batched is None or not callable(getattr(source, method, None)):
        return False
    one = _definer(cls, "__getitem__")
    # `one` below `batched` in the MRO: a subclass changed the records that the
    # inherited batched read would not know about.
    return one is None or issubclass(batched, one)
