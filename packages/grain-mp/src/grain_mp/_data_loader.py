"""DataLoader: a sampler, a data source and operations, run in worker processes.

Model. The DataLoader is built on the Dataset API (see `_operations` for the
details):

    position k = 0, 1, ...   of the loader (steps of the sampler; with the
                             loader's own `shard_options`, every shard_count-th)
    -> SamplerSourceMapDataset   data_source[sampler[k].record_key], read in
                                 vectorized chunks (record_keys; __getitems__
                                 where the source declares batched_reads)
    -> worker-side operations    MapDataset stages, one unit per position
    -> to_iter_dataset(read_options, allow_nones=True)
    -> mp_prefetch(worker_count, worker_buffer_size)   when worker_count > 0
    -> parent-side operations    IterDataset stages, from the first batch after a
                                 filter, flat map or record operation

one Dataset pipeline (`grain_mp._loader_pipeline`), which the iterator runs.

Every position yields exactly one unit (None where filtered), and mp_prefetch's
round robin over the workers' slices ``w::n`` returns the units in position
order; so the output is *identical for every worker_count*, 0 included, with
filters and batches anywhere. The cost of that guarantee: a batch that follows a
filter is formed in the parent (the workers send lists of the surviving
elements of `batch_size` positions, one message per list), and so is everything
after it; pipelines whose batches come before any filter batch in the workers.

State. ``iterator.get_state()`` returns small JSON bytes (``set_state`` takes the
bytes, a str or the decoded dict), described in `grain_mp._loader_state`: Grain's
keys with Grain's meaning (`last_seen_indices` per worker, `last_worker_index`,
`worker_count`), from which the position is read back, and beside them the
pipeline iterator's state, its fingerprint and the loader's identity. It
restores with any worker_count: a checkpoint saved with 8 workers restores
with 0. A state written by Google's Grain restores where its order is ours.

Records. Position k reads ``data_source[record_key % len(data_source)]``, as
Grain's DataLoader does, so a sampler over more records than the source reads
it again from its start.

Attributes. As in Grain (Keras rebuilds loaders from them): `_data_source`,
`_sampler`, `_operations` (a list), `_shard_options` (the loader's, else the
sampler's, else NoSharding()), `_read_options` (default ``ReadOptions()``) and
`_multiprocessing_options`, also public as `multiprocessing_options`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Awaitable, Coroutine, Iterator
from typing import Any

import numpy as np

from grain_dataset import ReadOptions
from grain_dataset.extension import (
    INFINITE,
    IteratorTraits,
    WrongTypeError,
    add_lock,
    closed_error,
    load_coroutine,
    pipeline_fingerprint,
    remember_dataset,
    save_coroutine,
    serialized,
)
from grain_index import NoSharding, RecordMetadata, ShardOptions
from grain_mp._loader_pipeline import build_pipeline, build_units
from grain_mp._loader_state import (
    FINGERPRINT_KEY,
    Layout,
    SavedPosition,
    decode_state,
    describe_for_checkpoint,
    encode_state,
    grain_descriptions,
    loader_identity,
)
from grain_mp._operations import ElementStep, Plan, SamplerSourceMapDataset, plan_operations
from grain_mp._options import MultiprocessingOptions
from grain_mp._ray_options import RayWorkers

__all__ = [
    "DataLoader",
    "DataLoaderIterator",
    "PyGrainDatasetIterator",
    "describe_for_checkpoint",
    "resolve_worker_count",
    "sampler_length",
]

_LARGEST_PROBE = 1 << 62


def _has_step(sampler: Any, step: int) -> bool:
    try:
        sampler[step]
    except IndexError:
        return False
    return True


def sampler_length(sampler: Any) -> int:
    """The number of steps of `sampler`; `INFINITE` when it never ends.

    Uses `num_steps` (IndexSampler) or `len()`; a sampler with neither is
    probed: ``sampler[k]`` raising IndexError marks its end (O(log n) probes).
    """
    steps = getattr(sampler, "num_steps", False)
    if steps is None:
        return INFINITE
    if steps is not False:
        return int(steps)
    if hasattr(sampler, "__len__"):
        with contextlib.suppress(TypeError):
            return len(sampler)
    if not _has_step(sampler, 0):
        return 0
    known, high = 1, 2  # steps < known exist
    while _has_step(sampler, high - 1):
        known, high = high, high * 2
        if high > _LARGEST_PROBE:
            return INFINITE
    low, high = known, high - 1  # the length is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if _has_step(sampler, middle - 1):
            low = middle
        else:
            high = middle - 1
    return low


def _check_int(value: Any, name: str, low: int, fix: str, grain: str = "") -> int:
    """`grain`: Grain's wording for a negative value (clients match it), `{value}` filled."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an integer >= {low}, got {value!r}. {fix}")
    if value < low:
        opening = grain.format(value=value) + " " if grain and value < 0 else ""
        raise ValueError(f"{opening}`{name}` must be >= {low}, got {value}. {fix}")
    return int(value)


_WORKER_COUNT_FIX = "Use 0 to run everything in this process, None for one worker per CPU."


def resolve_worker_count(worker_count: int | None) -> int:
    """How many worker processes a DataLoader runs for `worker_count`.

    None means one per CPU (``os.cpu_count()``, at least 1); an int >= 0 is
    itself (0: everything in this process). Anything else raises.

    Example::

        resolve_worker_count(None)  # os.cpu_count(), e.g. 16
        resolve_worker_count(4)     # 4
    """
    if worker_count is None:
        return os.cpu_count() or 1
    return _check_int(
        worker_count,
        "worker_count",
        0,
        _WORKER_COUNT_FIX,
        "Worker count should be greater than or equal zero.Current worker_count is {value}.",
    )


def _same_sharding(a: ShardOptions, b: ShardOptions) -> bool:
    return (a.shard_index, a.shard_count, a.drop_remainder) == (
        b.shard_index,
        b.shard_count,
        b.drop_remainder,
    )


class DataLoader:
    """Reads `data_source` in the order of `sampler`, applies `operations`, in workers.

    Args:
      data_source: random access to the records (``__len__`` and ``__getitem__``;
        ``__getitems__`` only where the source's class declares ``batched_reads =
        True``), e.g. `grain.python.InMemoryDataSource`.
      sampler: says which record to read at each step, e.g. `grain.python.IndexSampler`.
      operations: a sequence of MapTransform, RandomMapTransform (its `rng` is the record's,
        from the sampler's seed), FilterTransform, MapWithIndexTransform (its
        index is the record's global `index`), FlatMapTransform and
        `grain.python.Batch` objects, applied in order to the records' data; and
        operations: Grain's MapOperation, RandomMapOperation, FilterOperation and
        BatchOperation, or any callable from an iterator of `grain.python.Record`
        to one (e.g. PackAndBatchOperation), run in this process (see
        `grain_mp._record_stage` for the contract that keeps the state exact).
      worker_count: worker processes; 0 runs the pipeline in this process; None
        picks one per CPU (``os.cpu_count()``). The output does not depend on it.
      worker_buffer_size: how many messages each worker may hold ready ahead of
        the consumer, >= 1: batches when the pipeline batches before any
        filter, lists of one batch's worth of positions when a batch follows a
        filter, else single elements.
      shard_options: shards the *sampler's steps* between loaders: this loader
        reads steps shard_index, shard_index + shard_count, ... . For samplers
        that do not shard themselves; None (the default) reads every step. The
        sampler's own shard options, passed again (as Keras does when it rebuilds
        a loader), do not shard a second time.
      read_options: threads and buffer of each process's reading
        (``to_iter_dataset``); default ``ReadOptions()``.
      enable_profiling: accepted for compatibility (MultiprocessingOptions).
      executor: where the `worker_count` workers run: None for processes on this
        machine, or ``grain.experimental.RayWorkers(...)`` for actors of a Ray
        cluster (``docs/ray_workers.md``). The batches and the checkpoints are
        the same either way: a checkpoint saved on actors restores on local
        workers and back. Not in Grain (keyword-only, ours).

    Example::

        loader = grain.DataLoader(
            data_source=grain.InMemoryDataSource(range(10)),
            sampler=grain.IndexSampler(10, grain.NoSharding(), shuffle=True, seed=0),
            operations=[Double(), grain.Batch(batch_size=4)],
            worker_count=2,
        )
        it = iter(loader)
        first = next(it)
        checkpoint = it.get_state()   # JSON bytes
        it.set_state(checkpoint)      # continues after `first`, with any worker_count
    """

    def __init__(
        self,
        *,
        data_source: Any,
        sampler: Any,
        operations: Any = (),
        worker_count: int | None = 0,
        worker_buffer_size: int = 1,
        shard_options: ShardOptions | None = None,
        read_options: ReadOptions | None = None,
        enable_profiling: bool = False,
        executor: RayWorkers | None = None,
    ):
        if not (hasattr(data_source, "__len__") and hasattr(data_source, "__getitem__")):
            raise TypeError(
                "`data_source` must support random access (`__len__` and `__getitem__`), "
                "like grain.python.InMemoryDataSource, ArrayRecordDataSource or a list; got "
                f"{type(data_source).__name__}."
            )
        if not hasattr(sampler, "__getitem__"):
            raise WrongTypeError(
                "`sampler` must give the RecordMetadata of step k as `sampler[k]`, like "
                f"grain.python.IndexSampler(...); got {type(sampler).__name__}."
            )
        if operations is None:
            operations = ()
        if isinstance(operations, str | bytes) or not hasattr(operations, "__iter__"):
            raise TypeError(
                "`operations` must be a sequence of transforms (a list, even for one: "
                f"operations=[transform]), got {type(operations).__name__}."
            )
        self._worker_count = resolve_worker_count(worker_count)
        self._worker_buffer_size = _check_int(
            worker_buffer_size,
            "worker_buffer_size",
            1,
            "It is how many outputs each worker may hold ready.",
            "Worker buffer size must be greater than or equal zero.Current worker_buffer_size "
            "is {value}.",
        )
        if shard_options is not None and not isinstance(shard_options, ShardOptions):
            raise TypeError(
                "`shard_options` must be a grain.python.ShardOptions (or NoSharding()) or "
                f"None, got {shard_options!r}."
            )
        if read_options is not None and not isinstance(read_options, ReadOptions):
            raise TypeError(
                f"`read_options` must be a grain.python.ReadOptions or None, got {read_options!r}."
            )
        if not isinstance(enable_profiling, bool):
            raise TypeError(f"`enable_profiling` must be a bool, got {enable_profiling!r}.")
        if executor is not None and not isinstance(executor, RayWorkers):
            raise TypeError(
                "`executor` must be None (workers on this machine) or a "
                f"grain.experimental.RayWorkers(...), got {executor!r}."
            )
        if executor is not None and self._worker_count == 0:
            raise ValueError(
                "`executor=RayWorkers(...)` runs the DataLoader's workers on Ray actors, but "
                "worker_count=0 runs the pipeline in this process: give worker_count the "
                "number of actors (>= 1)."
            )
        self._data_source = data_source
        self._sampler = sampler
        self._operations = list(operations)
        self._plan: Plan = plan_operations(self._operations)
        self._read_options = ReadOptions() if read_options is None else read_options
        self._multiprocessing_options = MultiprocessingOptions(
            num_workers=self._worker_count,
            per_worker_buffer_size=self._worker_buffer_size,
            enable_profiling=enable_profiling,
            executor=executor,
        )
        num_records = len(data_source)
        # The sharding this loader applies to the sampler's steps (None: every step),
        # and `_shard_options` as Grain shows it.
        loader_shard = self._loader_sharding(shard_options)
        self._loader_shard = loader_shard
        own = getattr(sampler, "_shard_options", None)
        if shard_options is not None:
            self._shard_options: ShardOptions = shard_options
        elif isinstance(own, ShardOptions):
            self._shard_options = own
        else:
            self._shard_options = NoSharding()
        shard_index, shard_count = 0, 1
        if loader_shard is not None:
            shard_index, shard_count = loader_shard.shard_index, loader_shard.shard_count
        total = sampler_length(sampler)
        if total >= INFINITE:
            self._length = INFINITE
        elif loader_shard is not None and loader_shard.drop_remainder:
            self._length = total // shard_count
        else:
            self._length = max(0, -(-(total - shard_index) // shard_count))
        if self._length and not isinstance(sampler[shard_index], RecordMetadata):
            raise WrongTypeError(
                "`sampler` must give the RecordMetadata of step k as `sampler[k]`, like "
                f"grain.python.IndexSampler(...); its step {shard_index} is "
                f"{type(sampler[shard_index]).__name__}."
            )
        if self._plan.needs_rng and self._length and sampler[shard_index].rng is None:
            raise ValueError(
                "`operations` hold a random map (RandomMapTransform or RandomMapOperation), "
                f"which draws from each record's `rng`, but {sampler!r} gives none: create "
                "the sampler with a seed, e.g. IndexSampler(..., seed=0)."
            )
        if self._length and not num_records:
            raise ValueError(
                f"`data_source` is empty but {sampler!r} has records to read: pass a source "
                "with records, or a sampler over none."
            )
        source = SamplerSourceMapDataset(
            sampler,
            data_source,
            length=self._length,
            shard_index=shard_index,
            shard_count=shard_count,
            metadata=self._plan.metadata,
            source_length=num_records,
        )
        self._pipeline = build_pipeline(
            self._plan,
            build_units(self._plan, source),
            self._read_options,
            self._multiprocessing_options,
        )
        self._identity = loader_identity(sampler, data_source, num_records, loader_shard)
        self._old_identity = loader_identity(
            sampler, data_source, num_records, loader_shard, grain_form=False
        )
        # Grain's keys count sampler indices: the loader's shard, else the sampler's own.
        if loader_shard is None and isinstance(own, ShardOptions):
            shard_index, shard_count = own.shard_index, own.shard_count
        self._layout = Layout(self._plan.steps_per_unit, self._length, shard_index, shard_count)
        self._fingerprint = pipeline_fingerprint(self._pipeline)

    @property
    def multiprocessing_options(self) -> MultiprocessingOptions:
        """The worker count, per-worker buffer size, profiling flag and executor of this loader."""
        return self._multiprocessing_options

    def _loader_sharding(self, shard_options: ShardOptions | None) -> ShardOptions | None:
        """The sharding the loader itself applies, after checking it against the sampler's."""
        # A sampler over more records than the source holds reads key % len(source), as
        # Grain's DataLoader does (docs/data_loader.md).
        own = getattr(self._sampler, "_shard_options", None)
        if shard_options is None:
            return None
        if not isinstance(own, ShardOptions) or own.shard_count == 1:
            return shard_options
        if shard_options.shard_count == 1 or _same_sharding(own, shard_options):
            return None  # the sampler shards already: the same options again are no-ops
        raise ValueError(
            f"both the sampler ({own!r}) and the DataLoader's `shard_options` "
            f"({shard_options!r}) shard the data, which would read 1/"
            f"{own.shard_count * shard_options.shard_count} of it per shard: "
            "shard in the sampler and leave the DataLoader's shard_options None."
        )

    def __iter__(self) -> DataLoaderIterator:
        return DataLoaderIterator(self)

    def __repr__(self) -> str:
        return (
            f"DataLoader(sampler={self._identity['sampler']}, "
            f"data_source={self._old_identity['data_source']}, "
            f"operations={list(self._operations)!r}, worker_count={self._worker_count})"
        )

    # -- states ----------------------------------------------------------------------

    def _units_of(self, pipeline_state: dict[str, Any]) -> int:
        """The units consumed (fully handed on) where `pipeline_state` stands."""
        state: Any = pipeline_state
        while isinstance(state, dict) and "parent" in state:
            state = state["parent"]
        units = state.get("next_index") if isinstance(state, dict) else None
        if isinstance(units, bool) or not isinstance(units, int) or units < 0:
            raise ValueError(
                f"state['pipeline'] is not the state of this DataLoader's pipeline: "
                f"{pipeline_state!r:.300}."
            )
        return units

    def _step_of(self, pipeline_state: dict[str, Any]) -> int:
        """The sampler step where the positions of `pipeline_state` stand."""
        return self._unit_to_step(self._units_of(pipeline_state))

    def _unit_to_step(self, unit: int) -> int:
        step = unit * self._plan.steps_per_unit
        return step if self._length >= INFINITE else min(step, self._length)

    def _encode_state(self, pipeline_state: dict[str, Any]) -> bytes:
        return encode_state(
            self._units_of(pipeline_state),
            pipeline_state,
            self._worker_count,
            self._layout,
            self._identity,
            self._fingerprint,
        )

    def _grain_sources(self) -> tuple[set[str], set[str]]:
        return grain_descriptions(self._sampler), grain_descriptions(self._data_source)

    def _decode_state(self, state: Any, validate: bool = True) -> SavedPosition:
        """Where a state from `get_state` resumes, after checking it is ours and fits."""
        saved = decode_state(
            state,
            self._identity,
            self._fingerprint,
            self._layout,
            validate,
            self._grain_sources() if validate else (set(), set()),
            self._check_grain_order,
            self._old_identity,
        )
        step = saved.next_step
        if self._length < INFINITE and step > self._length:
            raise ValueError(
                f"the state's position (step {step}) is past the end of this DataLoader "
                f"({self._length} steps): the state belongs to another DataLoader."
            )
        unit = -(-step // self._plan.steps_per_unit)
        if self._unit_to_step(unit) != step or (saved.skip and not self._plan.list_units):
            raise ValueError(
                f"state (next_step={step}, skip={saved.skip}) does not fit this DataLoader's "
                "operations: it was saved by a DataLoader with other batches or filters."
            )
        if saved.replay and not self._plan.may_replay:
            raise ValueError(
                f"state['replay']={saved.replay} does not fit this DataLoader's operations (it "
                "has no flat map or record operation that could need it): the state is "
                "from another DataLoader."
            )
        if saved.pipeline is None:
            return saved
        units = self._units_of(saved.pipeline)
        if saved.units is None:  # format 2: its next_step and its pipeline must agree
            if self._unit_to_step(units) != step:
                raise ValueError(
                    f"state['next_step']={step} disagrees with the position of "
                    "state['pipeline']: the state was modified."
                )
        elif units != saved.units:
            # A client moved the position through Grain's keys (as AirIO does): they win
            # where the pipeline holds nothing but the position, else they cannot be met.
            bottom: Any = saved.pipeline
            while "parent" in bottom:
                bottom = bottom["parent"]
            total = -(-self._length // self._plan.steps_per_unit)
            if units > total:
                raise ValueError(
                    f"state['pipeline'] says {units} units were read, past the end of this "
                    f"DataLoader ({total} units): the state is corrupt or from another one."
                )
            if self._plan.tail or bottom.get("emitted"):
                raise ValueError(
                    f"state['last_seen_indices'] says {saved.units} units were read but "
                    f"state['pipeline'] says {units}: this DataLoader runs operations in this "
                    "process (a batch after a filter, a flat map, a record operation) whose "
                    "state only state['pipeline'] gives, so the position cannot be moved by "
                    "editing Grain's keys. Restore the state unedited."
                )
            return dataclasses.replace(saved, pipeline=None)
        return saved

    def _check_grain_order(self, state: dict[str, Any]) -> None:
        """Refuses a state of Google's Grain where its order is not this loader's."""
        workers = state["worker_count"]
        if isinstance(workers, bool) or not isinstance(workers, int):
            raise ValueError(f"state['worker_count'] must be an int >= 0, got {workers!r}.")
        reasons = []
        if getattr(self._sampler, "_shuffle", False):
            reasons.append("the sampler shuffles, and Grain's shuffle is not this library's")
        if self._plan.needs_rng:
            reasons.append("a random map draws from each record's rng, seeded otherwise by Grain")
        if self._layout.shard_count > 1:
            reasons.append("the loader is sharded, and Grain splits the records otherwise")
        if self._plan.tail:
            reasons.append(
                "operations run in this process (a batch after a filter, a flat map or a "
                "record operation), whose state Grain's keys do not give"
            )
        filters = any(
            isinstance(op, ElementStep) and op.kind == "filter" for op in self._plan.worker
        )
        if workers >= 2 and (self._plan.steps_per_unit > 1 or filters):
            reasons.append(
                f"Grain's {workers} workers each batched or filtered their own records, so its "
                "order depends on its worker count, and this library's does not"
            )
        if reasons:
            raise ValueError(
                "this DataLoader state was written by Google's Grain, and it cannot be resumed "
                f"here: {'; '.join(reasons)}. So no position here continues that run exactly. "
                "Start this DataLoader from the beginning, or resume from a checkpoint this "
                "library wrote."
            )

    def _pipeline_iterator(self) -> Any:
        """A fresh pipeline iterator whose dict states carry the pipeline's fingerprint.

        ``iter(dataset)`` gives states in Grain's shapes, without it; this state
        (its "pipeline" entry) keeps it, so that it restores only into this pipeline.
        """
        iterator = iter(self._pipeline)
        remember_dataset(iterator, self._pipeline)
        return iterator

    def _restored(self, saved: SavedPosition) -> Any:
        """A pipeline iterator at `saved` (a version-1 state: before its replay)."""
        iterator = self._pipeline_iterator()
        try:
            pipeline = saved.pipeline
            if pipeline is None:  # the parent side afresh at (unit, skip)
                pipeline = self._fresh_state(iterator, saved)
            elif FINGERPRINT_KEY not in pipeline:
                # Format 3 carries the fingerprint beside the pipeline's state (checked).
                pipeline = {**pipeline, FINGERPRINT_KEY: self._fingerprint}
            try:
                iterator.set_state(pipeline)
            except (ValueError, TypeError) as error:
                raise ValueError(
                    f"this state does not fit this DataLoader's operations or data: {error}"
                ) from error
        except BaseException:
            iterator.close()
            raise
        return iterator

    def _fresh_state(self, iterator: Any, saved: SavedPosition) -> dict[str, Any]:
        """The pipeline's state with every parent-side stage fresh at a position.

        A fresh iterator's state has that shape (its stages are all fresh): the
        state of its positions, at the bottom, is replaced by the saved one.
        """
        state = iterator.get_state()
        positions = state
        while "parent" in positions:
            positions = positions["parent"]
        positions["next_index"] = -(-saved.next_step // self._plan.steps_per_unit)
        if self._plan.list_units:
            positions["emitted"] = saved.skip
        return state


class DataLoaderIterator(IteratorTraits, Iterator[Any]):
    """The iterator of a DataLoader (``iter(loader)``); its position checkpoints as small JSON.

    Args:
      data_loader: the DataLoader to read.
      state: where to start: a state from `get_state()` (the bytes, or the dict
        they decode to, as Grain passes it); None starts at the beginning.
      validate_state: whether a state must come from a loader with the same
        sampler, data source and shard options (compared by description); with
        False only its shape is checked.

    ``get_state()`` returns JSON bytes (see `grain_mp._loader_state` for the
    format), and ``set_state(state)`` moves the iterator there: it then returns
    exactly what followed, whatever the worker_count of either loader. Worker
    processes start at the first `next` (or `start_prefetch`) and stop at the
    end, on `close()`, or when the iterator is garbage collected. A closed
    iterator refuses `next()` (ValueError), like every iterator of this library;
    its `get_state()` still tells where it stopped.

    After an exception from the pipeline the iterator stays at the failing
    element: the next call reads it again.

    Example::

        it = iter(loader)                        # or DataLoaderIterator(loader)
        next(it)
        state = it.get_state()
        later = [next(it) for _ in range(3)]
        it = DataLoaderIterator(loader, state)   # or it.set_state(state)
        assert [next(it) for _ in range(3)] == later
    """

    def __init__(
        self,
        data_loader: DataLoader,
        state: bytes | str | dict[str, Any] | None = None,
        validate_state: bool = True,
    ):
        if not isinstance(data_loader, DataLoader):
            raise TypeError(
                "`data_loader` must be a grain.python.DataLoader, got "
                f"{type(data_loader).__name__}."
            )
        if not isinstance(validate_state, bool):
            raise TypeError(f"`validate_state` must be a bool, got {validate_state!r}.")
        self._loader = data_loader
        self._validate_state = validate_state
        # The pipeline iterator (None: not made yet, or dropped after an error or close()),
        # the version-1 outputs it still has to replay, and where a new one resumes.
        self._it: Any = None
        self._pending = 0
        self._saved: SavedPosition | None = None
        self._closed = False
        # One thread at a time in next/get_state/set_state/close (grain_dataset._runtime._guard).
        add_lock(self)
        if state is not None:
            self._restore(data_loader._decode_state(state, validate_state))

    def __iter__(self) -> DataLoaderIterator:
        return self

    # How a closed iterator's error says to make a new one (grain_dataset._runtime._guard).
    _MADE_BY = "iter(loader)"

    def _restore(self, saved: SavedPosition) -> None:
        """Moves to `saved`, checking at once that the pipeline takes it."""
        it = self._loader._restored(saved)
        self._drop()
        self._it, self._pending, self._saved = it, saved.replay, saved

    def _iterator(self) -> Any:
        """The pipeline iterator, made (at the saved position) if need be."""
        it = self._it
        if it is None:
            saved = self._saved
            it = self._it = (
                self._loader._restored(saved) if saved else self._loader._pipeline_iterator()
            )
            self._pending = saved.replay if saved else 0
        if self._pending:
            # A version-1 state: the parent side restarted afresh drops what it had returned.
            try:
                for _ in range(self._pending):
                    next(it)
            except StopIteration:
                self._drop()
                raise ValueError(
                    f"the state says to replay {self._pending} outputs, but the data ends "
                    "before: it was saved by a DataLoader with other operations or data."
                ) from None
            except BaseException:
                self._drop()
                raise
            self._pending = 0
        return it

    def _drop(self) -> None:
        it, self._it = self._it, None
        if it is not None:
            it.close()

    @serialized
    def __next__(self) -> Any:
        if self._closed:
            raise closed_error(self)
        it = self._iterator()
        before = it.get_state() if self._loader._plan.drops_failing else None
        try:
            return next(it)
        except StopIteration:
            raise
        except BaseException:
            # Stay before the failing element: the next call reads it again.
            self._saved = SavedPosition(0, it.get_state() if before is None else before)
            self._drop()
            raise

    def _pipeline_state(self) -> dict[str, Any]:
        saved = self._saved
        if self._it is None and saved is not None and saved.pipeline is not None:
            return saved.pipeline
        return self._iterator().get_state()

    @serialized
    def get_state(self) -> bytes:
        """The position as JSON bytes; pass them to `set_state` of any iterator of this loader."""
        return self._loader._encode_state(self._pipeline_state())

    @serialized
    def set_state(self, state: bytes | str | dict[str, Any]) -> None:
        """Moves to the position `state` (from `get_state`) describes; checks it fits."""
        self._restore(self._loader._decode_state(state, self._validate_state))

    @serialized
    def start_prefetch(self) -> None:
        """Starts the worker processes (and reading) now, before the first `next`.

        Useful when the iterator is created (or restored) well before its first
        element is needed: the workers warm up meanwhile.
        """
        self._iterator().start_prefetch()

    @serialized
    def close(self) -> None:
        """Stops the worker processes and reading threads for good; idempotent.

        From another thread, while `next()` waits (on a worker stuck in a
        transformation, say), close() does not wait for it: it ends the workers
        (asked, terminated, then killed: two seconds at most) and that `next()`
        raises a ValueError; close() returns within about two seconds
        (``CLOSE_TIMEOUT_S`` of ``grain_dataset._runtime._guard``, docs/troubleshooting.md).
        """
        self._closed = True
        if self._it is not None and not self._pending:
            self._saved = SavedPosition(0, self._it.get_state())
        self._drop()

    def _interrupt(self) -> list[Any]:
        # close() from another thread (grain_dataset._runtime._guard): the reading it waits on.
        self._closed = True
        it = self._it
        return [] if it is None else [it]

    def save(self, directory: Any) -> Coroutine[Any, Any, Awaitable[None]]:
        """Returns a coroutine that writes the state (taken now) into `directory`.

        As `DatasetIterator.save`: ``process_<i>-of-<n>.json``, e.g.
        ``asyncio.run(it.save(path))``.
        """
        return save_coroutine(self, directory)

    def load(self, directory: Any) -> Coroutine[Any, Any, Awaitable[None]]:
        """Returns a coroutine that reads the state from `directory` and sets it."""
        return load_coroutine(self, directory)

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter exit module globals may already be gone (free-threaded CPython
        # finalizes these after its modules are cleared): stay silent, with no global
        # outside the try (not contextlib.suppress, which is one).
        try:
            if sys.is_finalizing():
                return
            self._drop()
        except Exception:
            pass

    def __repr__(self) -> str:
        saved = self._saved
        if self._it is not None and not self._pending:
            step = self._loader._step_of(self._it.get_state())
        elif saved is None:
            step = 0
        elif saved.pipeline is None:
            step = saved.next_step
        else:
            step = self._loader._step_of(saved.pipeline)
        return f"DataLoaderIterator(next_step={step}, worker_count={self._loader._worker_count})"


PyGrainDatasetIterator = DataLoaderIterator
"""Grain's older name of `DataLoaderIterator` (``grain.python.PyGrainDatasetIterator``)."""
