"""The stage contract: every hook a module reads off a stage or an iterator, in one place.

A pipeline is datasets (stages) and the iterators they make. Beyond the methods
every dataset and iterator has (``__len__``/``__getitem__``/``_getitem``/
``_getitems`` of a MapDataset, ``__iter__`` of an IterDataset, ``__next__``/
``get_state``/``set_state`` of an iterator, all in grain_dataset._core._base), other
modules ask a stage a few questions: which positions it keeps, what its
checkpoint fingerprint is, whether a worker may fork it, how to stop it from
another thread. Each question is a trait below, with its default; a stage
answers by overriding the trait in its class body. Nothing else is looked up
by name: a module that needs to know something about a stage reads a trait
declared here, and a new question means a new trait here.

    StageTraits         every MapDataset and IterDataset (fingerprint, workers)
      MapTraits         every MapDataset (filtered positions, index mapping, gather)
      IterStageTraits   the built-in IterDataset stages (position-wise work)
    IteratorTraits      every DatasetIterator, and any iterator the guard wraps
                        (interrupt, statistics, checkpoint files, closed wording)

Sources are not stages: what a pipeline asks a user's source is declared on
the source's class and read by grain_sources (``batched_reads = True``: it may
be read with ``__getitems__``) or grain_mp (``_grain_fork_unsafe = True``: its
reader does not survive fork, as grain_sources.ArrayRecordDataSource declares).

The bases inherit these classes (`_Dataset`, `MapDataset`, `IterStage`,
`DatasetIterator`), so a stage written on them has every trait with its
default. tests/test_stage_contract.py enumerates every stage class of the workspace
and checks the declarations against the rules written here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

PositionKind = Literal["map", "filter", "indexed", "same"]
"""How a stage's output at a position depends on that position alone (`IterStageTraits`)."""


class StageTraits:
    """The traits of every dataset, MapDataset and IterDataset alike."""

    _parents: tuple[Any, ...]

    # -- the checkpoint fingerprint (grain_dataset._runtime._fingerprint) ----------------------

    def _fingerprint_token(self) -> str | None:
        """This stage's part of a state's pipeline fingerprint.

        The name and the parameters that decide which element a position
        denotes; None for a stage that changes elements but not positions. The
        default, the class name, suits a stage whose parameters do not move
        positions (a parentless MapDataset adds its length, see MapDataset).
        """
        return type(self).__name__

    def _fingerprint_parents(self) -> Sequence[Any]:
        """The parents whose fingerprints are part of this stage's (all of them by default)."""
        return self._parents

    _order_as_grain: ClassVar[bool] = True
    """Its elements come in Grain's order for the same arguments and seed. False for a
    shuffle, a random map, a mixture, packing...: a bare state file of Google's Grain
    then means another element, and restoring one is refused
    (grain_dataset._runtime._state_file)."""

    # -- worker processes (grain_mp) -------------------------------------------------

    _starts_worker_processes: ClassVar[bool] = False
    """The stage starts worker processes (mp_prefetch): none may sit under another."""


class MapTraits(StageTraits):
    """The traits of every MapDataset."""

    discards_elements: ClassVar[str | None] = None
    """How errors name this stage if it can leave a position empty (None at an index):
    a filter, a flat map's padding. None: every position holds an element. A batch
    refuses to follow such a stage, and workers count its positions as dropped."""

    _batched: bool = False
    """The stage reads a user's source with ``__getitems__`` (see reads_in_batches);
    read-ahead then reads whole chunks in one call."""

    # -- index mapping (grain_dataset._core._stage, grain_dataset._map_stages._gather) --

    _maps_indices: ClassVar[bool] = False
    """Element i is element `_parent_indices(i)` of the one parent: a shuffle, a slice,
    a repeat. A batched read or a gather then goes through the stage in one call."""

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        """The parent's indices of `indices` (with `_maps_indices`); None where they do
        not fit int64, and the stage reads element by element instead."""
        return None

    def _gatherable(self) -> bool:
        """Whether `_gather` reads many records already stacked (`_map_stages._gather`)."""
        return False

    def _gather(self, indices: np.ndarray) -> Any:
        """The records at `indices` stacked along a new first axis, or NotImplemented."""
        return NotImplemented


class IterStageTraits(StageTraits):
    """The traits of the built-in IterDataset stages (grain_dataset._core._iter_stage).

    mp_prefetch cuts a pipeline into the stages its workers run position by
    position and those that run on the merged stream (grain_dataset._iter_stages._positional),
    so that the output does not depend on the number of workers. It walks down
    from the top through stages with `_positional_chain`; each answers with
    `_position_kind` and `_at_position`.
    """

    _many_parents: ClassVar[bool] = False
    """``iter()`` builds the iterator with the list of all parents' iterators."""

    _positional_chain: ClassVar[bool] = False
    """The positional split may walk through this stage: one parent, a state the plain
    pipeline shares. Not inherited: a subclass that may change `__next__` runs the
    plain pipeline unless it declares the trait again in its own class body."""

    _position_kind: ClassVar[PositionKind | None] = None
    """"map": ``_at_position(p, x)`` is the element; "filter": it says whether x stays;
    "indexed": a map that counts elements; "same": x unchanged. None: the stage
    combines or holds elements, and runs on the merged stream."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._positional_chain = bool(cls.__dict__.get("_positional_chain", False))

    def _at_position(self, position: int, value: Any) -> Any:
        """This stage's work on the element `value` at `position` (see `_position_kind`)."""
        raise NotImplementedError(f"{type(self).__name__} declares no position-wise work.")


class IteratorTraits:
    """The traits of every DatasetIterator, and of any iterator the guard serializes
    (the DataLoader's, grain_mp)."""

    # -- closing from another thread (grain_dataset._runtime._guard) --------------------------

    def _interrupt(self) -> Iterable[Any] | None:
        """Stops this iterator's threads or workers while another thread waits in it.

        Runs in any thread, beside the iterator's own methods: it only sets flags,
        signals processes and wakes waits. Returns iterators to interrupt besides
        the parents (one a thread of the stage runs). The default does nothing.
        """
        return None

    _MADE_BY: ClassVar[str] = "iter(dataset)"
    """How a user makes a new one, as the error of next() on a closed one says."""

    _closed_wording: ClassVar[str | None] = None
    """Grain's first sentence of that error where Grain words it its own way (None:
    "Trying to advance a closed iterator: ..."); clients match it."""

    # -- statistics (grain_dataset._core._stats) -------------------------------------------

    _STATS_HIDDEN: bool = False
    """A pass-through a stage builds inside itself: timed, not listed. An instance may
    set it on a parent it wraps."""

    _STATS_ASYNC: ClassVar[bool] = False
    """The stage waits on a thread or process: its parents' time is not inside its calls."""

    _STATS_READERS_UNTRACKED: ClassVar[bool] = False
    """Its readers run where statistics cannot follow (worker processes)."""

    _STATS_SELF_COUNTED: ClassVar[bool] = False
    """The stage counts its elements and time itself (`_stats_counts`): it reads in
    chunks, and a per-call timer would time the consumer."""

    def _stats_counts(self) -> tuple[int, float]:
        """(elements, seconds) so far, for a stage with `_STATS_SELF_COUNTED`."""
        return 0, 0.0

    def _stats_reader_times(self) -> tuple[float, float] | None:
        """(seconds waited on readers, readers' CPU seconds), for a stage with readers."""
        return None

    # -- reading ahead (grain_dataset._threads._thread_prefetch) --------------------------------

    _reads_ahead: ClassVar[bool] = False
    """A thread prefetch over this iterator calls `_read_ahead_step` while its buffer is
    full, instead of sleeping."""

    def _read_ahead_step(self) -> bool:
        """One step of background work; False when there is none left. Never raises: it
        keeps an error for its own ``__next__``."""
        return False

    # -- checkpoint files (grain_dataset._runtime._state_file) ---------------------------------

    _restores_from_all_shards: ClassVar[bool] = False
    """Missing its own state file, it is given the list of every old process's state
    (ElasticIterator resumes on another number of processes)."""


TRAITS: dict[type, tuple[str, ...]] = {
    StageTraits: (
        "_fingerprint_token",
        "_fingerprint_parents",
        "_order_as_grain",
        "_starts_worker_processes",
    ),
    MapTraits: (
        "discards_elements",
        "_batched",
        "_maps_indices",
        "_parent_indices",
        "_gatherable",
        "_gather",
    ),
    IterStageTraits: ("_many_parents", "_positional_chain", "_position_kind", "_at_position"),
    IteratorTraits: (
        "_interrupt",
        "_MADE_BY",
        "_closed_wording",
        "_STATS_HIDDEN",
        "_STATS_ASYNC",
        "_STATS_READERS_UNTRACKED",
        "_STATS_SELF_COUNTED",
        "_stats_counts",
        "_stats_reader_times",
        "_reads_ahead",
        "_read_ahead_step",
        "_restores_from_all_shards",
    ),
}
"""Each traits class and the traits it declares (the enumeration test reads it)."""
