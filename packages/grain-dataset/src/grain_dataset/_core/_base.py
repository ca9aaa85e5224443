"""The dataset model: MapDataset ~ Sequence, IterDataset ~ Iterable, DatasetIterator ~ Iterator.

    MapDataset      lazy, immutable, random access: ds[i] computes element i.
                    Indices >= len(ds) are later epochs (reshuffled, new random
                    numbers); None at an index marks a filtered position.
    IterDataset     lazy, immutable, iterable only; `to_iter_dataset()` makes
                    one from a MapDataset.
    DatasetIterator the stateful iterator of an IterDataset. Its state is a few
                    integer positions (`get_state`), never buffered data, and
                    `set_state` on a fresh iterator continues exactly.

This module holds only the three base classes. Every transformation lives in a
module of its own and registers its builder under a name (`register`); the
methods below look the builder up, so the base never imports a transformation
and no import cycle can arise.
"""

from __future__ import annotations

import abc
import builtins
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from grain_dataset._common._config import debug_mode
from grain_dataset._common._contract import IteratorTraits, MapTraits, StageTraits
from grain_dataset._common._options import DatasetOptions
from grain_dataset._core._next_index import no_next_index
from grain_dataset._core._subclassing import (
    NO_STATS,
    MultiprocessingContext,
    NoStats,
    OneParent,
    accepting_sequences,
)
from grain_dataset._core._worker_slice import creating_slice
from grain_dataset._runtime import _fingerprint, _state_file
from grain_dataset._runtime._guard import NextHook, closed_error, guard, hook_methods, unguard
from grain_index import checks, derive_seed

if TYPE_CHECKING:
    from grain_dataset._common._options import ReadOptions
    from grain_dataset._common._transforms import (
        DatasetSelectionMap,
        FilterTransform,
        MapTransform,
        MapWithIndex,
        RandomMapTransform,
        Transformation,
    )
    from grain_dataset._core._stats import PipelineStats
    from grain_dataset._core._worker_slice import WorkerSlice

T = TypeVar("T")
S = TypeVar("S")

INFINITE = sys.maxsize
"""The length of an infinite MapDataset (as `len(ds.repeat())` reports it)."""

_BUILDERS: dict[str, Callable[..., Any]] = {}


B = TypeVar("B", bound=Callable[..., Any])


def register(name: str) -> Callable[[B], B]:
    """Registers the builder (a stage class, or a function) that `name` delegates to.

    The base-class method calls it with its own arguments, so a stage class
    whose __init__ takes them in that order registers itself directly.
    """

    def decorate(builder: B) -> B:
        _BUILDERS[name] = builder
        return builder

    return decorate


def _build(name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise RuntimeError(
            f"the `{name}` transformation is not registered: import grain_dataset "
            "(not only grain_dataset._core._base) before building pipelines."
        ) from None
    return builder(*args, **kwargs)


def _as_parents(parents: Any) -> tuple[Any, ...]:
    if isinstance(parents, _Dataset | DatasetIterator):
        return (parents,)
    return tuple(parents)


def _missing_attribute(obj: Any, name: str) -> AttributeError:
    """The AttributeError for `name`, saying how to fix a skipped base __init__."""
    if "_parents" not in obj.__dict__:
        return AttributeError(
            f"{type(obj).__name__} has no `{name}`: its __init__ must call "
            "super().__init__(parents) (parents may be empty for a source)."
        )
    return AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}")


class _Dataset(StageTraits, abc.ABC):
    """What MapDataset and IterDataset share: parents, seeds and `pipe`.

    The traits other modules read off a stage are declared in grain_dataset._common._contract.

    Subclasses read ``self._parents`` (a tuple), ``self._parent`` (the one
    parent; AssertionError with none or several) and ``self._default_seed``,
    as in Grain (see grain_dataset._core._subclassing).
    """

    if TYPE_CHECKING:
        _parent: Any
    else:
        _parent = OneParent()
    _stats: NoStats = NO_STATS

    def __init__(self, parents: _Dataset | Iterable[_Dataset] = ()):
        self._parents = _as_parents(parents)
        for parent in self._parents:
            if not isinstance(parent, _Dataset):
                raise TypeError(
                    f"parents of {type(self).__name__} must be MapDataset or IterDataset, "
                    f"got {type(parent).__name__}."
                )
        bases = [parent._seed_base for parent in self._parents]
        if not bases or all(base is None for base in bases):
            self._seed_base: int | None = None
        elif len(bases) == 1:
            self._seed_base = bases[0]
        else:
            # A mixture's random stages draw from all of its parents' seeds.
            words = ["unseeded" if base is None else base for base in bases]
            self._seed_base = derive_seed(0, "combine", *words)
        self._depth = 1 + max((parent._depth for parent in self._parents), default=-1)

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails, e.g. a subclass skipped our __init__.
        raise _missing_attribute(self, name)

    @property
    def parents(self) -> Sequence[MapDataset[Any] | IterDataset[Any]]:
        """The datasets this one reads from."""
        return self._parents

    @property
    def _stage_seed(self) -> int | None:
        """This stage's 64-bit seed under `ds.seed(...)`, from its position in the pipeline."""
        if self._seed_base is None:
            return None
        return derive_seed(self._seed_base, "default_seed", self._depth)

    @property
    def _default_seed(self) -> int | None:
        """This stage's seed under `ds.seed(...)` for a subclass, as Grain documents it.

        An int in [0, 2**32) (None without `ds.seed` upstream), so that it is a
        valid ``seed=`` of any random transformation, as Grain's is.
        """
        seed = self._stage_seed
        return None if seed is None else seed >> 32

    @property
    def _element_spec(self) -> Any:
        """The spec of this dataset's elements, where a subclass declares it (Grain's hook).

        `get_element_spec` returns a declared spec and otherwise reads an element;
        the default declares none.
        """
        raise NotImplementedError(f"{type(self).__name__} declares no element spec.")

    def __str__(self) -> str:
        """The pipeline, one stage per line from the source to this dataset."""
        from grain_dataset._core._pipeline_repr import describe

        return describe(self)

    def pipe(self, func: Callable[..., S], /, *args: Any, **kwargs: Any) -> S:
        """Returns ``func(self, *args, **kwargs)``, to chain any transformation.

        Example::

            ds = grain.MapDataset.range(1000).pipe(
                grain.experimental.WindowShuffleMapDataset, window_size=128, seed=0
            )
        """
        return func(self, *args, **kwargs)


def dataset_list(value: Any, name: str, stage: str, *, allow_empty: bool = False) -> list[Any]:
    """`value` as a list after checking it is a list or tuple (not a dataset), non-empty
    unless `allow_empty`."""
    if isinstance(value, _Dataset) or not isinstance(value, Sequence):
        raise TypeError(
            f"`{name}` of {stage} must be a list of datasets, like {stage}([ds1, ds2]); "
            f"got {type(value).__name__}."
        )
    values = list(value)
    if not values and not allow_empty:
        grain = "At least one parent must be provided. " if name == "parents" else ""
        raise ValueError(f"{grain}`{name}` of {stage} is empty: it must hold at least one dataset.")
    return values


def as_iter_dataset(dataset: Any, name: str, stage: str | None = None) -> IterDataset[Any]:
    """`dataset` as an IterDataset: a MapDataset is read with `to_iter_dataset()`."""
    if isinstance(dataset, MapDataset):
        return dataset.to_iter_dataset()
    if isinstance(dataset, IterDataset):
        return dataset
    where = f" of {stage}" if stage else ""
    raise TypeError(
        f"`{name}`{where} must be an IterDataset (or a MapDataset, which is read with "
        f".to_iter_dataset()), got {type(dataset).__name__}."
    )


def check_index(index: Any, length: int) -> int:
    """Returns `index` as a non-negative int.

    Negative indices count back from the end of epoch 0 and wrap around it, as in
    Grain: with 10 elements, -1 is 9 and -11 is 9 again.
    """
    if type(index) is not int:
        index = checks.as_int(index, "index")
    if length == 0:
        raise IndexError("the dataset is empty: it has no element at any index.")
    if index < 0:
        index %= length
    return index


class MapDataset(_Dataset, MapTraits, Generic[T]):
    """A dataset with efficient random access, like an infinite, lazy `Sequence`.

    Transformations return new datasets; a MapDataset is never modified.
    ``len(ds)`` is one epoch; ``ds[i]`` for ``i >= len(ds)`` is an element of a
    later epoch (a shuffle reshuffles, random maps draw new numbers) and never
    raises IndexError. ``ds[i]`` is None where a filter removed the element.

    Writing a source as a MapDataset::

        class Squares(grain.MapDataset):
            def __init__(self, n):
                super().__init__()
                self._n = n

            def __len__(self):
                return self._n

            def __getitem__(self, index):
                if isinstance(index, slice):
                    return self.slice(index)
                return (index % self._n) ** 2

        list(Squares(4).map(lambda x: x + 1))  # [1, 2, 5, 10]
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("_getitems")
        if own is not None:
            cls._getitems = accepting_sequences(own)  # type: ignore[method-assign]

    # -- factories -----------------------------------------------------------------

    @staticmethod
    def source(source: Any) -> MapDataset[Any]:
        """Returns a dataset reading a random-access source or a Sequence.

        Example::

            list(MapDataset.source([1, 2, 3])) == [1, 2, 3]
        """
        return _build("source", source)

    @staticmethod
    def range(start: int, stop: int | None = None, step: int = 1) -> MapDataset[int]:
        """Returns a dataset of the integers of ``range(start, stop, step)``."""
        return _build("range", start, stop, step)

    @staticmethod
    def concatenate(datasets: Sequence[MapDataset[T]]) -> MapDataset[T]:
        """Returns the elements of all `datasets`, one after the other.

        Epoch n of the result is epoch n of every component.
        """
        return _build("concatenate", datasets)

    @staticmethod
    def mix(
        datasets: Sequence[MapDataset[T]],
        weights: Sequence[float] | None = None,
        *,
        costs: Sequence[Sequence[float] | np.ndarray | str | os.PathLike[str]] | None = None,
    ) -> MapDataset[T]:
        """Returns a mixture of `datasets` in proportion to `weights` (uniform by default).

        An epoch ends when the component that runs out first (for its weight) is
        used up; repeat the components first for an endless mixture. Read past
        that length (an index, ``.repeat()``), each component continues where it
        stopped, so the records the first epoch left out are read next.

        With `costs`, the weights are shares of a per-record cost (tokens)
        rather than of records: one entry per dataset, an array of the costs
        (> 0) of its records by index, or the path of a ``grain convert``
        manifest written with ``--lengths``. Any window of the mixture then
        holds each dataset's cost within about half a record of its share; random
        access stays O(1) (docs/dataset.md, "Mixing by tokens").

        Example::

            list(MapDataset.mix([MapDataset.range(5), MapDataset.range(7, 10)]))
            # [0, 7, 1, 8, 2, 9]
            docs = [MapDataset.source(short_docs), MapDataset.source(long_docs)]
            MapDataset.mix(docs, [0.5, 0.5], costs=[short_lengths, long_lengths])
        """
        if costs is None:
            return _build("map_mix", datasets, weights)
        return _build("map_mix", datasets, weights, costs)

    @staticmethod
    def select_from_datasets(
        datasets: Sequence[MapDataset[T]], selection_map: DatasetSelectionMap
    ) -> MapDataset[T]:
        """Returns the elements that `selection_map` picks from `datasets`, position by position."""
        return _build("select_from_datasets", datasets, selection_map)

    # -- the contract ----------------------------------------------------------------

    @abc.abstractmethod
    def __len__(self) -> int:
        """The length of one epoch."""

    @overload
    def __getitem__(self, index: slice) -> MapDataset[T]: ...

    @overload
    def __getitem__(self, index: int) -> T | None: ...

    @abc.abstractmethod
    def __getitem__(self, index: Any) -> Any:
        """Returns element `index` (None if filtered out), or a sliced dataset for a slice."""

    def _getitem(self, index: int) -> T | None:
        """Element `index` (an int >= 0); built-in stages override this, not __getitem__."""
        return self[index]

    @accepting_sequences
    def _getitems(self, indices: np.ndarray) -> list[Any]:
        """Elements at `indices`; stages that can vectorize override this.

        Every override receives an int64 array; a caller may pass any sequence
        of ints, as Grain's subclasses do (grain_dataset._core._subclassing).
        """
        return [self._getitem(index) for index in indices.tolist()]

    def _fingerprint_token(self) -> str | None:
        # A source (no parents) adds its length: another length moves every position.
        name = type(self).__name__
        return name if self._parents else _fingerprint.token(name, f"len={len(self)}")

    def __iter__(self) -> DatasetIterator[T]:
        return iter(self.to_iter_dataset())

    # -- transformations -------------------------------------------------------------

    def map(self, transform: MapTransform | Callable[[T], Any]) -> MapDataset[Any]:
        """Returns a dataset of ``transform(element)`` (a MapTransform or a callable)."""
        return _build("map", self, transform)

    def map_with_index(self, transform: MapWithIndex | Callable[[int, T], Any]) -> MapDataset[Any]:
        """Returns a dataset of ``transform(index, element)``."""
        return _build("map_with_index", self, transform)

    def random_map(
        self,
        transform: RandomMapTransform | Callable[[T, np.random.Generator], Any],
        *,
        seed: int | None = None,
    ) -> MapDataset[Any]:
        """Returns a dataset of ``transform(element, rng)``.

        `rng` is a `np.random.Generator` seeded from the stage's seed and the
        element's index, so an element's random numbers never depend on which
        elements were read before it. The seed is `seed` (in [0, 2**32)) or,
        if None, derived from ``ds.seed(...)`` upstream.
        """
        return _build("random_map", self, transform, seed)

    def filter(self, transform: FilterTransform | Callable[[T], bool]) -> MapDataset[T]:
        """Returns a dataset where elements failing `transform` read as None.

        Iterating skips the None positions.
        """
        return _build("filter", self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> MapDataset[S]:
        """Returns a dataset of batches of `batch_size` consecutive elements.

        The default `batch_fn` stacks the PyTree leaves along a new first axis.
        Filtered (None) positions are left out of their batch; a batch whose
        positions are all filtered is None.
        """
        return _build("map_batch", self, batch_size, drop_remainder, batch_fn)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """Returns the same elements in a global order that is new in every epoch.

        `seed` is an int in [0, 2**32); if None the seed is derived from
        ``ds.seed(...)`` upstream, and without either this raises ValueError.
        """
        return _build("shuffle", self, seed)

    def slice(self, sl: builtins.slice | Sequence[int] | np.ndarray) -> MapDataset[T]:
        """Returns the elements at the indices of `sl`; ``ds[sl]`` does the same for a slice.

        `sl` is a slice, or a sequence of indices (negative ones count from the
        end), e.g. ``ds.slice([4, 0, 2])``: the dataset of elements 4, 0 and 2.
        """
        return _build("slice", self, sl)

    def repeat(
        self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ) -> MapDataset[T]:
        """Returns `num_epochs` epochs of this dataset (None: infinitely many).

        ``len(ds.repeat())`` is ``sys.maxsize``. Epochs stay distinct: a shuffle
        before the repeat reshuffles each one, and random maps draw new numbers.
        With ``reseed_each_epoch=False`` every epoch repeats the first exactly.
        """
        return _build("repeat", self, num_epochs, reseed_each_epoch)

    def apply(self, transformations: Transformation | Sequence[Transformation]) -> MapDataset[Any]:
        """Returns this dataset with Grain transform objects applied, in order.

        `transformations` is one transform or a sequence of them; the kind of
        each picks the method: a `grain.transforms.Map` maps, a `RandomMap`
        random-maps, a `Filter` filters, a `FlatMap` flat-maps, a `Batch`
        batches and a `MapWithIndex` maps with the index (see
        `grain.experimental.apply_transformations`).
        """
        return _build("apply", self, transformations)

    def seed(self, seed: int) -> MapDataset[T]:
        """Returns this dataset with `seed` as the seed of every later random stage.

        Each downstream random stage without its own ``seed=`` derives a
        distinct seed from `seed` and its position in the pipeline.
        """
        return _build("map_seed", self, seed)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """Returns an IterDataset over one epoch, read ahead by a thread pool.

        Args:
          read_options: threads and buffer of the read-ahead; default
            ``ReadOptions()`` (16 threads, 500 elements).
          allow_nones: yield the None of filtered positions instead of skipping them.
        """
        return _build("to_iter_dataset", self, read_options, allow_nones)


class IterDataset(_Dataset, Generic[T]):
    """A dataset that can only be iterated, like a lazy `Iterable`.

    `iter(ds)` returns a `DatasetIterator` whose position can be saved and
    restored. Writing one::

        class Countdown(grain.IterDataset):
            def __init__(self, n):
                super().__init__()
                self._n = n

            def __iter__(self):
                return CountdownIterator(self._n)   # a grain.DatasetIterator
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__iter__")
        if own is not None and not getattr(own, "_grain_remembers", False):
            cls.__iter__ = _remembering(own)  # type: ignore[method-assign]

    @staticmethod
    def mix(
        datasets: Sequence[IterDataset[T]] | Mapping[str, IterDataset[T]],
        weights: Sequence[float] | Mapping[str, float] | None = None,
        *,
        costs: Callable[[T], float]
        | Sequence[Callable[[T], float]]
        | Mapping[str, Callable[[T], float]]
        | None = None,
    ) -> IterDataset[T]:
        """Returns a mixture of `datasets` in proportion to `weights` (uniform by default).

        It stops as soon as the component it needs next is exhausted. `datasets`
        may be a dict of name to dataset, with `weights` a dict of the same
        names (the components are taken in the dict's order).

        With `costs`, the weights are shares of a per-element cost (tokens):
        a function of an element returning its cost (> 0) for every dataset,
        or one function per dataset (a dict by name for a dict of datasets).
        Each dataset's next element is read ahead and costed, and the one whose
        cost, centred on its dataset's tally, comes first is delivered; the
        mix ends when any dataset runs out, and the state adds one number per
        dataset.

        Example::

            ds1 = MapDataset.range(5).to_iter_dataset()
            ds2 = MapDataset.range(7, 10).to_iter_dataset()
            list(IterDataset.mix([ds1, ds2]))  # [0, 7, 1, 8, 2, 9, 3]
            IterDataset.mix([a, b], [0.7, 0.3], costs=lambda x: len(x["tokens"]))
        """
        if costs is None:
            return _build("iter_mix", datasets, weights)
        return _build("iter_mix", datasets, weights, costs)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """Returns a new iterator at the start of this dataset."""

    def map(self, transform: MapTransform | Callable[[T], Any]) -> IterDataset[Any]:
        """Returns a dataset of ``transform(element)`` (a MapTransform or a callable)."""
        return _build("iter_map", self, transform)

    def map_with_index(self, transform: MapWithIndex | Callable[[int, T], Any]) -> IterDataset[Any]:
        """Returns a dataset of ``transform(index, element)``, index counting from 0."""
        return _build("iter_map_with_index", self, transform)

    def random_map(
        self,
        transform: RandomMapTransform | Callable[[T, np.random.Generator], Any],
        *,
        seed: int | None = None,
    ) -> IterDataset[Any]:
        """Returns a dataset of ``transform(element, rng)``.

        `rng` is seeded from the stage seed and the element's position in this
        dataset's output, which the iterator state records.
        """
        return _build("iter_random_map", self, transform, seed)

    def filter(self, transform: FilterTransform | Callable[[T], bool]) -> IterDataset[T]:
        """Returns a dataset of the elements for which `transform` is true."""
        return _build("iter_filter", self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset[S]:
        """Returns a dataset of batches of `batch_size` consecutive elements."""
        return _build("iter_batch", self, batch_size, drop_remainder, batch_fn)

    def seed(self, seed: int) -> IterDataset[T]:
        """Returns this dataset with `seed` as the seed of every later random stage."""
        return _build("iter_seed", self, seed)

    def apply(self, transformations: Transformation | Sequence[Transformation]) -> IterDataset[Any]:
        """Returns this dataset with Grain transform objects applied, in order.

        `transformations` is one transform or a sequence of them; the kind of
        each picks the method (map, random map, filter, flat map, batch, map
        with index), as `grain.experimental.apply_transformations` does.
        """
        return _build("apply", self, transformations)

    def mp_prefetch(
        self,
        options: Any = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
    ) -> IterDataset[T]:
        """Returns a dataset that runs this pipeline in worker processes (grain-mp).

        With `sequential_slice`, each worker reads a contiguous slice of the
        positions instead of every num_workers-th one.
        """
        return _build("mp_prefetch", self, options, worker_init_fn, sequential_slice)

    def prefetch(self, multiprocessing_options: Any) -> IterDataset[T]:
        """Deprecated: use `mp_prefetch`."""
        return self.mp_prefetch(multiprocessing_options)


def _remembering(own: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`own` (an __iter__) recording its dataset on the iterator, for the state fingerprint."""

    def iter_(self: Any) -> Any:
        iterator = own(self)
        if isinstance(iterator, DatasetIterator):
            _fingerprint.remember_dataset(iterator, self, stamp=False)
        return iterator

    iter_.__name__ = own.__name__
    iter_.__qualname__ = own.__qualname__
    iter_.__doc__ = own.__doc__
    iter_._grain_remembers = True  # type: ignore[attr-defined]
    return iter_


_DEFAULT_OPTIONS = DatasetOptions()  # immutable: shared by every pipeline without options


class _IteratorContext:
    """What all iterators of one pipeline share: its DatasetOptions and worker slice.

    `worker_slice` is the share of the positions that the pipeline's
    `to_iter_dataset` iterators read in a worker, None outside one (see
    grain_dataset._core._worker_slice): an iterator takes the slice of the
    `iter_worker_slice` call that creates it, if any.
    """

    __slots__ = ("_options", "worker_slice")

    def __init__(
        self,
        dataset_options: DatasetOptions | None = None,
        worker_slice: WorkerSlice | None = None,
    ):
        # None until a WithOptionsIterDataset gives some: merging then has nothing to undo.
        self._options = dataset_options
        self.worker_slice = worker_slice

    @property
    def dataset_options(self) -> DatasetOptions:
        """The pipeline's options; every field at its default where none were given.

        Never None, as in Grain, so that a subclass may read a field directly.
        """
        options = self._options
        return _DEFAULT_OPTIONS if options is None else options

    @dataset_options.setter
    def dataset_options(self, options: DatasetOptions | None) -> None:
        self._options = options

    @property
    def mp_context(self) -> MultiprocessingContext:
        """Which worker of how many runs this pipeline (Grain's name for the worker slice)."""
        if self.worker_slice is None:
            return MultiprocessingContext()
        index, count, _ = self.worker_slice
        return MultiprocessingContext(process_index=index, process_count=count)


class DatasetIterator(IteratorTraits, Iterator[T], abc.ABC):
    """The iterator of an IterDataset, with a state that can be saved and restored.

    The contract, for every iterator:
      ``__next__()``      the next element, or StopIteration at the end.
      ``get_state()``     a small JSON-serializable dict of integers saying where
                          the iterator is; never the data itself.
      ``set_state(s)``    moves this iterator to where `s` was taken, so that it
                          continues with exactly the elements that followed.

    A transformation's iterator wraps its parents' iterators; pass them to
    ``super().__init__(parents)`` and read them back as ``self._parents`` (a
    tuple) or, with exactly one, ``self._parent``; ``self._ctx`` is the
    pipeline's context (``dataset_options``, ``mp_context``), as in Grain (see
    grain_dataset._core._subclassing). What the library itself keeps on an
    iterator (the dataset behind its checkpoints' fingerprint, closed and
    closing, the statistics it records) lives in one object,
    `grain_dataset._runtime._carried.Carried`, under one key of its
    ``__dict__``; only the per-call lock and next() hook, and ``_ctx``, are
    attributes of their own. Example::

        class CountIterator(grain.DatasetIterator):
            def __init__(self, stop):
                super().__init__()
                self._next, self._stop = 0, stop

            def __next__(self):
                if self._next >= self._stop:
                    raise StopIteration
                self._next += 1
                return self._next - 1

            def get_state(self):
                return {"next": self._next}

            def set_state(self, state):
                self._next = state["next"]

    Threads: the iterator you hold serializes ``next()``, ``get_state()``,
    ``set_state()`` and ``close()``: two threads calling ``next()`` get
    distinct elements, together exactly the single-threaded stream (see
    "Thread safety" in docs/troubleshooting.md). The iterators of the stages
    inside it are called by their child only.
    """

    # Read by the entries of the four guarded methods (see grain_dataset._runtime._guard): the
    # outermost iterator's lock and its next() hook; None in every stage inside.
    _call_lock: Any = None
    _grain_next: NextHook | None = None

    # The protected names Grain's iterator subclasses read (grain_dataset._core._subclassing);
    # `_parents` and `_ctx` are set by __init__.
    if TYPE_CHECKING:
        _parent: Any
    else:
        _parent = OneParent()
    _stats: NoStats = NO_STATS
    _closed: bool = False  # set by close(); interleave keeps its own under this name

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hook_methods(cls)

    def __init__(self, parents: DatasetIterator[Any] | Iterable[DatasetIterator[Any]] = ()):
        self._parents = _as_parents(parents)
        self._ctx = _IteratorContext(worker_slice=creating_slice())
        for parent in self._parents:
            if not isinstance(parent, DatasetIterator):
                raise TypeError(
                    f"parents of {type(self).__name__} must be DatasetIterators, "
                    f"got {type(parent).__name__}."
                )
            _adopt(self._ctx, parent)
        if debug_mode():
            _record_stats(self)
        # Until another iterator adopts it, this is the one its user calls: one thread
        # at a time inside it (see grain_dataset._runtime._guard).
        guard(self)

    @property
    def parents(self) -> Sequence[DatasetIterator[Any]]:
        return _parents_of(self)

    def __iter__(self) -> DatasetIterator[T]:
        return self

    @abc.abstractmethod
    def __next__(self) -> T:
        """Returns the next element or raises StopIteration."""

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Returns where this iterator is, as a small JSON-serializable dict."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Moves this iterator to the position `state` describes."""

    def _get_next_index(self) -> int:
        """The index of the element `next()` returns next: the hook of
        `grain.experimental.get_next_index`, for a stage whose position is one
        integer. The default raises NotImplementedError."""
        raise no_next_index(self)

    def _set_next_index(self, index: int) -> None:
        """Moves so that `next()` returns element `index` next: the hook of
        `grain.experimental.set_next_index`. The default raises NotImplementedError."""
        raise no_next_index(self)

    def save(
        self, directory: _state_file.Directory | _state_file.AwaitingCreation
    ) -> Coroutine[Any, Any, Awaitable[None]]:
        """Returns a coroutine that saves the iterator state into `directory`.

        The current state (`get_state`) is used for saving: it is taken when
        `save` is called, so any updates to the state after returning from this
        method will not affect the saved checkpoint. The coroutine writes
        ``process_<i>-of-<n>.json`` (i, n from jax's process index and count
        when jax is imported; else 0 and 1), e.g. ``asyncio.run(it.save(path))``.
        Awaiting it returns an awaitable that is already done (the background
        phase of Orbax's save protocol), so Orbax can checkpoint the iterator.

        Args:
          directory: a path, or an Orbax PathAwaitingCreation, a path in the
            process of being created, whose `await_creation` is awaited before
            the file is written.
        """
        return _state_file.save_coroutine(self, directory)

    def load(self, directory: _state_file.Directory) -> Coroutine[Any, Any, Awaitable[None]]:
        """Returns a coroutine that loads the iterator state from `directory` and sets it.

        The state may be loaded and set in a background thread (Orbax does so).
        Example: ``asyncio.run(fresh_iterator.load(path))``.
        """
        return _state_file.load_coroutine(self, directory)

    def stats(self) -> PipelineStats:
        """The per-stage statistics recorded so far (a `PipelineStats`; `str()` is a table).

        Recording is on when the pipeline has ``DatasetOptions(execution_tracking_mode=
        "stage_timing")`` (see `WithOptionsIterDataset`) or after
        ``grain_dataset.track_stats(iterator)``; otherwise there are no stages.
        """
        from grain_dataset._core._stats import collect

        return collect(self)

    def start_prefetch(self) -> None:
        """Starts reading ahead in the background, where a stage can (threads, workers)."""
        for parent in _parents_of(self):
            parent.start_prefetch()

    def close(self) -> None:
        """Stops background threads of this iterator and its parents; idempotent.

        A closed iterator refuses `next()` (ValueError); `get_state()` still
        says where it stopped. From another thread, while `next()` waits on a
        read thread or worker process stuck in a transformation, close() does
        not wait for it: it ends the worker processes (terminated, then killed:
        within two seconds), makes the waiting `next()` raise the ValueError,
        and returns within about two seconds (``CLOSE_TIMEOUT_S`` of
        `grain_dataset._runtime._guard`). A thread stuck in user code cannot be killed:
        it stays (a daemon thread, holding only the stage it runs) until that
        code returns. See docs/troubleshooting.md, "A transformation that
        never returns".

        It sets `_closed`, which a subclass may read (``_assert_not_closed()``
        in its ``__next__``), as in Grain.
        """
        self._closed = True
        for parent in _parents_of(self):
            parent.close()

    def _assert_not_closed(self) -> None:
        """Raises the ValueError of `next()` on a closed iterator if `close()` ran (Grain's
        hook for a subclass's ``__next__``)."""
        if self._closed:
            raise closed_error(self)

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


hook_methods(DatasetIterator)  # its close(); __init_subclass__ does its subclasses


def _record_stats(iterator: DatasetIterator[Any]) -> None:
    """Debug mode: every iterator records statistics (and `grain.monitoring` lists it)."""
    from grain_dataset._core._stats import track

    track(iterator)


def _parents_of(iterator: DatasetIterator[Any]) -> tuple[DatasetIterator[Any], ...]:
    """`iterator`'s parents, or the error saying its __init__ skipped ours.

    DatasetIterator has no __getattr__ to say so for every attribute: a class
    defining one makes every attribute read of every stage slower.
    """
    parents = iterator.__dict__.get("_parents")
    if parents is None:
        raise _missing_attribute(iterator, "_parents")
    return parents


def _adopt(ctx: _IteratorContext, iterator: DatasetIterator[Any]) -> None:
    """Makes `iterator` and its ancestors share `ctx`, merging their options (and slice) into it."""
    _parents_of(iterator)  # a clear error if its __init__ skipped ours
    unguard(iterator)  # a parent is called by its child only, from one thread at a time
    own = iterator.__dict__.get("_ctx")
    if own is ctx:
        return
    if own is not None and own._options is not None:
        ctx._options = own._options if ctx._options is None else ctx._options.merge(own._options)
    if ctx.worker_slice is None and own is not None:
        # A wrapper built around a worker's iterator is part of that worker's pipeline.
        ctx.worker_slice = own.worker_slice
    iterator.__dict__["_ctx"] = ctx
    for parent in iterator.__dict__["_parents"]:
        _adopt(ctx, parent)
