"""`ElasticIterator`: one shard's batches, resumable on another shard count or batch size.

See ELASTIC.md beside this module for the guarantee, the state and the limits;
the index math is `grain_mp._elastic_plan`.

How a shard reads. Its positions (`Plan.shard_positions`) become a MapDataset
made of public slices of the user's dataset: ``concatenate([ds.slice(owed),
ds[first_fresh::M]])[taken:]``. Read in this process it is
``to_iter_dataset(read_options)``, whose state counts positions, filtered ones
too. With worker processes it is that read under `mp_prefetch`, whose output
and state over such a pipeline do not depend on the number of workers (see
`grain_mp._mp_positional`): the same positions, counted the same way. Then
``batch(b, drop_remainder=True)``, the plain pipeline's own stage; after each
batch, `taken` is read from the state of the stage under it.

Packing (`packing`): the packer runs here, on the elements in position order,
with `num_packing_bins` equal to the per-shard batch size, so that one step is
one whole group of the packer (it flushes all its bins at once). At a step's
end the packer holds only the element that did not fit, and its state says at
which position that element is: that is `taken`. Nothing delivered is owed
again and nothing read but undelivered is lost.

Token-budget batching (`batching`): a TokenBudgetBatchIterDataset in stream
order is the whole step, with no `batch` after it, and its token budget is
``global_batch_size // shard_count``. After each batch it holds at most the
element that did not fit, and its state's "parent" is the state before that
element (at the end: after the last one): that is `taken`. Bucketing is
refused, since a full bucket leaves earlier positions of its window behind.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grain_dataset import (
    DatasetIterator,
    IterDataset,
    MapDataset,
    ReadOptions,
    UnverifiedStateWarning,
)
from grain_dataset.extension import drops_positions, pipeline_fingerprint, remember_dataset
from grain_dataset.stages import TokenBudgetBatchIterDataset
from grain_index import ShardOptions, decode_runs, encode_runs
from grain_mp._elastic_plan import Plan, replan
from grain_mp._mp_prefetch import mp_prefetch
from grain_mp._options import MultiprocessingOptions

_FORMAT = "elastic_format"
_VERSION = 1
_FINGERPRINT = "grain_fingerprint"
_KEYS = {_FORMAT, "shard_index", "shard_count", "frontier", "leftovers", "taken", "one_to_one"}
# The state all shards of a one-to-one run share (Grain's key, and owed positions if any).
_NEXT = "global_next_index"
_SHARED_KEYS = {_NEXT, "leftovers"}


class ElasticIterator(DatasetIterator[Any]):
    """Iterates one shard's batches of `ds`; its state restores on another shard count.

    The input is an unbatched, unsharded MapDataset; the iterator shards and
    batches it itself. Each shard yields ``global_batch_size // shard_count``
    elements per step (drop remainder: the last, partial batch of the dataset
    is dropped). Positions are dealt round robin to the shards, so the shards
    together read `ds` in order, without overlap.

    Restoring, the guarantee (see docs/elastic.md):

    * For one-to-one pipelines (no `filter`), every shard has the same state
      after the same number of steps, and any one shard's state restores all
      shards of a run with another `shard_count` or `global_batch_size`.
    * For pipelines that drop elements (`filter`, also inside `MapDataset.mix`
      components), `set_state` also takes the list of all old shards' states
      (the Orbax handler passes them when the process count changed): the new
      shards deliver every element the old run had not delivered, exactly once
      between them, and nothing it had.
    * The output of a shard does not depend on `multiprocessing_options`'
      number of workers, and a state taken with W workers restores with V.
    * Beyond Grain, `packing` packs each shard's elements (filtered or not)
      with the same guarantee: a callable given the shard's IterDataset of
      elements and ``num_packing_bins=global_batch_size // shard_count``,
      returning a packing stage over it, e.g. ``functools.partial(
      grain.experimental.FirstFitPackIterDataset, length_struct={"tokens":
      128})``. Each step is then one group of packed rows.
    * Beyond Grain, `batching` makes each step one batch filled to a token
      budget, with the same guarantee: a callable given the shard's
      IterDataset of elements and ``token_budget=global_batch_size //
      shard_count``, returning a `grain.experimental.TokenBudgetBatchIterDataset`
      over it in stream order (no ``bucket_window``), e.g.
      ``functools.partial(grain.experimental.TokenBudgetBatchIterDataset,
      padded_lengths=[64, 128, 256])``. `global_batch_size` is then the
      global token budget of a step, and the number of elements in a step
      varies.

    The state is a small JSON dict: a few integers plus about three per shard
    of the run before the last resize, and the pipeline's fingerprint, so that a
    checkpoint of another pipeline is refused.

    Example::

        it = ElasticIterator(ds, 32, grain.sharding.ShardOptions(0, 4))
        batch = next(it)  # 8 elements
        states = [...]    # the states of all 4 shards at the same step
        it2 = ElasticIterator(ds, 32, grain.sharding.ShardOptions(0, 2))
        it2.set_state(states)  # continues where the 4 shards stopped
    """

    # The Orbax handler and `load` pass the states of all old processes when this
    # process's own file is missing (another process count): see grain_dataset.extension.
    _restores_from_all_shards = True

    def __init__(
        self,
        ds: MapDataset[Any],
        global_batch_size: int,
        shard_options: ShardOptions,
        *,
        read_options: ReadOptions = ReadOptions(),  # noqa: B008 - immutable, Grain's default
        multiprocessing_options: MultiprocessingOptions | None = None,
        packing: Callable[..., IterDataset[Any]] | None = None,
        batching: Callable[..., IterDataset[Any]] | None = None,
    ):
        super().__init__()
        _check_arguments(
            ds, global_batch_size, shard_options, read_options, multiprocessing_options
        )
        self._ds = ds
        self._global_batch_size = global_batch_size
        self._shard_index = shard_options.shard_index
        self._shard_count = shard_options.shard_count
        self._batch_size = global_batch_size // shard_options.shard_count
        self._read_options = read_options
        self._mp_options = multiprocessing_options
        if packing is not None and not callable(packing):
            raise TypeError(f"`packing` must be callable or None, got {packing!r}.")
        self._packing = packing
        if batching is not None:
            if not callable(batching):
                raise TypeError(f"`batching` must be callable or None, got {batching!r}.")
            if packing is not None:
                raise ValueError(
                    "ElasticIterator takes `packing` or `batching`, not both: a step is one "
                    "group of packed rows or one token-budget batch. Pack first in a map of "
                    "your own, or drop one of them."
                )
        self._batching = batching
        self._one_to_one = packing is None and batching is None and not drops_positions(ds)
        self._plan = Plan(frontier=0, leftovers=np.zeros(0, dtype=np.int64))
        self._taken = 0  # entries of this shard's sequence behind the last delivered batch
        self._inner: DatasetIterator[Any] | None = None
        self._base = 0  # `_taken` when `_inner` was built
        self._view_length = 0  # positions left to this shard when `_inner` was built
        # The stage under the batch: its state says how many positions the batches took.
        self._counter: DatasetIterator[Any] | None = None
        # One-to-one states keep Grain's shape ({"global_next_index": g}): the fingerprint
        # travels in checkpoint files (iterator.save, the Orbax handler), as for iter(dataset).
        # Per-shard states are ours alone and carry it in the dict.
        remember_dataset(self, ds, stamp=not self._one_to_one)
        if batching is not None:
            # Building the stage reads nothing: a bad `batching` fails here, not mid-run.
            self._batched(ds.to_iter_dataset(read_options))

    # -- reading ------------------------------------------------------------------------

    def _view(self) -> MapDataset[Any]:
        owed, first_fresh = self._plan.shard_positions(self._shard_index, self._shard_count)
        fresh = self._ds[first_fresh :: self._shard_count]
        parts = [self._ds.slice(owed), fresh] if len(owed) else [fresh]
        whole = MapDataset.concatenate(parts) if len(parts) > 1 else fresh
        return whole[self._taken :]

    def _build(self) -> DatasetIterator[Any]:
        view = self._view()
        self._view_length = len(view)
        self._base = self._taken
        workers = self._mp_options.num_workers if self._mp_options is not None else 0
        elements: IterDataset[Any] = view.to_iter_dataset(self._read_options)
        if workers:
            # Positional: the same elements and state ({"next_index": positions}) as without.
            elements = mp_prefetch(elements, self._mp_options)
        if self._batching is not None:
            # One step is one token-budget batch: the stage is the whole step.
            self._counter = iter(self._batched(elements))
            return self._counter
        if self._packing is not None:
            elements = self._packed(elements)
        batches: DatasetIterator[Any] = iter(elements.batch(self._batch_size, drop_remainder=True))
        self._counter = batches.parents[0]
        return batches

    def _packed(self, elements: IterDataset[Any]) -> IterDataset[Any]:
        assert self._packing is not None
        packed = self._packing(elements, num_packing_bins=self._batch_size)
        if not isinstance(packed, IterDataset) or list(packed.parents) != [elements]:
            raise TypeError(
                "`packing` must return a packing IterDataset over the dataset it is given "
                "(e.g. functools.partial(grain.experimental.FirstFitPackIterDataset, "
                f"length_struct=...)), got {packed!r}."
            )
        return packed

    def _batched(self, elements: IterDataset[Any]) -> TokenBudgetBatchIterDataset:
        assert self._batching is not None
        budget = self._batch_size
        if isinstance(self._batching, functools.partial) and "token_budget" in (
            self._batching.keywords
        ):
            raise ValueError(
                "`batching` fixes token_budget, which ElasticIterator sets itself (to "
                "global_batch_size // shard_count, so that the global budget survives a "
                "resize): leave token_budget out of the partial and pass the global token "
                "budget as global_batch_size."
            )
        try:
            batched = self._batching(elements, token_budget=budget)
        except ValueError as error:
            raise ValueError(
                f"`batching` failed with the token budget ElasticIterator gives each shard, "
                f"global_batch_size // shard_count = {self._global_batch_size} // "
                f"{self._shard_count} = {budget}: {error} Raise global_batch_size or give "
                "padded_lengths and batch_sizes that fit this budget."
            ) from error
        if not isinstance(batched, TokenBudgetBatchIterDataset) or list(batched.parents) != [
            elements
        ]:
            raise TypeError(
                "`batching` must return a grain.experimental.TokenBudgetBatchIterDataset over "
                "the dataset it is given, with no stage after it (e.g. functools.partial("
                "grain.experimental.TokenBudgetBatchIterDataset, padded_lengths=[...])), got "
                f"{batched!r}."
            )
        if batched.bucket_window is not None:
            raise ValueError(
                f"ElasticIterator's `batching` needs stream order, got bucket_window="
                f"{batched.bucket_window}: with bucketing a full bucket is emitted while "
                "earlier elements of its window wait, so the delivered elements are not the "
                "first positions of the shard and a checkpoint could not say which are owed. "
                "Drop bucket_window (for less padding, give padded_lengths closer together)."
            )
        if batched.token_budget != budget:
            raise ValueError(
                f"`batching` returned a stage with token_budget={batched.token_budget}, but "
                f"ElasticIterator gives each shard {budget} (global_batch_size // "
                "shard_count): pass on the token_budget it is given, and set the budget "
                "through global_batch_size."
            )
        return batched

    def _position(self) -> int:
        """Entries of this shard's sequence behind the last batch delivered, from `_counter`."""
        assert self._counter is not None
        state = self._counter.get_state()
        if self._batching is not None:
            # Stream order: the stage holds at most the element that did not fit, and
            # "parent" is the state before it (at the end, after the last element).
            if state["emitted"] or state["consumed"] > 1:
                raise AssertionError(f"token-budget state out of stream order: {state!r}")
            return self._base + state["parent"]["next_index"]
        if self._packing is None:
            return self._base + state["next_index"]
        # A step is one whole group of the packer (num_packing_bins rows): at its end the
        # packer holds only the element that did not fit, and its state says where that was.
        if not (isinstance(state, dict) and {"parent", "emitted"} <= set(state)):
            raise TypeError(
                "`packing` must return a grain.experimental.FirstFitPackIterDataset or "
                "BestFitPackIterDataset, whose state says where a group starts; got state "
                f"{state!r}."
            )
        if state["emitted"] == self._batch_size:
            # The last group, flushed by the end of the elements: all were delivered, and
            # the stage under the packer has read every position.
            read = self._counter.parents[0].get_state()["next_index"]
            if read == self._view_length:
                return self._base + read
        if state["emitted"]:
            raise ValueError(
                "the packing stage emitted a group of another size than the batch: `packing` "
                "must use the num_packing_bins it is given (the per-shard batch size), so that "
                "a step is one whole group."
            )
        return self._base + state["parent"]["next_index"]

    def __next__(self) -> Any:
        if self._inner is None:
            self._inner = self._build()
        batch = next(self._inner)  # StopIteration: the last, partial batch is dropped
        taken = self._position()
        if self._one_to_one and taken - self._taken > self._batch_size:
            self._one_to_one = False  # a stage of the user's own dropped an element
            remember_dataset(self, self._ds, stamp=True)  # its states are per-shard now
        self._taken = taken
        return batch

    # -- state --------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The position: one dict for all shards of a one-to-one pipeline, else this shard's.

        One-to-one (every shard has read the same number of entries): Grain's
        ``{"global_next_index": g}``, the first global position no shard has read,
        with ``"leftovers"`` (runs of positions still owed from before a resize,
        read first) while any remain. It names no shard: every shard returns the
        same dict after the same steps, and any shard restores from it. Otherwise
        this shard's place in the run (see ELASTIC.md).
        """
        if self._one_to_one:
            return self._shared_state()
        return {
            _FORMAT: _VERSION,
            "shard_index": self._shard_index,
            "shard_count": self._shard_count,
            "frontier": self._plan.frontier,
            "leftovers": self._plan.runs(),
            "taken": self._taken,
            "one_to_one": self._one_to_one,
        }

    def _shared_state(self) -> dict[str, Any]:
        # Every shard took `taken` entries: the sequence's first shard_count * taken are read.
        owed = self._plan.leftovers
        read = self._shard_count * self._taken
        if read >= len(owed):
            return {_NEXT: self._plan.frontier + read - len(owed)}
        return {_NEXT: self._plan.frontier, "leftovers": encode_runs(owed[read:])}

    def set_state(self, state: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Restores a state of this shard, of any one shard (one-to-one), or of all old shards.

        Args:
          state: what `get_state` returned, on any shard of a run with any shard
            count and global batch size; for pipelines that drop elements with
            another shard count, the list of all old shards' states (in any
            order).
        """
        if isinstance(state, dict):
            states = [_checked(state)]
        elif isinstance(state, list | tuple) and state:
            states = [_checked(self._verified(one)) for one in state]
        else:
            states = []
        shared = [one for one in states if _NEXT in one]
        if shared:
            self._restore_shared(shared, len(states))
            return
        if not states:
            raise TypeError(
                "ElasticIterator.set_state takes a state from get_state() (a dict) or the list "
                f"of all old shards' states, got {type(state).__name__}"
                + (" (empty)" if isinstance(state, list | tuple) else "")
                + "."
            )
        plan, taken = self._restored(states)
        self._close_inner()
        self._plan, self._taken = plan, taken

    def _restore_shared(self, shared: list[dict[str, Any]], count: int) -> None:
        """Restores from one-to-one states: one, or all old shards' (the list's length)."""
        if len(shared) < count:
            raise ValueError(
                "the states given to ElasticIterator.set_state mix the state all shards of a "
                "one-to-one run share ('global_next_index') with single shards' states: pass "
                "the states that all shards of one run returned at the same checkpoint."
            )
        old_count = len(shared)
        owed = [decode_runs(state.get("leftovers", [])) for state in shared]
        nexts = [state[_NEXT] for state in shared]
        # The slowest shard owes the most and, past the leftovers, stands lowest: its state
        # is the plan, and each shard read `read[s]` entries of that plan's sequence more.
        slowest = min(range(old_count), key=lambda s: (-len(owed[s]), nexts[s]))
        plan = Plan(frontier=nexts[slowest], leftovers=owed[slowest])
        read = [
            len(plan.leftovers) - len(owed[s]) + nexts[s] - plan.frontier for s in range(old_count)
        ]
        fits = all(
            r >= 0
            and r % old_count == 0
            and np.array_equal(owed[s], plan.leftovers[len(plan.leftovers) - len(owed[s]) :])
            and (not len(owed[s]) or nexts[s] == plan.frontier)
            for s, r in enumerate(read)
        )
        if not fits:
            raise ValueError(
                "the states given to ElasticIterator.set_state are not of one run of "
                f"{old_count} one-to-one shards ({shared!r:.300}): pass the states of one "
                "checkpoint (any one of them suffices when all shards took the same steps)."
            )
        if any(read):
            # Shards stop apart only at the end of the data, where a shard with a higher
            # index has fewer entries: the more a shard read, the lower its index.
            taken = sorted((r // old_count for r in read), reverse=True)
            plan = replan(plan, taken)
        self._close_inner()
        self._plan, self._taken = plan, 0

    def _verified(self, state: Any) -> Any:
        """`state` without its fingerprint, which must be this pipeline's (lists skip the guard)."""
        if not isinstance(state, dict):
            raise TypeError(f"each old shard's state must be a dict, got {type(state).__name__}.")
        if _FINGERPRINT not in state:
            if _FORMAT in state:
                warnings.warn(
                    "restored a state without a pipeline fingerprint into ElasticIterator: "
                    "nothing checked that it comes from this pipeline. Save a new checkpoint "
                    "to get one.",
                    UnverifiedStateWarning,
                    stacklevel=4,
                )
            # A dict of Grain's shape (a one-to-one state) is checked by its shape, as in
            # Grain; a state file carries the fingerprint beside it and is checked on load.
            return state
        saved = state[_FINGERPRINT]
        current = pipeline_fingerprint(self._ds)
        if saved != current:
            raise ValueError(
                "this state was saved from a different pipeline: its fingerprint is "
                f"{saved!r}, this pipeline's is {current!r}. Its positions would denote other "
                "elements here; restore it into the pipeline it was saved from."
            )
        return {key: value for key, value in state.items() if key != _FINGERPRINT}

    def _restored(self, states: list[dict[str, Any]]) -> tuple[Plan, int]:
        first = states[0]
        old_count = first["shard_count"]
        plan = Plan(frontier=first["frontier"], leftovers=decode_runs(first["leftovers"]))
        for state in states[1:]:
            if (state["shard_count"], state["frontier"], state["leftovers"]) != (
                old_count,
                first["frontier"],
                first["leftovers"],
            ):
                raise ValueError(
                    "the states given to ElasticIterator.set_state come from different runs "
                    "(shard counts or positions differ): pass the states that all shards of one "
                    "run returned at the same checkpoint."
                )
        by_index = {state["shard_index"]: state for state in states}
        if len(states) > 1 and (len(by_index) != len(states) or len(states) != old_count):
            raise ValueError(
                f"the states given to ElasticIterator.set_state are shards "
                f"{sorted(state['shard_index'] for state in states)} of a run of {old_count} "
                f"shards: pass each of its {old_count} shards' states once."
            )
        own = by_index.get(self._shard_index)
        if old_count == self._shard_count and own is not None:
            return plan, own["taken"]  # the same shard goes on, exactly as it would have
        if len(states) == old_count:
            taken = [by_index[index]["taken"] for index in range(old_count)]
        elif first["one_to_one"] and self._one_to_one:
            # One-to-one: every shard took the same number of entries as this one.
            taken = [first["taken"]] * old_count
        else:
            raise ValueError(
                f"this state is one shard's of a run of {old_count} shards whose pipeline drops "
                "elements (a filter): its shards read different numbers of positions, so one "
                f"shard's state cannot tell where the others stopped. Restoring on "
                f"{self._shard_count} shards needs the states of all {old_count} old shards: "
                "pass their list to set_state (the Orbax handler does so when the process "
                "count changed)."
            )
        return replan(plan, taken), 0

    # -- life cycle ---------------------------------------------------------------------

    def _close_inner(self) -> None:
        if self._inner is not None:
            self._inner.close()
        self._inner = None
        self._counter = None

    def close(self) -> None:
        self._close_inner()

    def __repr__(self) -> str:
        return (
            f"ElasticIterator(shard {self._shard_index} of {self._shard_count}, "
            f"batch {self._batch_size} of {self._global_batch_size}, taken={self._taken})"
        )


def _checked(state: Any) -> dict[str, Any]:
    """`state` if it has an ElasticIterator state's shape, else a ValueError saying what is off."""
    if not isinstance(state, dict):
        raise TypeError(f"an ElasticIterator state is a dict, got {type(state).__name__}.")
    keys = set(state) - {_FINGERPRINT}
    if _NEXT in keys:
        return _checked_shared(state, keys)
    if keys != _KEYS or state.get(_FORMAT) != _VERSION:
        raise ValueError(
            f"not an ElasticIterator state (format {_VERSION}): its keys are {sorted(keys)}, "
            f"expected {sorted(_KEYS)}. Restore a state that ElasticIterator.get_state() "
            "returned."
        )
    for key in ("shard_index", "shard_count", "frontier", "taken"):
        _check_count(state, key)
    if not state["shard_index"] < state["shard_count"]:
        raise ValueError(
            f"state['shard_index'] {state['shard_index']} is not below state['shard_count'] "
            f"{state['shard_count']}: the state is corrupt."
        )
    _check_runs(state["leftovers"])
    return state


def _checked_shared(state: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    if not keys <= _SHARED_KEYS:
        raise ValueError(
            f"not an ElasticIterator state: its keys are {sorted(keys)}; a one-to-one run's "
            f"state has {_NEXT!r} and, while positions are owed, 'leftovers'. Restore a state "
            "that ElasticIterator.get_state() returned."
        )
    _check_count(state, _NEXT)
    _check_runs(state.get("leftovers", []))
    return state


def _check_count(state: dict[str, Any], key: str) -> None:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"state[{key!r}] must be an int >= 0, got {value!r}.")


def _check_runs(runs: Any) -> None:
    if not isinstance(runs, list) or any(
        not isinstance(run, list)
        or len(run) != 3
        or any(isinstance(v, bool) or not isinstance(v, int) for v in run)
        or run[2] < 1
        for run in runs
    ):
        raise ValueError(
            "state['leftovers'] must be a list of [start, step, count] runs of ints with "
            f"count >= 1, got {runs!r}: the state is corrupt."
        )


def _check_arguments(
    ds: Any,
    global_batch_size: Any,
    shard_options: Any,
    read_options: Any,
    mp_options: Any,
) -> None:
    if not isinstance(ds, MapDataset):
        raise TypeError(
            "ElasticIterator takes an unbatched, unsharded grain.MapDataset (it shards and "
            f"batches it itself), got {type(ds).__name__}. Pass the MapDataset before "
            "to_iter_dataset(), without batch or sharding."
        )
    if (
        isinstance(global_batch_size, bool)
        or not isinstance(global_batch_size, int)
        or global_batch_size < 1
    ):
        # Grain's wording for a size < 1, which clients match.
        grain = "batch_size must be positive. " if isinstance(global_batch_size, int) else ""
        raise ValueError(
            f"{grain}`global_batch_size` must be an int >= 1, got {global_batch_size!r}."
        )
    if not isinstance(shard_options, ShardOptions):
        raise TypeError(
            "`shard_options` must be a grain.sharding.ShardOptions (e.g. ShardByJaxProcess()), "
            f"got {type(shard_options).__name__}."
        )
    if global_batch_size % shard_options.shard_count:
        raise ValueError(
            f"`global_batch_size` {global_batch_size} is not divisible by the shard count "
            f"{shard_options.shard_count}: each shard yields global_batch_size // shard_count "
            "elements per step. Choose a global batch size that is a multiple of the shard count."
        )
    if not isinstance(read_options, ReadOptions):
        raise TypeError(f"`read_options` must be a grain.ReadOptions, got {read_options!r}.")
    if mp_options is not None and not isinstance(mp_options, MultiprocessingOptions):
        raise TypeError(
            "`multiprocessing_options` must be a grain.MultiprocessingOptions or None, got "
            f"{mp_options!r}."
        )
