"""mp_prefetch over a positional pipeline: the single-process output for any worker count.

`grain_dataset.extension.positional_split` cuts the pipeline under
mp_prefetch into *units* (what its position-wise prefix makes of each
position, or of each block of a batch's size; None for a dropped position)
and a *tail* (the stages that combine or hold elements). The workers compute
the units: `LoaderPositionsIterDataset`, the DataLoader's reader, runs
``units.to_iter_dataset(read_options, allow_nones=True)`` in them, worker w
of n reading units w, w+n, ..., and its round robin returns them in order,
the dropped ones skipped; its state counts units and translates to any worker
count. The in-order stage and the tail run here, on that stream.

State: the plain pipeline's (`num_workers=0`), since the in-order stage hands
out the state the position-wise prefix would have. So a state restores with
any worker count, and into the same pipeline without mp_prefetch.

States of the per-worker format, ``{"next_worker": k, "parents": [...]}``
(mp_prefetch before it knew positional pipelines, or multithread_prefetch):
restoring one switches the iterator to that format's per-worker execution
(each worker runs the whole pipeline on its slice), so the run continues
exactly as the one that saved it; a later state of the positional format
switches it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grain_dataset import DatasetIterator, IterDataset
from grain_mp._loader_positions import LoaderPositionsIterDataset


class MultiprocessPrefetchIterator(DatasetIterator[Any]):
    """The iterator of mp_prefetch over a positional pipeline (see the module doc).

    `in_order` is the in-order pipeline (units from the workers, then the
    tail); `per_worker` makes an iterator of the per-worker execution, for
    states of its format.
    """

    # Statistics list the workers' reader inside it (see grain_dataset._core._stats).
    _STATS_HIDDEN = True

    def __init__(self, in_order: IterDataset[Any], per_worker: Callable[[], DatasetIterator[Any]]):
        super().__init__(iter(in_order))
        self._in_order: DatasetIterator[Any] = self._parents[0]
        if isinstance(in_order, LoaderPositionsIterDataset):
            # No in-order stage above it (nothing to undo): statistics list the workers'
            # reader under it, as they do when that stage hides it.
            self._in_order._STATS_HIDDEN = True
        self._per_worker = per_worker
        self._legacy: DatasetIterator[Any] | None = None  # after a per-worker state

    def __next__(self) -> Any:
        if self._legacy is not None:
            return next(self._legacy)
        return next(self._in_order)

    def get_state(self) -> dict[str, Any]:
        if self._legacy is not None:
            return self._legacy.get_state()
        return self._in_order.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "next_worker" in state:
            legacy = self._legacy if self._legacy is not None else self._per_worker()
            try:
                legacy.set_state(state)
            except Exception:
                if legacy is not self._legacy:
                    legacy.close()
                raise
            self._in_order.close()
            self._legacy = legacy
            return
        self._in_order.set_state(state)
        if self._legacy is not None:
            self._legacy.close()
            self._legacy = None

    def start_prefetch(self) -> None:
        (self._legacy or self._in_order).start_prefetch()

    def _interrupt(self) -> list[Any]:
        # The in-order pipeline is a parent, reached anyway; the per-worker one is not.
        return [self._legacy] if self._legacy is not None else []

    def close(self) -> None:
        if self._legacy is not None:
            self._legacy.close()
        self._in_order.close()

    def __repr__(self) -> str:
        mode = "per-worker" if self._legacy is not None else "in order"
        return f"MultiprocessPrefetchIterator({mode})"
