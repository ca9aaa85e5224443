"""The protected names that subclasses written against Grain read from the bases.

Grain's documentation invites users to subclass MapDataset, IterDataset and
DatasetIterator, and subclasses in the wild (packing stages, feature
converters) read a few protected names of the bases besides the documented
methods. The bases of `_base` carry the same names with the same meanings:

  ``_parents``      the tuple of parents given to ``super().__init__``.
  ``_parent``       the one parent; reading it on an object with no parent or
                    with several raises AssertionError (Grain's behaviour),
                    naming `_parents` as the fix.
  ``_default_seed`` a dataset's seed under ``ds.seed(...)`` (documented), an
                    int in [0, 2**32) as in Grain, so a subclass may pass it
                    as ``seed=`` to a random transformation; None without a
                    ``ds.seed`` upstream.
  ``_ctx``          an iterator's context, shared by the whole pipeline:
                    ``dataset_options`` and ``mp_context`` (which worker of how
                    many runs this copy of the pipeline).
  ``_stats``        what a Grain stage records its time and output spec into;
                    here a no-op, as our statistics time every stage's
                    ``__next__`` from outside (grain_dataset._core._stats).
  ``_element_spec`` a property a subclass may override to declare the spec of
                    its elements; `get_element_spec` then returns it instead
                    of reading an element. The default declares none.
  ``_closed``       set by DatasetIterator.close(); ``_assert_not_closed()``
                    raises the closed-iterator ValueError once it is.
  ``_get_next_index`` / ``_set_next_index``
                    the hooks of `get_next_index` / `set_next_index`; the
                    base's raise NotImplementedError.
  ``_getitems``     a MapDataset's elements at many indices. Grain's callers
                    pass a list; our stages compute on an int64 array, so the
                    MapDataset base wraps every `_getitems` a class defines
                    (`accepting_sequences`) to turn any other sequence into one:
                    one check per call, none per element.

`_parent` is a non-data descriptor (a `__get__` and no `__set__`): a stage that
assigns ``self._parent = ...`` (every built-in stage does, to read its parent
without a function call per element) stores a plain instance attribute, which
Python's lookup prefers; a subclass that never assigns it reads the current
``_parents[0]``, as in Grain.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
_ACCEPTS = "_grain_accepts_sequences"


def accepting_sequences(getitems: Callable[[Any, np.ndarray], T]) -> Callable[[Any, Any], T]:
    """`getitems` (a `_getitems` method), called with an int64 array whatever sequence
    of ints its caller passed (see the module docstring)."""
    if getattr(getitems, _ACCEPTS, False):
        return getitems

    @functools.wraps(getitems)
    def _getitems(self: Any, indices: Any) -> T:
        if type(indices) is not np.ndarray:
            indices = np.asarray(indices, dtype=np.int64)
        return getitems(self, indices)

    setattr(_getitems, _ACCEPTS, True)
    return _getitems


class OneParent:
    """The `_parent` of the bases: the single entry of `_parents` (see the module docstring)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        parents = obj.__dict__.get("_parents")
        if parents is None:
            # The base __init__ did not run: the bases' own error for that case says so.
            raise AttributeError(
                f"{type(obj).__name__} has no `_parent`: its __init__ must call "
                "super().__init__(parent)."
            )
        if len(parents) != 1:
            raise AssertionError(
                f"{type(obj).__name__} has {len(parents)} parents, so it has no single "
                "`_parent`; read `self._parents` (a tuple) instead."
            )
        return parents[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiprocessingContext:
    """Which copy of a pipeline an iterator belongs to: worker `process_index` of
    `process_count` under mp_prefetch (0 of 1 outside workers)."""

    process_index: int = 0
    process_count: int = 1


class NoStats:
    """The `_stats` of every dataset and iterator: Grain's recording calls, doing nothing.

    Statistics time each iterator's ``__next__`` from outside (see
    `grain_dataset.track_stats`), so a subclass's own recording adds nothing;
    each ``record_*`` returns its argument, as a stage writes
    ``return self._stats.record_output_spec(value)``.
    """

    __slots__ = ()

    @contextlib.contextmanager
    def record_self_time(self, *, num_elements: int = 1, offset_ns: int = 0) -> Iterator[None]:
        yield

    def record_output_spec(self, element: T) -> T:
        return element

    def record_output_spec_for_batch(self, elements: Sequence[T]) -> Sequence[T]:
        return elements

    def record_bytes_consumed(self, element: T) -> T:
        return element

    def record_bytes_produced(self, element: T) -> T:
        return element

    def report(self) -> None:
        return None


NO_STATS = NoStats()
