"""A record operation (any callable over an iterator of Records) as an IterDataset stage.

Grain's DataLoader accepts operations such as PackAndBatchOperation: a
callable that takes the iterator of `grain.python.Record` objects and yields
Records, holding whatever it likes in between. Its state cannot be asked for,
so the stage follows the contract Grain's resumption relies on too: a Record it
yields carries the `index` of the last input it used, and once it has yielded
its *last* Record with some index i, it holds nothing of the inputs up to
index i (it may hold later ones: the element a packer could not fit).

So the operation is fresh right after the last input with index i, once it has
gone past i (yielded a Record with a larger index, or ended). The stage
remembers its parent's state after each input it pulls, and confirms that
point when the next output shows it. Its state is

    {"parent": the parent's state at the last confirmed point,
     "replay": outputs since that point}

and restoring starts the operation afresh there and drops `replay` outputs
(normally one: the last output is confirmed only by the next). An operation
whose indices go down breaks the contract: the stage then stops confirming and
replays from the last confirmed point (exact, only slower to restore).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from grain_dataset import IterDataset
from grain_dataset.extension import IterStage, StageIterator, check_state, iterator_of
from grain_mp._operations import RecordsStep

# Input states remembered for the lookups; past this, old ones are forgotten
# (a lookup then fails, which only lengthens the replay).
_MAX_PULLED = 1 << 16


class RecordOperationIterDataset(IterStage):
    """The Records `step.operation` yields from the parent's Records (see the module doc)."""

    def __init__(self, parent: IterDataset[Any], step: RecordsStep):
        super().__init__(parent)
        self._step = step

    def _fingerprint_token(self) -> str | None:
        return "record_operation"

    def _describe(self) -> str:
        return self._step.__qualname__


@iterator_of(RecordOperationIterDataset)
class _RecordOperationIterator(StageIterator):
    def __init__(self, dataset: RecordOperationIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._restart(parent.get_state(), 0)

    def _restart(self, clean: Any, replay: int) -> None:
        """The operation starts afresh with the parent at `clean`; `replay` outputs to drop."""
        self._clean = clean
        self._since = 0  # outputs taken since the clean point
        self._drop = replay
        self._pulled: collections.deque[tuple[int, Any]] = collections.deque()
        self._last_input: int | None = None
        self._candidate: tuple[int, int] | None = None  # (index, _since) of the last output
        self._monotone = True
        self._ended = False
        self._outputs = self._dataset._step.outputs(self._inputs())

    def _inputs(self) -> Iterator[Any]:
        parent, pulled = self._parent, self._pulled
        for item in parent:
            index = item.metadata.index
            if self._last_input is not None and index < self._last_input:
                self._monotone = False
            self._last_input = index
            pulled.append((index, parent.get_state()))
            if len(pulled) > _MAX_PULLED:
                pulled.popleft()
            yield item

    def _confirm(self, index: int, outputs: int) -> None:
        """The operation is fresh after the last input with `index`, `outputs` outputs ago."""
        pulled = self._pulled
        found = None
        for position in range(len(pulled) - 1, -1, -1):
            if pulled[position][0] == index:
                found = position
                break
        if found is None:
            return  # forgotten (or never pulled): not a point we can resume at
        clean = pulled[found][1]
        for _ in range(found + 1):
            pulled.popleft()
        self._clean = clean
        self._since -= outputs

    def _take(self) -> Any:
        """The operation's next output, noting the points it confirms."""
        candidate = self._candidate
        try:
            output = next(self._outputs)
        except StopIteration:
            self._ended = True
            if candidate is not None and self._monotone:
                self._confirm(*candidate)
            self._candidate = None
            raise
        index = output.metadata.index
        if candidate is not None:
            if index < candidate[0]:
                self._monotone = False
            elif index > candidate[0] and self._monotone:
                self._confirm(*candidate)
        self._since += 1
        self._candidate = (index, self._since)
        return output

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        while self._drop:
            try:
                self._take()
            except StopIteration:
                raise ValueError(
                    f"the state of {self._dataset!r} says to replay {self._drop} more outputs "
                    "of the operation, but its data ends before: the state was saved by a "
                    "DataLoader with other operations or data."
                ) from None
            self._drop -= 1
        return self._take()

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._clean, "replay": self._since + self._drop}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("parent", "replay"))
        self._parent.set_state(state["parent"])
        self._restart(state["parent"], state["replay"])
