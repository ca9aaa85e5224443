"""Flat map: each element splits into up to `max_fan_out` elements.

MapDataset: random access needs to know where element i's outputs land
without computing the elements before it, so each parent index owns a fixed
block of `max_fan_out` output indices::

    output index j  ->  parent index j // max_fan_out,  output j % max_fan_out

An element with fewer outputs leaves the rest of its block None (filtered), and
iteration skips them. The length is ``len(parent) * max_fan_out`` and later
epochs map to the parent's later epochs by the same division.

IterDataset: every output of each element, in order. The state says which
element is being split and how far::

    {"parent": parent state before that element, "emitted": its outputs returned}

Restoring reads that element again and skips the outputs already returned
(the transform must be deterministic, as every transform in a checkpointed
pipeline must). After an element's last output the state points past it.

A transform returning more than `max_fan_out` outputs raises ValueError in
both, since the MapDataset would silently lose them.
"""

from __future__ import annotations

import itertools
import reprlib
from collections.abc import Callable
from typing import Any

import numpy as np

from grain_dataset._common import _transforms
from grain_dataset._common._errors import note_stage
from grain_dataset._common._transforms import FlatMapTransform
from grain_dataset._core._base import (
    INFINITE,
    DatasetIterator,
    IterDataset,
    MapDataset,
    as_iter_dataset,
)
from grain_dataset._core._iter_stage import Anchor, IterStage, StageIterator, iterator_of
from grain_dataset._core._stage import MapStage, is_infinite
from grain_dataset._core._state import check_state, renamed_keys
from grain_dataset._runtime._fingerprint import token


class _FlatMapper:
    """The transform of a flat-map stage, applied with the fan-out check."""

    def __init__(self, stage: Any, transform: Any):
        self.stage = stage
        self.transform = transform
        self.fn: Callable[[Any], Any]
        self.fn, self.max_fan_out = _transforms.flat_map_function(transform)

    def __call__(self, element: Any) -> list[Any]:
        """The outputs of `element` as a list; note_stage marks user errors."""
        limit = self.max_fan_out
        try:
            # Reading one past the limit detects an oversized (or endless) result.
            outputs = list(itertools.islice(self.fn(element), limit + 1))
        except Exception as error:
            note_stage(error, self.stage)
            raise
        if len(outputs) > limit:
            raise ValueError(
                "The user-provided FlatMapTransform has a split that exceeds specified max "
                "fan-out size. To address this, you can raise the max fan-out size, but for a "
                "max fan-out size >100, performance may suffer. Please consider preprocessing "
                "your data to keep the max fan-out size reasonable. "
                f"The FlatMapTransform {_transforms.describe(self.transform)} returned more "
                f"than max_fan_out={limit} elements for the element "
                f"{reprlib.repr(element)}; raise its max_fan_out or split the element "
                "into fewer parts."
            )
        return outputs


class FlatMapMapDataset(MapStage):
    """The outputs of ``transform.flat_map(element)``, `max_fan_out` indices per element.

    Index j holds output ``j % max_fan_out`` of parent element
    ``j // max_fan_out``, or None (filtered) past that element's last output.

    Example::

        class Repeat(grain.experimental.FlatMapTransform):
            max_fan_out = 3

            def flat_map(self, element):
                return [element] * element

        ds = FlatMapMapDataset(grain.MapDataset.range(4), Repeat())
        len(ds)   # 12
        list(ds)  # [1, 2, 2, 3, 3, 3]
    """

    def _fingerprint_token(self) -> str | None:
        return token("flat_map", self._mapper.max_fan_out)

    # Positions past an element's last output read None: a MapDataset.batch refuses.
    discards_elements = "FlatMapMapDataset"

    def __init__(self, parent: MapDataset[Any], transform: FlatMapTransform):
        super().__init__(parent)
        if not isinstance(parent, MapDataset):
            raise TypeError(
                f"`parent` of FlatMapMapDataset must be a MapDataset, got "
                f"{type(parent).__name__}; use FlatMapIterDataset for an IterDataset."
            )
        self._parent = parent
        self._mapper = _FlatMapper(self, transform)
        fan_out = self._mapper.max_fan_out
        parent_length = len(parent)
        infinite = is_infinite(parent_length)
        self._length = INFINITE if infinite else min(INFINITE, parent_length * fan_out)

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        element, slot = divmod(index, self._mapper.max_fan_out)
        value = self._parent._getitem(element)
        if value is None:
            return None
        outputs = self._mapper(value)
        return outputs[slot] if slot < len(outputs) else None

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        if not indices.size:
            return []
        fan_out = self._mapper.max_fan_out
        elements = indices // fan_out
        slots = (indices - elements * fan_out).tolist()
        # Each parent element is read and split once, however many of its
        # outputs are asked for: a run of equal parent indices shares one call.
        change = np.empty(elements.shape, dtype=bool)
        change[0] = True
        np.not_equal(elements[1:], elements[:-1], out=change[1:])
        values = self._parent._getitems(elements[change])
        split = [None if value is None else self._mapper(value) for value in values]
        runs = (np.cumsum(change) - 1).tolist()
        result = []
        for run, slot in zip(runs, slots, strict=True):
            outputs = split[run]
            result.append(outputs[slot] if outputs is not None and slot < len(outputs) else None)
        return result

    def _describe(self) -> str:
        mapper = self._mapper
        return f"{_transforms.describe(mapper.transform)}, max_fan_out={mapper.max_fan_out}"


class FlatMapIterDataset(IterStage):
    """Every output of ``transform.flat_map(element)``, for each element in order.

    A MapDataset parent is read with ``.to_iter_dataset()``.

    Example::

        class Split(grain.experimental.FlatMapTransform):
            max_fan_out = 10

            def flat_map(self, element):
                return element.split()

        ds = FlatMapIterDataset(grain.MapDataset.source(["a b", "c"]).to_iter_dataset(), Split())
        list(ds)  # ['a', 'b', 'c']
    """

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return "flat_map"

    def __init__(self, parent: IterDataset[Any], transform: FlatMapTransform):
        super().__init__(as_iter_dataset(parent, "parent"))
        self._mapper = _FlatMapper(self, transform)

    def _describe(self) -> str:
        mapper = self._mapper
        return f"{_transforms.describe(mapper.transform)}, max_fan_out={mapper.max_fan_out}"


_BUFFER = "next_index_in_buffer"


@iterator_of(FlatMapIterDataset)
class _FlatMapIterator(StageIterator):
    """State, Grain's: ``{"parent": ..., "next_index_in_buffer": n}``.

    "parent" is the parent's state before the element last read (or tried: at
    the end it is the parent's state at the end, with the previous count), n
    the outputs of that element returned so far; an element used up is left
    only when the next one is read, so n may equal its number of outputs.
    Earlier versions of this library wrote ``"emitted"`` for n; such states
    restore as well.
    """

    def __init__(self, dataset: FlatMapIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._anchor = Anchor(parent)  # before the element being split
        self._outputs: list[Any] | None = None
        self._emitted = 0
        # The element of `_emitted` was used up: the next element read starts at 0.
        self._used_up = False

    def _split_next(self) -> list[Any]:
        """Reads and splits the element at the anchor; errors leave the state past it."""
        try:
            outputs = self._dataset._mapper(next(self._parent))
        except StopIteration:
            raise
        except Exception:
            # The failing element is dropped, as a failing map drops it: the
            # state moves past it so that the next call goes on after it.
            self._anchor.move()
            self._emitted, self._used_up = 0, False
            raise
        if self._used_up:
            self._emitted, self._used_up = 0, False
        elif self._emitted > len(outputs):
            raise ValueError(
                f"the restored state of {self._dataset!r} says {self._emitted} outputs of "
                f"the current element were returned, but it has {len(outputs)}: the state is "
                "from a different pipeline or the transform changed."
            )
        return outputs

    def __next__(self) -> Any:
        while True:
            outputs = self._outputs
            if outputs is None:
                outputs = self._outputs = self._split_next()
            if self._emitted < len(outputs):
                value = outputs[self._emitted]
                self._emitted += 1
                return value
            # Used up: on to the next element, from the parent's state before it.
            self._anchor.move()
            self._outputs = None
            self._used_up = True

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._anchor.saved(), _BUFFER: self._emitted}

    def set_state(self, state: dict[str, Any]) -> None:
        state = renamed_keys(state, {"emitted": _BUFFER})
        check_state(state, repr(self._dataset), ("parent", _BUFFER))
        max_fan_out = self._dataset._mapper.max_fan_out
        emitted = state[_BUFFER]
        if emitted > max_fan_out:
            raise ValueError(
                f"state[{_BUFFER!r}] of {self._dataset!r} must be <= max_fan_out "
                f"({max_fan_out}), got {emitted}; the state is from a pipeline with another "
                "max_fan_out."
            )
        self._anchor.restore(state["parent"])
        self._emitted, self._used_up = emitted, False
        self._outputs = None  # the element is read and split again by the next call
