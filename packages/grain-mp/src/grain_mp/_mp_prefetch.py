"""`IterDataset.mp_prefetch`: the pipeline runs in worker processes, round robin out.

Two executions. Over a *positional pipeline* (one `to_iter_dataset` over a
MapDataset, then single-parent built-in IterDataset stages; not
`sequential_slice`), the output is the single-process one for every worker
count (`grain_mp._mp_positional`): the workers compute, position by position,
what the chain's positional prefix (map, filter, and map_with_index /
random_map before any filter) makes of each position, a dropped one a marker
(or blocks of b positions batched, for a batch(b) after a prefix that drops
nothing); the rest of the chain runs here on the merged stream; the state is
the plain pipeline's. Everything else runs per worker, as Grain does, which the
rest of this doc describes; a positional pipeline runs that way only to
continue a state of its format.

Per worker. Worker w of n runs the whole pipeline up to `mp_prefetch`, with every
`to_iter_dataset` reading only positions w, w+n, w+2n, ... of its MapDataset
(`grain_dataset.extension.iter_worker_slice`: only the worker's pipeline,
never one that its transformations build and iterate), or with `sequential_slice` the
w-th of n contiguous slices (sizes differing by at most one, larger first: 10
positions over 3 workers are [0..3], [4..6], [7..9], as in Grain). The parent takes one element from
each worker in turn (0, 1, ..., n-1, 0, ...), skipping workers that have ended,
so the output is deterministic and, for pipelines without many-to-one steps,
the single-process order.

Flow control. Each worker holds at most `per_worker_buffer_size` elements
ahead: it sends an element only against a credit, and the parent returns a
credit for each element it takes. With every element the worker sends its
pipeline's state after producing it.

Per-worker state: ``{"next_worker": k, "parents": [state_0, ..., state_{n-1}]}`` (plus
``"sequential_slice": 1`` with sequential slices, so that a state of one slicing
is refused by the other), the state
of each worker's pipeline as of the last element the parent took (a fresh
pipeline's state before its first). `set_state` stops the workers and starts
new ones at those states; a worker whose pipeline had ended reports its end
again at its first turn, so the restored round robin is the original one.

Transport. Numpy arrays of an element travel through shared memory segments
that each worker reuses (`grain_mp._transport`): the worker copies them in and
the parent hands out views of them (zero copy); once the consumer drops an
element, its segment's name goes back to the worker with the next credit. While
the consumer holds `_HELD_BY_CONSUMER` elements of a worker alive, the parent
copies further elements out instead (releasing their segments at once), so a
consumer that keeps everything (``list(ds)``) costs a copy, never an unbounded
number of segments; a worker also pickles elements past a hard bound of lent
segments. Everything but large arrays is pickled. Segment names say which run
owns them, so a start sweeps away what killed runs left (`grain_mp._sweep`).

Processes. Workers are forked (fast: the first element does not wait for a
fresh interpreter to import everything), except for pipelines that read
ArrayRecord files, whose reader does not survive fork: their workers start from
Python's fork server, the pipeline pickled by cloudpickle (`grain_mp._start`,
which also reads ``GRAIN_MP_START_METHOD``). Workers ignore SIGINT (Ctrl-C is the
parent's), exit when the parent goes away, and are daemons. An error in a
worker reaches the parent with the worker's traceback, and stops the others; a
worker that dies without a word (SIGKILL, OOM) is reported with its exit code
within a second of its death.

Stopping. Workers are asked, terminated, then killed, all at once, within two
seconds (`grain_mp._ending`): a worker stuck in user code cannot hold
`close()`. SIGTERM raises `_Terminated` (a SystemExit) in the worker, wherever
it is, so its ``finally`` clauses run. close() from another thread while
`next()` waits on a worker terminates the workers at once (`_interrupt_readers`):
the waiting `next()` sees its pipe end and raises, and the thread that closes
finishes the cleanup (pipes, segments) after it.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import multiprocessing
import os
import pickle
import signal
import time
import traceback
import warnings
import weakref
from multiprocessing import connection, resource_tracker
from typing import Any

from grain_dataset import DatasetIterator, IterDataset, unstamped
from grain_dataset.extension import iter_worker_slice, positional_split
from grain_mp import _start, worker_env
from grain_mp._ending import end_processes
from grain_mp._loader_positions import LoaderPositionsIterDataset
from grain_mp._mp_positional import MultiprocessPrefetchIterator
from grain_mp._options import MultiprocessingOptions
from grain_mp._round_robin import RoundRobinIterator
from grain_mp._sweep import parse_segment_name, process_alive, sweep_dead_segments
from grain_mp._transport import SegmentPool, SegmentReader


def _start_quietly(process: multiprocessing.process.BaseProcess) -> None:
    """Starts a worker, silencing JAX's fork warning.

    JAX registers an at-fork hook that warns whenever a process forks after
    jax is imported. Our forked workers run only the data pipeline and never
    touch jax's runtime, which is the case that warning is about; a pipeline
    that does call jax in its workers should set GRAIN_MP_START_METHOD=spawn.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning
        )
        process.start()


_POLL_S = 0.5
# What a worker that crashed in native code is told, with the known cause and its fixes.
_NATIVE_CRASH = (
    "(a crash in native code). Some C++ libraries do not survive fork: ArrayRecord's "
    "reader (riegeli) crashes or hangs in forked workers once the parent has opened an "
    "ArrayRecord file, and grain therefore starts the workers of pipelines over an "
    "ArrayRecordDataSource from a fork server, unless told to fork. If this pipeline "
    "reads such files (or uses another native library) through its own code, start the "
    f"workers with {_start.START_METHOD_ENV}=forkserver (or spawn); the main script must "
    "then build and iterate the pipeline under `if __name__ == '__main__':`. "
)
# Segments a worker may have lent beyond its buffer: elements the consumer still
# holds (zero-copy arrays); past that, elements are pickled instead.
_HELD_BY_CONSUMER = 4
_JOIN_S = 2.0

# Iterators with running workers. At exit they are stopped before multiprocessing
# terminates its daemon children, so that every segment is unlinked by its owner.
_RUNNING: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for iterator in list(_RUNNING):
        with contextlib.suppress(Exception):
            iterator._stop()


# Messages from a worker: (kind, ...).
_ELEMENTS, _END, _ERROR, _WARNING = "elements", "end", "error", "warning"
# A worker sends up to _GROUP elements in one message, none held longer than _GROUP_S.
_GROUP = 8
_GROUP_S = 0.0005


def mp_prefetch(
    parent: IterDataset[Any],
    options: MultiprocessingOptions | None = None,
    worker_init_fn: Any = None,
    sequential_slice: bool = False,
) -> IterDataset[Any]:
    """`parent.mp_prefetch(options, worker_init_fn, sequential_slice)`, as a function.

    The builder behind `IterDataset.mp_prefetch`: grain_dataset's hook imports
    it lazily as `grain_mp.mp_prefetch`, since the dataset layer may not import
    this one at import time.
    """
    if options is None:
        options = MultiprocessingOptions(num_workers=10)
    if not isinstance(options, MultiprocessingOptions):
        raise TypeError(
            f"`options` of mp_prefetch must be a grain.MultiprocessingOptions, got {options!r}."
        )
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError(f"`worker_init_fn` must be callable or None, got {worker_init_fn!r}.")
    if not isinstance(sequential_slice, bool):
        raise TypeError(f"`sequential_slice` must be a bool, got {sequential_slice!r}.")
    if options.num_workers == 0:
        return parent
    return MultiprocessPrefetchIterDataset(parent, options, worker_init_fn, sequential_slice)


class MultiprocessPrefetchIterDataset(IterDataset[Any]):
    """The parent pipeline, run in `options.num_workers` processes (see the module doc)."""

    # Marks it for `_start.check_not_nested`: a pipeline holding it cannot run in workers.
    _starts_worker_processes = True

    def _fingerprint_token(self) -> str | None:
        # The same as multithread_prefetch's: their states restore into each other.
        return "round_robin"

    def __init__(
        self,
        parent: IterDataset[Any],
        options: MultiprocessingOptions,
        worker_init_fn: Any = None,
        sequential_slice: bool = False,
    ):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                "mp_prefetch needs an IterDataset: call .to_iter_dataset() on the MapDataset "
                f"first, got {type(parent).__name__}."
            )
        _start.check_not_nested(parent)
        super().__init__(parent)
        self._options = options
        self._worker_init_fn = worker_init_fn
        self._sequential_slice = sequential_slice
        # The fork-unsafe reader that made the workers start without fork, if one did.
        self._method, self._fork_unsafe = _start.choose_method(parent)
        # Without fork: the pipeline and init fn as every start of the workers sends them.
        self._payload: bytes | None = None
        # A positional pipeline runs in order (`grain_mp._mp_positional`); the workers
        # run all of `parent` only for states of the per-worker format.
        self._in_order: IterDataset[Any] | None = None
        split = None if sequential_slice else positional_split(parent)
        if split is None:
            self._pickle_parent()
            return
        try:
            merged = LoaderPositionsIterDataset(
                split.units, split.read_options, options, worker_init_fn=worker_init_fn
            )
        except TypeError:
            self._pickle_parent()  # an unpicklable stage: named as the user wrote it
            raise
        self._in_order = split.assemble(merged)
        # How the workers start, once pickling was tried (it may fall back to fork).
        workers = merged._parents[0]
        self._method, self._fork_unsafe = workers._method, workers._fork_unsafe

    def _pickle_parent(self) -> None:
        """Pickles the whole parent pipeline, for workers that run it and do not fork."""
        if self._method == "fork" or self._payload is not None:
            return
        try:
            self._payload = _start.pickled(
                self._parents[0], self._worker_init_fn, self._start_cause
            )
        except TypeError as error:
            if self._fork_unsafe is None:
                raise  # the user asked for this method
            _start.warn_forking_anyway(self._fork_unsafe, error)
            self._method, self._fork_unsafe = "fork", None

    @property
    def _start_cause(self) -> str:
        """Why the workers start the way they do, for messages."""
        if self._fork_unsafe:
            return f"because the pipeline reads {self._fork_unsafe}, which does not survive fork"
        return f"as {_start.START_METHOD_ENV}={self._method} asks"

    def __iter__(self) -> DatasetIterator[Any]:
        if self._in_order is not None:
            return MultiprocessPrefetchIterator(self._in_order, self._per_worker_iterator)
        return _MultiprocessIterator(self)

    def _per_worker_iterator(self) -> DatasetIterator[Any]:
        self._pickle_parent()
        return _MultiprocessIterator(self)

    def __repr__(self) -> str:
        options = self._options
        sequential = ", sequential_slice=True" if self._sequential_slice else ""
        return (
            f"MultiprocessPrefetchIterDataset(num_workers={options.num_workers}, "
            f"per_worker_buffer_size={options.per_worker_buffer_size}{sequential})"
        )


class _Terminated(SystemExit):
    """SIGTERM in a worker: the parent ends it (`grain_mp._ending`); user code rarely catches it."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated(128 + signum)


def _worker_main(
    dataset: Any,
    worker_index: int,
    worker_count: int,
    worker_init_fn: Any,
    sequential_slice: bool,
    state: Any,
    out: connection.Connection,
    credits: connection.Connection,
    parent_pid: int,
    inherited: list[connection.Connection],
    buffer_size: int,
    min_shm_size: int = 0,
) -> None:
    """A worker: builds its share of the pipeline, then sends elements against credits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Whatever handler the parent had (a trainer's preemption hook, say) is not ours.
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A forked worker holds copies of the parent's ends of the earlier workers' pipes;
    # kept open, they would hide those workers' end-of-file from them.
    for conn in inherited:
        with contextlib.suppress(OSError):
            conn.close()
    # Room for the elements in flight plus a few the consumer still holds (zero copy).
    # The parent copies out past _HELD_BY_CONSUMER held elements; this bound is a safety net.
    # What the pool has to say (shared memory is full) is said in the parent, where the
    # user sees it and the user's warning filters apply.
    told: list[str] = []
    pool = SegmentPool(
        owner_pid=parent_pid,
        max_lent=buffer_size + 2 * _HELD_BY_CONSUMER,
        on_fallback=told.append,
    )
    # Cheap elements go in groups: one message (a pipe write, a wake-up of the
    # parent, a read) per element was a third of the transport cost.
    group: list[tuple[Any, Any]] = []
    produced: int | None = None  # elements of this worker's slice so far, once it runs
    try:
        if isinstance(dataset, bytes):  # not forked: the pipeline and init fn, pickled
            dataset, worker_init_fn = pickle.loads(dataset)
        if worker_init_fn is not None:
            worker_init_fn(worker_index, worker_count)
        # The slice belongs to this pipeline only: one that the user's code builds
        # and iterates inside the worker reads all of its data.
        iterator = iter_worker_slice(dataset, worker_index, worker_count, sequential_slice)
        # Its states travel inside the mp_prefetch iterator's, whose fingerprint covers them.
        iterator = unstamped(iterator)
        # DatasetOptions(min_shm_size=...): given above mp_prefetch (the parent's) or
        # within the worker's own pipeline; smaller arrays travel by copy.
        own = iterator._ctx.dataset_options
        min_shm_size = min_shm_size or (own.min_shm_size if own is not None else 0)
        if min_shm_size:
            pool.min_bytes = min_shm_size
        if state is not None:
            iterator.set_state(state)
        credit = _Credit(credits, parent_pid, pool)
        group_since = 0.0
        clock = time.perf_counter
        produced = 0
        while True:
            began = clock()
            try:
                element = next(iterator)
                produced += 1
            except StopIteration:
                if group:
                    out.send((_ELEMENTS, group))
                if not credit.take():
                    return
                out.send((_END, iterator.get_state()))
                # Stay until the parent closes the pipes, so it never mistakes the end for a death.
                while credit.wait():
                    pass
                return
            # Arrays travel through reused shared memory; the rest is pickled.
            item = (pool.encode(element), iterator.get_state())
            del element
            if told:
                out.send((_WARNING, told.pop()))
            if not credit.left:
                if group:  # never hold elements while waiting for the parent
                    out.send((_ELEMENTS, group))
                    group = []
                if not credit.take():
                    return
            else:
                credit.left -= 1
            now = clock()
            if not group:
                group_since = now
            group.append(item)
            del item
            # A slow element goes at once: the next one would keep it waiting.
            if now - began >= _GROUP_S or now - group_since >= _GROUP_S or len(group) >= _GROUP:
                out.send((_ELEMENTS, group))
                group = []
    except (BrokenPipeError, EOFError, _Terminated):
        return  # the parent went away or closed us: nothing to report to
    except BaseException as error:
        if group:  # the elements before the error come first, in order
            with contextlib.suppress(BrokenPipeError, EOFError, OSError):
                out.send((_ELEMENTS, group))
        where = _where(produced, worker_index, worker_count, sequential_slice)
        _send_error(out, where, error)
    finally:
        pool.close()


class _Credit:
    """The worker's side of flow control: how many more elements it may send.

    A grant message is ``b"<count>"`` followed by the names (one per line) of
    segments the parent has decoded, which the pool takes back for reuse.
    """

    def __init__(self, conn: connection.Connection, parent_pid: int, pool: SegmentPool):
        self._conn = conn
        self._parent_pid = parent_pid
        # The consumer is this process's parent when forked, not when started by a fork
        # server (whose child it is): watch the parent it has now, and the consumer.
        self._ppid = os.getppid()
        self._pool = pool
        self.left = 0  # credits not used yet

    def take(self) -> bool:
        """Uses one credit, waiting for a grant if none is left; False when the parent is gone."""
        while not self.left:
            if not self.wait():
                return False
        self.left -= 1
        return True

    def wait(self) -> bool:
        """Receives one grant; False when the parent closed the pipe or is gone."""
        while not self._conn.poll(_POLL_S):
            if os.getppid() != self._ppid or not process_alive(self._parent_pid):
                return False
        try:
            message = self._conn.recv_bytes()
        except (EOFError, OSError):
            return False
        count, *released = message.decode().split("\n")
        self.left += int(count)
        if released:
            self._pool.reclaim(released)
        return True


def _where(produced: int | None, index: int, count: int, sequential: bool) -> str:
    """Which element a worker failed on, in its slice and, where known, in the pipeline."""
    if produced is None:
        return "while starting its pipeline"
    where = f"on element {produced} of its slice"
    if not sequential:  # worker i reads elements i, i + count, i + 2 * count, ...
        where += f" (element {index + produced * count} of the pipeline it runs)"
    return where


def _send_error(out: connection.Connection, where: str, error: BaseException) -> None:
    # The worker's own frames, for the parent's note; the message and the notes come
    # with the pickled error, and the loop above (this file) is not the user's business.
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename != __file__]
    text = f"{where}; where it raised:\n" + "".join(traceback.format_list(frames))
    try:
        blob: bytes | None = pickle.dumps(error)
    except Exception:  # an exception that cannot cross processes still gets its text across
        blob = None
        text += "".join(traceback.format_exception_only(error))
    # "TypeName: message", for the parent's RuntimeError if the error cannot be rebuilt there.
    summary = "".join(traceback.format_exception_only(error)).strip()
    with contextlib.suppress(BrokenPipeError, EOFError, OSError):
        out.send((_ERROR, blob, summary, text))


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, process: Any, out: connection.Connection, credits: connection.Connection):
        self.process = process
        self.out = out
        self.credits = credits

    def grant(self, count: int, released: list[str]) -> None:
        """Lets the worker send `count` more elements and reuse the `released` segments."""
        message = "\n".join([str(count), *released]).encode()
        # A worker that failed is reported by the next receive, with its exit code.
        with contextlib.suppress(BrokenPipeError, OSError):
            self.credits.send_bytes(message)

    def close_pipes(self) -> None:
        """Asks the worker to stop: it sees the end of its credits (or a broken pipe)."""
        for conn in (self.credits, self.out):
            with contextlib.suppress(OSError):
                conn.close()

    def reap(self) -> None:
        """Joins and releases the process, once `end_processes` has ended it."""
        process = self.process
        with contextlib.suppress(ValueError):  # closed already
            process.join(0.1)
            process.close()  # ValueError if it outlived even SIGKILL: left to multiprocessing


def _stop_workers(workers: list[_Worker]) -> None:
    """Asks, terminates, then kills `workers`, all at once (`grain_mp._ending`)."""
    for worker in workers:
        worker.close_pipes()
    end_processes([worker.process for worker in workers])
    for worker in workers:
        worker.reap()


class _MultiprocessIterator(RoundRobinIterator):
    def __init__(self, dataset: MultiprocessPrefetchIterDataset):
        count = dataset._options.num_workers
        super().__init__(dataset, count)
        # Elements received in a group but not yet returned, per worker.
        self._inbox: list[collections.deque[tuple[Any, Any]]] = [
            collections.deque() for _ in range(count)
        ]
        self._reader: SegmentReader | None = None
        # Credits are returned in groups (one write per group, not per element), but
        # soon enough that a worker always has half its buffer to fill.
        self._grant_every = max(1, dataset._options.per_worker_buffer_size // 2)
        self._owed = [0] * count
        self._released: list[list[str]] = [[] for _ in range(count)]
        self._warned = False

    # -- worker life cycle -------------------------------------------------------------

    def _min_shm_size(self) -> int:
        options = self._ctx.dataset_options
        return options.min_shm_size if options is not None else 0

    def _start(self) -> list[_Worker]:
        _start.check_can_start_workers()
        dataset = self._dataset
        # Segments of runs whose processes were all killed (preemption) go first.
        sweep_dead_segments()
        self._reader = SegmentReader()
        self._owed = [0] * self._count
        self._released = [[] for _ in range(self._count)]
        self._held: list[set[str]] = [set() for _ in range(self._count)]
        self._by_pid: dict[int, int] = {}
        # typeshed's BaseContext lacks Process; the context of any start method has it.
        ctx = _start.context(dataset._method)
        init_fn = dataset._worker_init_fn
        payload: Any = dataset._payload
        if payload is None:  # forked: the workers inherit the pipeline and the init fn
            # Started before forking, the tracker is shared with the workers (RECIPES §8).
            resource_tracker.ensure_running()
            payload = dataset._parents[0]
        else:
            init_fn = None  # inside the payload
        workers: list[_Worker] = []
        try:
            main = worker_env.entry(_worker_main)  # accelerators hidden unless opted out
            for index in range(self._count):
                inherited = [conn for w in workers for conn in (w.out, w.credits)]
                out_read, out_write = ctx.Pipe(duplex=False)
                credit_read, credit_write = ctx.Pipe(duplex=False)
                inherited += [out_read, credit_write]
                process = ctx.Process(
                    target=main,
                    args=(
                        payload,
                        index,
                        self._count,
                        init_fn,
                        dataset._sequential_slice,
                        self._states[index],
                        out_write,
                        credit_read,
                        os.getpid(),
                        inherited if dataset._method == "fork" else [],
                        dataset._options.per_worker_buffer_size,
                        self._min_shm_size(),
                    ),
                    name=f"{_start.WORKER_NAME}-{index}",
                    daemon=True,
                )
                try:
                    _start_quietly(process)
                except Exception as error:
                    if dataset._method == "fork":
                        raise
                    cause = dataset._start_cause
                    raise _start.start_failed(error, dataset._method, cause) from error
                out_write.close()
                credit_read.close()
                worker = _Worker(process, out_read, credit_write)
                workers.append(worker)
                if not self._ended[index]:
                    worker.grant(dataset._options.per_worker_buffer_size, [])
            self._by_pid = {worker.process.pid: i for i, worker in enumerate(workers)}
            _RUNNING.add(self)
        except BaseException:
            _stop_workers(workers)
            raise
        return workers

    def _stop(self) -> None:
        _RUNNING.discard(self)
        for inbox in self._inbox:
            inbox.clear()  # read ahead, never returned: the states stay before them
        workers, self._readers = self._readers, None
        pids = [worker.process.pid for worker in workers or ()]
        _stop_workers(workers or [])
        reader, self._reader = self._reader, None
        if reader is not None:
            # After the workers: it unlinks every segment they made for us, sent or not.
            reader.close(creator_pids=pids)

    def _interrupt_readers(self, readers: list[_Worker]) -> list[Any]:
        # Only signals: the thread in next() owns the pipes and sees them end.
        end_processes([worker.process for worker in readers], ask_s=0.0)
        return []

    # -- reading -----------------------------------------------------------------------

    def _receive(self, index: int) -> tuple[Any, ...]:
        """The next message of worker `index`; raises if the worker died without one.

        A blocking read is enough: only the worker holds the write end of its
        pipe (the parent closed its copy, later workers close what they
        inherited), so the worker's death ends the pipe and the read with it.
        What it sent before dying is still delivered first.
        """
        worker = self._readers[index]  # type: ignore[index]
        try:
            return worker.out.recv()
        except EOFError:
            pass
        worker.process.join(_JOIN_S)
        code = worker.process.exitcode
        if code == 128 + signal.SIGTERM:  # `_on_sigterm`'s exit: SIGTERM from outside
            code = -signal.SIGTERM
        self._stop()
        how = (
            f"was killed by signal {-code} ({signal.Signals(-code).name})"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        crashed = code is not None and -code in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT)
        if crashed:
            why = _NATIVE_CRASH
        elif code is not None and code > 0 and self._dataset._method != "fork":
            # Before its first word: it failed while importing the main script again.
            why = (
                f"(started by the {self._dataset._method!r} start method, "
                f"{self._dataset._start_cause}, it imports the main script again: see its "
                "output above; a script must build and iterate the pipeline under "
                "`if __name__ == '__main__':`). "
            )
        else:
            why = "(killed from outside, or out of memory). "
        raise RuntimeError(
            f"grain worker {index} of {self._count} {how} without reporting an error "
            + why
            + "The other workers are stopped; restore the last checkpoint to continue."
        )

    def __next__(self) -> Any:
        if self._readers is None:
            if all(self._ended):
                raise StopIteration
            self._readers = self._started()  # it sets them too; this tells the type checker
        while not all(self._ended):
            index = self._next_worker
            if self._ended[index]:
                self._next_worker = (index + 1) % self._count
                continue
            inbox = self._inbox[index]
            if not inbox:
                message = self._receive(index)
                kind = message[0]
                if kind == _ELEMENTS:
                    inbox.extend(message[1])
            if inbox:
                payload, state = inbox.popleft()
                reader = self._reader
                held = self._held[index]
                # Zero copy: the arrays are views of the segment, which goes back to the
                # worker once they are garbage collected; past the bound, a copy.
                zero_copy = payload.segment is not None and len(held) < _HELD_BY_CONSUMER
                element = reader.decode(payload, copy=not zero_copy)  # type: ignore[union-attr]
                if zero_copy:
                    held.add(payload.segment)
                self._states[index] = state
                self._next_worker = (index + 1) % self._count
                # A segment freed now may be any worker's (the consumer drops elements in
                # any order): each name goes back to the worker that made it.
                for name in reader.take_released():  # type: ignore[union-attr]
                    owner = self._by_pid.get(parse_segment_name(name)[1])  # type: ignore[index]
                    if owner is not None:
                        self._released[owner].append(name)
                        self._held[owner].discard(name)
                self._owed[index] += 1
                if self._owed[index] >= self._grant_every:
                    self._readers[index].grant(self._owed[index], self._released[index])
                    self._owed[index], self._released[index] = 0, []
                return element
            if kind == _END:
                self._states[index] = message[1]
                self._ended[index] = True
                self._next_worker = (index + 1) % self._count
                continue
            if kind == _WARNING:
                self._warn_once(message[1])
                continue
            self._raise_worker_error(index, message)
        self._stop()
        raise StopIteration

    def _warn_once(self, text: str) -> None:
        """A worker's warning, issued here; each worker says it once, the user hears it once."""
        if not self._warned:
            self._warned = True
            warnings.warn(f"grain workers: {text}", RuntimeWarning, stacklevel=4)

    def _raise_worker_error(self, index: int, message: tuple[Any, ...]) -> None:
        _, blob, summary, text = message
        self._stop()
        error: BaseException | None = None
        if blob is not None:
            with contextlib.suppress(Exception):
                error = pickle.loads(blob)
        if not isinstance(error, BaseException):
            error = RuntimeError(f"grain worker {index} raised {summary}")
        # Its frames in the worker are in the note below; its notes (the stage, the
        # filtering's) came with it, and the consumer's frames are filtered as usual.
        error.add_note(f"grain worker {index} of {self._count} raised it {text.rstrip()}")
        raise error

    # -- the DatasetIterator contract --------------------------------------------------------

    def __repr__(self) -> str:
        return f"MultiprocessPrefetchIterator(workers={self._count}, next={self._next_worker})"
