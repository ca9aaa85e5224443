"""Per-stage statistics of a running pipeline: elements, time, element spec, bottleneck.

Off, recording costs nothing beyond the hook every stage's `__next__` already
looks at (grain_dataset._runtime._guard). `track(iterator)` (or
``DatasetOptions(execution_tracking_mode="stage_timing")``) sets that hook, in
every iterator of the pipeline, to a timer (`set_timer`; the iterator's class
stays its own) that runs its `__next__`, counts the element, times one call in
`_SAMPLE_EVERY` (`perf_counter_ns`; the total is estimated from that sample,
since two clock reads per call would cost more than many stages do), and notes
the first element's spec. An iterator's *self* time is its time minus its
parents' (their `__next__` runs inside its own). `to_iter_dataset` keeps its
own totals per chunk instead (`_stats_counts`): its time is the consumer's time
reading chunks (no threads) or blocked on the reading threads, and the readers'
CPU time is shown beside it, since the MapDataset stages run there. The stage
with the most self time bounds the throughput: the summary's last line names
it.

Iterators a stage creates after tracking started (e.g. an interleave opening
its next file) are not tracked; their time counts as their creator's. With
stages this cheap, the per-element call of the timer is the cost that
remains (measured in benchmarks/stats_overhead.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grain_dataset._common._weak_registry import WeakRegistry
from grain_dataset._core._element_spec import leaf_spec, map_with_path
from grain_dataset._runtime._carried import carried, carried_if_any
from grain_dataset._runtime._guard import NextHook, set_timer


@dataclass
class StageStats:
    """What one stage of a tracked pipeline did."""

    name: str
    elements: int = 0
    total_ns: int = 0
    self_ns: int = 0
    waiting_s: float | None = None
    reader_cpu_s: float | None = None
    spec: str = "-"
    depth: int = 0
    # Its time is the consumer waiting on a background thread or process.
    waits_on_background: bool = False
    # ... on readers (worker processes, mp_prefetch) whose stages are not tracked
    # here: that wait is the only measure of their work, so it counts as work.
    waits_on_readers: bool = False

    @property
    def working(self) -> bool:
        """Whether its self time is work (its own, or its untracked readers')."""
        return self.waits_on_readers or not self.waits_on_background


@dataclass
class PipelineStats:
    """The stages of a tracked pipeline, source first; `str()` is the summary table."""

    stages: list[StageStats] = field(default_factory=list)

    @property
    def bottleneck(self) -> StageStats | None:
        """The stage with the most self time (None before any element).

        A stage whose time is waiting on a background thread is named only if no
        stage doing work was timed: the wait overlaps with the work behind it.
        Waiting on readers whose stages are not tracked here (mp_prefetch's worker
        processes) is their work, as this process sees it, and competes.
        """
        timed = [stage for stage in self.stages if stage.self_ns > 0]
        working = [stage for stage in timed if stage.working]
        pool = working or timed
        return max(pool, key=lambda stage: stage.self_ns) if pool else None

    def __str__(self) -> str:
        if not self.stages:
            return "no stage is tracked: enable execution tracking before iterating."
        working = [stage for stage in self.stages if stage.working]
        total = sum(stage.self_ns for stage in working or self.stages) or 1
        rows = [("#", "stage", "elements", "self ms", "self/elem", "share", "output spec")]
        for number, stage in enumerate(self.stages):
            per = stage.self_ns / stage.elements / 1e3 if stage.elements else 0.0
            name = "  " * stage.depth + stage.name
            if stage.waiting_s is not None:  # set together with reader_cpu_s
                name += f" [reader CPU {stage.reader_cpu_s * 1e3:.1f} ms]"  # type: ignore[operator]
            rows.append(
                (
                    str(number),
                    name,
                    str(stage.elements),
                    f"{stage.self_ns / 1e6:.2f}",
                    f"{per:.2f} us",
                    "wait"
                    if not stage.working and working
                    else f"{100 * stage.self_ns / total:.0f}%",
                    stage.spec,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
            for row in rows
        ]
        slowest = self.bottleneck
        if slowest is None:
            lines.append("bottleneck: none yet (no element has been produced)")
        else:
            number = self.stages.index(slowest)
            line = (
                f"bottleneck: stage {number} {slowest.name} "
                f"({100 * slowest.self_ns / total:.0f}% of the pipeline's time)"
            )
            if slowest.waits_on_readers:
                line += (
                    ": the time spent waiting on its workers, which run the stages before it; "
                    "more workers (with free cores), or cheaper stages there, raise the "
                    "throughput"
                )
            elif slowest.waits_on_background:
                line += (
                    ": that is the consumer waiting on its background thread or worker "
                    "processes, so the stages before it are slower than the consumer"
                )
            lines.append(line)
        return "\n".join(lines)


# One call in _SAMPLE_EVERY is timed and scaled up: two clock reads on every call
# would cost more than many stages do.
_SAMPLE_EVERY = 16
_SAMPLE_MASK = _SAMPLE_EVERY - 1


class _Record:
    """One stage's counts; the hot path touches only closure cells, not this object."""

    __slots__ = ("calls", "failed", "first_ns", "ns", "sampled", "spec")

    def __init__(self) -> None:
        self.calls = itertools.count()  # advanced in C: no Python store per call
        self.failed = 0  # calls that ended the stream or raised: not elements
        self.first_ns = 0  # the first call, kept apart: it often starts threads or workers
        self.ns = 0  # the timed calls after the first
        self.sampled = 0
        self.spec = "-"

    @property
    def count(self) -> int:
        """Elements produced so far."""
        # itertools.count exposes its next value only through its repr.
        return int(repr(self.calls)[6:-1]) - self.failed

    def estimated_ns(self) -> float:
        """Total time of all calls: the first as measured, the rest from the timed sample."""
        later = self.count + self.failed - 1
        scaled = self.ns * later / self.sampled if self.sampled else 0.0
        return self.first_ns + scaled


def _timer(cls: type[Any], record: _Record) -> NextHook:
    """The hook of a tracked iterator's `__next__` (see `set_timer`), recording into `record`.

    One closure per tracked iterator, so that the per-call path reads its counter
    from closure cells: that path is what tracking costs on cheap stages, and
    instance attribute traffic there doubled it.
    """
    clock = time.perf_counter_ns
    calls = record.calls
    # A stage that waits on a thread or process costs far more per call than a timer.
    mask = 0 if cls._STATS_ASYNC else _SAMPLE_MASK

    def timed(self: Any, method: Callable[[Any], Any]) -> Any:
        count = next(calls)
        if count & mask:
            try:
                return method(self)
            except BaseException:
                record.failed += 1
                raise
        start = clock()
        try:
            value = method(self)
        except BaseException:
            record.failed += 1
            raise
        finally:
            if count:
                record.ns += clock() - start
                record.sampled += 1
            else:
                record.first_ns = clock() - start
        if not count:
            record.spec = spec_of(value)
        return value

    return timed


# Every iterator `track` was called on, while it lives (grain.monitoring lists them while
# other threads start more: a WeakRegistry, not a WeakSet).
_TRACKED = WeakRegistry()


def tracked_iterators() -> list[Any]:
    """The live iterators `track` started recording in."""
    return _TRACKED.alive()


def track(iterator: Any) -> Any:
    """Starts recording statistics in `iterator` and every iterator it reads from."""
    _TRACKED.add(iterator)
    pending = [iterator]
    while pending:
        it = pending.pop()
        fields = carried(it)
        if fields.stats_record is None:
            record = _Record()
            fields.stats_record = record
            # A stage that keeps its own counts (per chunk) needs no per-element timer.
            if not it._STATS_SELF_COUNTED:
                set_timer(it, _timer(type(it), record))
        pending.extend(it.__dict__.get("_parents", ()))
    return iterator


def _record_of(iterator: Any) -> Any:
    """The statistics `track` records in `iterator`, None if it is not tracked."""
    fields = carried_if_any(iterator)
    return None if fields is None else fields.stats_record


def _total_ns(iterator: Any) -> float:
    if iterator._STATS_SELF_COUNTED:
        return iterator._stats_counts()[1] * 1e9
    return carried(iterator).stats_record.estimated_ns()


def _stage_name(iterator: Any) -> str:
    dataset = iterator.__dict__.get("_dataset")
    text = repr(dataset) if dataset is not None else type(iterator).__name__
    source = iterator.__dict__.get("_source")
    if source is not None and hasattr(source, "_parents"):
        # to_iter_dataset runs a whole MapDataset chain: name its stages too.
        chain = []
        while True:
            chain.append(type(source).__name__)
            if len(source._parents) != 1:
                break
            source = source._parents[0]
        text += " reading " + " -> ".join(reversed(chain))
    return " ".join(text.split())


def collect(iterator: Any) -> PipelineStats:
    """The statistics recorded so far in `iterator`'s pipeline, source first."""
    stages: list[StageStats] = []

    def visit(it: Any, depth: int) -> None:
        parents = it.__dict__.get("_parents", ())
        branch = depth + 1 if len(parents) > 1 else depth
        for parent in parents:
            visit(parent, branch)
        record = _record_of(it)
        # A pass-through that a stage builds inside itself (mp_prefetch's in-order
        # stream) is timed, for its child's share, but not listed.
        if record is None or it._STATS_HIDDEN:
            return
        is_async = it._STATS_ASYNC
        # An async stage's parents run in another thread or process, not inside its calls.
        inner = 0.0 if is_async else sum(_total_ns(p) for p in parents if _record_of(p) is not None)
        total = _total_ns(it)
        stage = StageStats(
            name=_stage_name(it),
            elements=it._stats_counts()[0] if it._STATS_SELF_COUNTED else record.count,
            total_ns=round(total),
            self_ns=round(max(0.0, total - inner)),
            spec=record.spec,
            depth=depth,
            waits_on_background=is_async,
            waits_on_readers=it._STATS_READERS_UNTRACKED,
        )
        readers = it._stats_reader_times()
        if readers is not None:
            stage.waiting_s, stage.reader_cpu_s = readers
        stages.append(stage)

    visit(iterator, 0)
    return PipelineStats(stages)


def spec_of(value: Any) -> str:
    """A short text of the dtypes and shapes of a PyTree element (never raises)."""
    try:
        tree = map_with_path(_leaf_text, value)
    except TypeError:  # a leaf get_element_spec cannot describe: name its type
        return type(value).__name__
    return tree if isinstance(tree, str) else repr(tree).replace("'", "")


def _leaf_text(path: Any, leaf: Any) -> str:
    spec = leaf_spec(path, leaf)
    return f"{spec.dtype}{list(spec.shape)}"
