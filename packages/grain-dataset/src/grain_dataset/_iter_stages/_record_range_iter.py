"""Streaming datasets sharded by record range: Parquet rows, TFRecord records, JSON lines.

The records of all files are numbered 0 .. N-1 across the files in order
(grain_sources' RecordFiles). A host's shard is a contiguous range of those
numbers (`grain_index.shard_bounds`: sizes differ by at most one record, or
are equal with `drop_remainder`), whatever the number of files: two files
serve eight hosts. Inside a worker of `mp_prefetch` (the pipeline's worker
slice, see grain_dataset._worker_slice) the range is split again: worker w of
n takes the records w, w+n, ... of it, so that the workers' elements, taken in
turn as mp_prefetch takes them, are the records in the order one process reads
them; with ``sequential_slice`` it takes the w-th contiguous part.

So the records an iterator reads are a progression ``start + step * k`` for k
in [0, length), and its state is two integers: ``{"next": k, "record": the
number of the next record}`` (the second lets `set_state` refuse a state of
another shard; a state with k = 0 fits any, as mp_prefetch gives each worker
the initial state of an iterator made outside the workers). Restoring reads
only from that record on: a Parquet row group and an offset in it, a TFRecord
or JSON-lines byte offset.

Resizes. `RecordRangeIterDataset.resized_state` turns the states of all
hosts of a run into a state for another host or worker count: the records
that no old iterator delivered become a *plan* (see "resizes" below) that
the new iterators share and split, and that their states carry from then on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from grain_dataset._core._base import DatasetIterator, IterDataset
from grain_dataset._core._state import check_state
from grain_index import NoSharding, ShardOptions, decode_runs, encode_runs, shard_bounds
from grain_sources import (
    JsonLinesRecordFiles,
    ParquetRecordFiles,
    RecordFiles,
    TFRecordRecordFiles,
)

T = TypeVar("T")

# Records read in one call of the files' reader: enough that the per-call cost (numpy
# locate, one Arrow conversion) is small per record, few enough to hold.
_BLOCK = 1024


class RecordRangeIterDataset(IterDataset[T]):
    """Base of the datasets that stream a shard of numbered records (see the module docstring).

    Args:
      files: the records, as a grain_sources RecordFiles.
      shard_options: which contiguous range of the records this host reads;
        None reads all of them (per worker, a share, inside `mp_prefetch`).

    A state restores into the same host and worker count; `resized_state`
    makes one for another count from the states of all old hosts.
    """

    def __init__(self, files: RecordFiles, shard_options: ShardOptions | None = None):
        super().__init__()
        if shard_options is None:
            shard_options = NoSharding()
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                "`shard_options` must be a grain.sharding.ShardOptions (e.g. "
                "ShardOptions(shard_index=jax.process_index(), shard_count=jax.process_count())), "
                f"got {type(shard_options).__name__}."
            )
        self._files = files
        self._shard_options = shard_options
        self._range = shard_bounds(files.num_records, shard_options)

    @property
    def paths(self) -> list[str]:
        """The files, in the order their records are numbered."""
        return self._files.paths

    @property
    def num_records(self) -> int:
        """The number of records in all files together."""
        return self._files.num_records

    @property
    def shard_range(self) -> tuple[int, int]:
        """The [start, stop) record numbers this host's shard reads."""
        return self._range

    def __iter__(self) -> DatasetIterator[T]:
        return _RecordRangeIterator(self)

    def resized_state(self, states: Sequence[Any], like: Any) -> Any:
        """The state that continues, on this host, a run saved with another host or worker count.

        Args:
          states: the states of all hosts of the old run, in host order, each
            ``iter(pipeline).get_state()`` as saved at the same checkpoint.
          like: a state of this host's new pipeline (``iter(new_pipeline).
            get_state()``), for its shape: how many `mp_prefetch` workers.

        Returns:
          A state of the shape of `like`: restored with ``set_state`` on every
          new host, the new hosts and workers read every record that no old
          host had delivered, exactly once between them, and none it had.

        The pipeline between this dataset and the state must keep no state of
        its own (`map`, `filter`, `batch`, `mp_prefetch` and the like); a stage
        with its own state (a shuffle buffer, packing) is refused, as are
        ``drop_remainder=True`` shard options, which would drop owed records.

        Example::

            new = ShardedParquetIterDataset(paths, shard_options=ShardOptions(h, 3))
            it = iter(new.map(parse).mp_prefetch(MultiprocessingOptions(num_workers=4)))
            it.set_state(new.resized_state(old_states, it.get_state()))
        """
        return _resized_state(self, states, like)

    def __repr__(self) -> str:
        start, stop = self._range
        return (
            f"{type(self).__name__}({len(self._files.paths)} files, records [{start}, {stop}) "
            f"of {self._files.num_records})"
        )


class _RecordRangeIterator(DatasetIterator[T]):
    def __init__(self, dataset: RecordRangeIterDataset[T]):
        super().__init__()
        self._dataset = dataset
        options = dataset._shard_options
        worker_slice = self._ctx.worker_slice
        worker, workers, sequential = worker_slice if worker_slice is not None else (0, 1, False)
        self._where = (options.shard_index, options.shard_count, worker, workers, bool(sequential))
        self._plan: dict[str, Any] | None = None
        self._set_geometry(None)
        self._next = 0  # elements handed out
        self._block: list[T] = []
        self._block_start = 0  # the k of self._block[0]
        self._reader = dataset._files.reader()

    def _set_geometry(self, plan: dict[str, Any] | None) -> None:
        ds = self._dataset
        frame = _Frame(ds._files.num_records, plan)
        self._frame = frame
        self._share, self._start, self._step, length = frame.leaf(
            *self._where, ds._shard_options.drop_remainder
        )
        self._length = len(self._share) + length

    def _records(self, ks: np.ndarray) -> list[np.ndarray]:
        """The record numbers of the sequence entries `ks`, as increasing parts."""
        owed = len(self._share)
        leftovers = self._share[ks[ks < owed]]
        # The leftovers are runs of several old iterators: each increasing part is one read.
        parts = np.split(leftovers, np.flatnonzero(np.diff(leftovers) <= 0) + 1)
        fresh = ks[ks >= owed] - owed
        parts.append(self._frame.records(self._start + self._step * fresh))
        return [part for part in parts if len(part)]

    def __next__(self) -> T:
        k = self._next
        offset = k - self._block_start
        if not 0 <= offset < len(self._block):
            if k >= self._length:
                self._reader.close()
                raise StopIteration
            ks = np.arange(k, min(k + _BLOCK, self._length), dtype=np.int64)
            block: list[T] = []
            for part in self._records(ks):
                block.extend(self._reader.read(part))
            self._block = block
            self._block_start, offset = k, 0
        self._next = k + 1
        return self._block[offset]

    def _record_at(self, k: int) -> int:
        if k >= self._length:
            # Past the end: a number no record has once resized (the old formula before).
            if self._plan is not None:
                return self._frame.num_records
            return self._start + self._step * k
        return int(self._records(np.asarray([k], dtype=np.int64))[0][0])

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"next": self._next, "record": self._record_at(self._next)}
        if self._plan is not None:
            state["plan"] = self._plan
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        plan = state.get("plan") if isinstance(state, dict) else None
        if plan is None:
            check_state(state, stage, ("next", "record"))
        else:
            check_state(
                {**state, "plan": None}, stage, ("next", "record", "plan"), nested=("plan",)
            )
        if plan is not None:
            _check_plan(plan, self._where, self._dataset)
        self._plan = plan
        self._set_geometry(plan)
        k, record = state["next"], state["record"]
        # k = 0 is the start of any share: mp_prefetch hands each worker the state of
        # an iterator made outside the workers, before it reads.
        if k > self._length or (k and k < self._length and record != self._record_at(k)):
            raise ValueError(
                f"state {_brief(state)} does not fit {stage}: this iterator reads "
                f"{self._length} records, so the state was saved with other shard options, "
                "files or worker count: restore it into the pipeline it was saved from, or "
                "resize it with resized_state(states_of_all_old_hosts, new_state)."
            )
        self._next = k
        self._block, self._block_start = [], 0

    def close(self) -> None:
        self._reader.close()
        self._block = []


class ShardedParquetIterDataset(RecordRangeIterDataset[dict[str, Any]]):
    """The rows of Parquet files as dicts, sharded over hosts and workers by row range.

    Args:
      paths: Parquet files (a path, a glob, ``name@N``, or a list of them);
        their rows are numbered across the files in this order.
      shard_options: which contiguous range of rows this host reads (sizes
        differ by at most one row); None reads all.
      columns: the columns to read; None reads all.

    A host's range may start inside a row group: it reads that row group and
    converts only its own rows. The state is ``{"next": k, "record": r}``;
    restoring reads from the row group holding row r, never an earlier one.

    Example::

        ds = ShardedParquetIterDataset(
            ["a.parquet", "b.parquet"],
            shard_options=grain.sharding.ShardOptions(process_index, process_count),
        )
    """

    def __init__(
        self,
        paths: Any,
        *,
        shard_options: ShardOptions | None = None,
        columns: Sequence[str] | None = None,
    ):
        super().__init__(ParquetRecordFiles(paths, columns=columns), shard_options)


class ShardedTFRecordIterDataset(RecordRangeIterDataset[bytes]):
    """The records of TFRecord files as bytes, sharded over hosts and workers by record range.

    Args:
      paths: TFRecord files (a path, a glob, ``name@N``, or a list of them).
      shard_options: which contiguous range of records this host reads;
        None reads all.
      verify_crc: check both checksums of every record read.

    Every record's byte offset comes from the file's sidecar index
    (`grain_sources.write_tfrecord_index`) or, without one, from one pass over
    the record headers when the dataset is built and again in each iterator
    that reads the file: write the index once for large files.
    """

    def __init__(
        self,
        paths: Any,
        *,
        shard_options: ShardOptions | None = None,
        verify_crc: bool = True,
    ):
        super().__init__(TFRecordRecordFiles(paths, verify_crc=verify_crc), shard_options)


class ShardedJsonLinesIterDataset(RecordRangeIterDataset[Any]):
    """The lines of JSON-lines files, parsed, sharded over hosts and workers by record range.

    Args:
      paths: JSON-lines files (a path, a glob, ``name@N``, or a list of them);
        each non-empty line is one record, parsed with ``json.loads``.
      shard_options: which contiguous range of records this host reads;
        None reads all.

    The line offsets are found with one vectorized pass over each file when
    the dataset is built, and again in each iterator that reads the file.
    """

    def __init__(self, paths: Any, *, shard_options: ShardOptions | None = None):
        super().__init__(JsonLinesRecordFiles(paths), shard_options)


# -- resizes ------------------------------------------------------------------------
#
# A *plan* is what all iterators of a resized run share: `leftovers`, record
# numbers owed from before the last resize (stored as arithmetic runs [start,
# step, count], each run increasing), and `segments`, the record ranges [a, b) that no run
# before has touched, laid end to end as a virtual range [0, T). Iterator g of
# G = hosts * workers (host h, worker w: g = h * workers + w) reads the g-th of
# G contiguous parts of the leftovers first, then its share of [0, T) exactly as
# an iterator without a plan shares [0, num_records): the host's contiguous
# range, every workers-th of it (or the w-th contiguous part with sequential
# slices). Without a plan the
# leftovers are empty and the one segment is [0, num_records).
#
# A resize turns the states of all old iterators into the next plan: each old
# iterator's remaining leftovers, and of its virtual share, per host, the band
# below the fastest worker (one arithmetic run per worker, materialized: its size
# is the workers' difference in pace, small) becomes leftovers; above it the
# host's share is whole and stays a range. So a plan holds about one run per old
# iterator and one segment per old host, whatever the length of the run.

_PLAN_KEYS = frozenset({"hosts", "workers", "sequential", "leftovers", "segments"})


class _Frame:
    """The virtual range [0, T) of a plan's segments, and its leftovers."""

    def __init__(self, num_records: int, plan: dict[str, Any] | None):
        self.num_records = num_records
        self.plan = plan
        if plan is None:
            self.leftovers = np.zeros(0, dtype=np.int64)
            segments = np.asarray([[0, num_records]], dtype=np.int64)
        else:
            self.leftovers = decode_runs(plan["leftovers"])
            segments = np.asarray(plan["segments"], dtype=np.int64).reshape(-1, 2)
        self.starts = segments[:, 0]
        lengths = segments[:, 1] - segments[:, 0]
        self.vends = np.cumsum(lengths)
        self.vstarts = self.vends - lengths
        self.total = int(self.vends[-1]) if len(self.vends) else 0

    def records(self, virtual: np.ndarray) -> np.ndarray:
        """The record numbers at increasing virtual positions (increasing too)."""
        if self.plan is None or not len(virtual):
            return virtual
        where = np.searchsorted(self.vends, virtual, side="right")
        return self.starts[where] + (virtual - self.vstarts[where])

    def ranges(self, start: int, stop: int) -> list[list[int]]:
        """The virtual range [start, stop) as record ranges."""
        out = []
        first = int(np.searchsorted(self.vends, start, side="right"))
        for i in range(first, len(self.vends)):  # one pass per segment, not per record
            if self.vstarts[i] >= stop:
                break
            lo, hi = max(start, int(self.vstarts[i])), min(stop, int(self.vends[i]))
            offset = int(self.starts[i]) - int(self.vstarts[i])
            out.append([lo + offset, hi + offset])
        return out

    def host_range(self, host: int, hosts: int, drop_remainder: bool) -> tuple[int, int]:
        options = ShardOptions(host, hosts, drop_remainder=drop_remainder and self.plan is None)
        return shard_bounds(self.total, options)

    def leaf(
        self,
        host: int,
        hosts: int,
        worker: int,
        workers: int,
        sequential: bool,
        drop_remainder: bool,
    ) -> tuple[np.ndarray, int, int, int]:
        """(owed leftovers, virtual start, step, length) of iterator (host, worker)."""
        # A contiguous part of the leftovers: a resize then owes a slice of the runs again.
        owed = ShardOptions(host * workers + worker, hosts * workers)
        low, high = shard_bounds(len(self.leftovers), owed)
        share = self.leftovers[low:high]
        start, stop = self.host_range(host, hosts, drop_remainder)
        if sequential:
            size, extra = divmod(stop - start, workers)
            start += worker * size + min(worker, extra)
            return share, start, 1, size + (worker < extra)
        return share, start + worker, workers, len(range(start + worker, stop, workers))


def _brief(state: Any) -> str:
    text = repr(state)
    return text if len(text) < 200 else text[:200] + "...}"


def _check_plan(plan: Any, where: tuple[int, int, int, int, bool], ds: Any) -> None:
    if not isinstance(plan, dict) or set(plan) != _PLAN_KEYS:
        raise ValueError(
            f"the state's plan must be a dict with the keys {sorted(_PLAN_KEYS)} as "
            f"resized_state makes it, got {_brief(plan)}."
        )
    host, hosts, worker, workers, sequential = where
    if (plan["hosts"], plan["workers"], bool(plan["sequential"])) != (hosts, workers, sequential):
        raise ValueError(
            f"this state was resized for {plan['hosts']} hosts of {plan['workers']} workers"
            f"{' (sequential slices)' if plan['sequential'] else ''}, but it is restored into "
            f"host {host} of {hosts}, worker {worker} of {workers}"
            f"{' (sequential slices)' if sequential else ''} of {ds!r}: resize it again with "
            "resized_state for this host and worker count."
        )
    try:
        segments = np.asarray(plan["segments"], dtype=np.int64).reshape(-1, 2)
        leftovers = decode_runs(plan["leftovers"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"the state's plan is malformed: {error}") from error
    n = ds._files.num_records
    if (segments < 0).any() or (segments > n).any() or (segments[:, 1] < segments[:, 0]).any():
        raise ValueError(f"the state's plan has record ranges outside [0, {n}) of {ds!r}.")
    if len(leftovers) and (leftovers.min() < 0 or leftovers.max() >= n):
        raise ValueError(f"the state's plan owes records outside [0, {n}) of {ds!r}.")


def _walk(state: Any, what: str) -> tuple[list[dict[str, Any]], bool]:
    """The source states inside a pipeline's state, one per worker, and sequential or not."""
    if isinstance(state, dict) and {"next", "record"} <= set(state) <= {"next", "record", "plan"}:
        return [state], False
    if (
        isinstance(state, dict)
        and "parents" in state
        and set(state)
        <= {
            "next_worker",
            "parents",
            "sequential_slice",
        }
    ):
        leaves = []
        for parent in state["parents"]:
            inner, _ = _walk(parent, what)
            if len(inner) != 1 or inner[0] is not parent:
                raise ValueError(f"{what} has workers inside workers: resize it per level.")
            leaves.append(parent)
        return leaves, bool(state.get("sequential_slice"))
    raise ValueError(
        f"{what} is not the state of a pipeline whose stages above the sharded source keep "
        "no state of their own (map, filter, batch, mp_prefetch): resized_state cannot move "
        f"a stage's own state to other hosts; got {_brief(state)}."
    )


def _resized_state(ds: RecordRangeIterDataset[Any], states: Sequence[Any], like: Any) -> Any:
    if isinstance(states, dict) or not isinstance(states, Sequence) or not states:
        raise TypeError(
            "`states` must be the list of the states of all hosts of the old run, in host "
            f"order (one get_state() per host), got {_brief(states)}."
        )
    options = ds._shard_options
    if options.drop_remainder:
        raise ValueError(
            "resized_state restores every owed record, so it needs shard options with "
            "drop_remainder=False (drop a last partial batch downstream instead)."
        )
    hosts = len(states)
    old = [_walk(state, f"the state of old host {i}") for i, state in enumerate(states)]
    shapes = {(len(leaves), sequential) for leaves, sequential in old}
    if len(shapes) != 1:
        raise ValueError(f"the old hosts ran different worker counts or slicings: {shapes}.")
    ((workers, sequential),) = shapes
    plans = [leaf.get("plan") for leaves, _ in old for leaf in leaves]
    plan = plans[0]
    if any(other != plan for other in plans):
        raise ValueError("the old states come from different runs (their plans differ).")
    if plan is not None:
        if isinstance(plan, dict) and (plan.get("hosts"), plan.get("workers")) != (hosts, workers):
            raise ValueError(
                f"the old states were resized for {plan.get('hosts')} hosts of "
                f"{plan.get('workers')} workers, but {hosts} host states of {workers} workers "
                "were passed: pass the states of all hosts of the last run, in host order."
            )
        _check_plan(plan, (0, hosts, 0, workers, sequential), ds)
    frame = _Frame(ds._files.num_records, plan)
    owed: list[np.ndarray] = []
    tails: list[list[int]] = []
    remaining = 0
    for host, (leaves, _) in enumerate(old):
        progress = []
        for worker, leaf in enumerate(leaves):
            share, start, step, length = frame.leaf(host, hosts, worker, workers, sequential, False)
            k = leaf["next"]
            total = len(share) + length
            if not isinstance(k, int) or not 0 <= k <= total:
                raise ValueError(
                    f"the state of old host {host}, worker {worker} ({_brief(leaf)}) does not "
                    f"fit {hosts} hosts of {workers} workers over {ds!r}: pass the states of "
                    "all old hosts, in host order, saved from these files with "
                    "drop_remainder=False."
                )
            if 0 < k < total:
                at = (
                    share[k]
                    if k < len(share)
                    else frame.records(np.asarray([start + step * (k - len(share))]))[0]
                )
                if leaf["record"] != int(at):
                    raise ValueError(
                        f"the state of old host {host}, worker {worker} ({_brief(leaf)}) was "
                        f"at record {leaf['record']}, but that host's worker reads record "
                        f"{int(at)} there: pass the states of all old hosts, in host order, "
                        "saved from these files with drop_remainder=False."
                    )
            remaining += total - k
            owed.append(share[k:])
            progress.append((max(0, k - len(share)), start, step, length))
        if sequential or workers == 1:
            for done, start, _, length in progress:
                tails.append([start + done, start + length])
            continue
        # Interleaved workers: below the fastest one, each owes one run; above, all of it.
        top = max(done for done, *_ in progress)
        for done, start, step, length in progress:
            owed.append(frame.records(start + step * np.arange(done, min(top, length))))
        low, high = frame.host_range(host, hosts, False)
        tails.append([low + workers * top, high])
    # In old iterator order, not sorted: each old iterator's part stays one run or a few.
    leftovers = np.concatenate(owed) if owed else np.zeros(0, dtype=np.int64)
    segments: list[list[int]] = []
    for start, stop in tails:
        for lo, hi in frame.ranges(start, stop) if stop > start else []:
            segments.append([lo, hi])
    segments.sort()
    merged: list[list[int]] = []
    for lo, hi in segments:
        if merged and merged[-1][1] == lo:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    if len(leftovers) + sum(hi - lo for lo, hi in merged) != remaining:
        raise AssertionError("resized_state lost or repeated records; please report this.")
    new_leaves, new_sequential = _walk(like, "`like`")
    new_plan = {
        "hosts": options.shard_count,
        "workers": len(new_leaves),
        "sequential": int(new_sequential),
        "leftovers": encode_runs(leftovers),
        "segments": merged,
    }
    fresh = {"next": 0, "record": 0, "plan": new_plan}
    if len(new_leaves) == 1 and new_leaves[0] is like:
        return dict(fresh)
    resized = {key: value for key, value in like.items() if key != "parents"}
    resized["next_worker"] = 0
    resized["parents"] = [dict(fresh) for _ in new_leaves]
    return resized
