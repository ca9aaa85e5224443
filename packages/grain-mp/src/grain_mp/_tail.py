"""The parent side of a DataLoader: the tail of its operations, and where a state resumes.

`Units` turns the worker side's units (one per position, see `grain_mp._operations`)
into the stream of items the tail consumes, with a cursor ``(u, j)``: resume at
unit u after skipping j of its items. The tail is a chain of small generators
(`build_tail`). A state is ``(u, j, replay)``: restart the tail fresh at cursor
``(u, j)`` and drop its first `replay` outputs. It is exact as long as the tail
held nothing at that cursor; `replay` covers what it did hold.

Where the tail is fresh:

- Batches, maps and filters hold nothing once an output is out, so after every
  output the cursor itself is such a point (replay 0).
- A flat map holds the outputs of its element not yet handed on (a counter):
  the last output after which none was pending is the point, and replay counts
  the outputs since (`FlatMapCounters`).
- A record operation (any callable over Records, e.g. PackAndBatchOperation)
  holds what it likes. Its contract, which Grain's resumption relies on too: a
  Record it yields carries the `index` of the last input it used, and once it
  has yielded its *last* Record with some index i, it holds nothing of the inputs
  up to index i (it may hold later ones: the element a packer could not fit).
  So after a final output with index i, the tail is fresh right after the last
  input item with index i, once every record operation has gone past i (yielded
  a Record with a larger index, or ended): `IndexTracker` keeps those candidate
  points and confirms them. An operation whose indices go down breaks the
  contract: the tracker then stops confirming and replays from the last
  confirmed point (exact, only slower to restore).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from typing import Any

from grain_mp._operations import BatchStep, ElementStep, FlatMapStep, Plan, RecordsStep

# Input items remembered for index lookups; past this, old ones are forgotten
# (lookups then fail, which only lengthens replays).
_MAX_PULLED = 1 << 16


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


class _OperationWatch:
    """The indices of one record operation's recent outputs, numbered 1, 2, ... ."""

    __slots__ = ("count", "ended", "indices", "last", "monotone")

    def __init__(self) -> None:
        self.count = 0  # outputs so far
        self.last: int | None = None  # the index of the last one
        self.ended = False
        self.monotone = True
        # (n, index) of the outputs a pending candidate may still ask about.
        self.indices: collections.deque[tuple[int, int]] = collections.deque()

    def saw(self, index: int) -> None:
        if self.last is not None and index < self.last:
            self.monotone = False
        self.count += 1
        self.last = index
        self.indices.append((self.count, index))
        if len(self.indices) > _MAX_PULLED:
            self.indices.popleft()

    def verdict(self, count: int, last: int | None, index: int) -> bool | None:
        """Had the operation yielded all its Records with `index` once it had yielded `count`?

        True or False once known, None while it has not yielded Record ``count + 1``.
        `last` is the index of its Record `count` (None if it had yielded none).
        """
        if last is not None and last > index:
            return True  # it had gone past already
        if self.count == count:
            return True if self.ended else None
        for n, following in self.indices:
            if n == count + 1:
                return following > index
        return False  # forgotten: cannot tell, so not a fresh point


class IndexTracker:
    """Positions of a tail with record operations: candidate points, confirmed later.

    Wraps `Units` (remembering the cursor after each item and the item's index)
    and is told of every final output (`output`). A final output with index i is
    a candidate point "right after the last input item with index i"; it is
    confirmed once every record operation's next Record after that moment has
    an index above i (it had then yielded all its Records with index i, which the
    outputs so far include), and rejected if one has index i again.
    """

    def __init__(self, units: Units, counters: list[list[int]]):
        self._units = units
        self._counters = counters
        self.watches: list[_OperationWatch] = []
        self._pulled: collections.deque[tuple[int, tuple[int, int]]] = collections.deque()
        self._clean = units.cursor()
        self._outputs = 0  # final outputs since the run started
        self._clean_outputs = 0  # ... up to the clean point
        # (index, cursor, outputs so far, [(count, last index) per watch]).
        self._candidates: collections.deque[
            tuple[int, tuple[int, int], int, list[tuple[int, int | None]]]
        ] = collections.deque()

    def __iter__(self) -> IndexTracker:
        return self

    def __next__(self) -> Any:
        item = next(self._units)
        pulled = self._pulled
        pulled.append((item.metadata.index, self._units.cursor()))
        if len(pulled) > _MAX_PULLED:
            pulled.popleft()
        return item

    def watch(self, outputs: Iterator[Any]) -> Iterator[Any]:
        """Passes a record operation's outputs on, noting their indices."""
        watch = _OperationWatch()
        self.watches.append(watch)
        return _watched(outputs, watch)

    def _lookup(self, index: int) -> tuple[int, int] | None:
        for pulled_index, cursor in reversed(self._pulled):
            if pulled_index == index:
                return cursor
        return None

    def output(self, record: Any) -> None:
        """Notes a final output: a candidate point after its index, if the tail may be fresh."""
        self._outputs += 1
        if any(counter[0] for counter in self._counters):
            return  # a flat map holds outputs: not fresh here
        index = record.metadata.index
        cursor = self._lookup(index)
        if cursor is not None:
            counts = [(watch.count, watch.last) for watch in self.watches]
            self._candidates.append((index, cursor, self._outputs, counts))
        self._settle()

    def position(self) -> tuple[int, int, int]:
        """``(u, j, replay)``: the latest confirmed point and the outputs since."""
        self._settle()
        return (*self._clean, self._outputs - self._clean_outputs)

    def _settle(self) -> None:
        """Confirms or rejects the candidates that can be decided; forgets what is not needed."""
        candidates = self._candidates
        if not all(watch.monotone for watch in self.watches):
            candidates.clear()  # the contract is broken: replay from the last sure point
        while candidates:
            index, cursor, outputs, counts = candidates[0]
            verdicts = [
                watch.verdict(count, last, index)
                for watch, (count, last) in zip(self.watches, counts, strict=True)
            ]
            if None in verdicts and False not in verdicts:
                break
            candidates.popleft()
            if all(verdicts):
                self._clean, self._clean_outputs = cursor, outputs
        oldest = candidates[0][3] if candidates else None
        for w, watch in enumerate(self.watches):
            keep = watch.count if oldest is None else oldest[w][0]
            while watch.indices and watch.indices[0][0] <= keep:
                watch.indices.popleft()
        pulled = self._pulled
        while pulled and pulled[0][1] <= self._clean:
            pulled.popleft()


def _watched(outputs: Iterator[Any], watch: _OperationWatch) -> Iterator[Any]:
    for output in outputs:
        watch.saw(output.metadata.index)
        yield output
    watch.ended = True


def _elementwise(items: Iterator[Any], op: ElementStep) -> Iterator[Any]:
    for item in items:
        result = op(item)
        if result is not None:
            yield result


def _batched(items: Iterator[Any], op: BatchStep) -> Iterator[Any]:
    size, drop = op.batch_size, op.drop_remainder
    while True:
        group = list(itertools.islice(items, size))
        if not group or (drop and len(group) < size):
            return
        yield op(group)


def _flat_mapped(items: Iterator[Any], op: FlatMapStep, pending: list[int]) -> Iterator[Any]:
    # pending[0]: outputs of the current element not yet handed on (0 = nothing held).
    for item in items:
        outputs = op(item)
        pending[0] = len(outputs)
        for output in outputs:
            pending[0] -= 1
            yield output


def build_tail(
    plan: Plan, units: Units
) -> tuple[Iterator[Any], list[list[int]], IndexTracker | None]:
    """The parent-side chain over `units`: its outputs, flat maps' pending counters, tracker.

    The tracker is None unless the tail holds record operations.
    """
    counters: list[list[int]] = []
    tracker = IndexTracker(units, counters) if plan.tracks_indices else None
    items: Iterator[Any] = units if tracker is None else tracker
    for op in plan.tail:
        if isinstance(op, BatchStep):
            items = _batched(items, op)
        elif isinstance(op, FlatMapStep):
            counters.append([0])
            items = _flat_mapped(items, op, counters[-1])
        elif isinstance(op, RecordsStep):
            assert tracker is not None
            items = tracker.watch(op.outputs(items))
        else:
            items = _elementwise(items, op)
    return items, counters, tracker
