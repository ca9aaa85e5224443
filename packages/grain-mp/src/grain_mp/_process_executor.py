"""The process executor: worker loops in worker processes, elements through shared memory.

It implements `grain_mp._executor.Executor` for mp_prefetch's per-worker
execution (`grain_mp._mp_parent`). Each worker runs `grain_mp._mp_worker.
worker_main` and has two pipes: its messages come up one, credits go down
the other.

Flow control. Each worker holds at most `per_worker_buffer_size` elements
ahead: it sends an element only against a credit, and `take` returns a credit
for each element handed out, in groups (one write per half buffer).

Transport. Numpy arrays of an element travel through shared memory segments
that each worker reuses (`grain_mp._transport`): the worker copies them in and
`take` hands out views of them (zero copy); once the consumer drops an
element, its segment's name goes back to the worker with the next credit. While
the consumer holds `HELD_BY_CONSUMER` elements of a worker alive, further
elements are copied out instead (releasing their segments at once), so a
consumer that keeps everything (``list(ds)``) costs a copy, never an unbounded
number of segments; a worker also pickles elements past a hard bound of lent
segments. Everything but large arrays is pickled. Segment names say which run
owns them, so a start sweeps away what killed runs left (`grain_mp._sweep`).
How often a batch's bytes are copied on the way to a device, and where:
docs/multiprocessing.md, "Copies".

Processes. Workers are forked (fast: the first element does not wait for a
fresh interpreter to import everything), except for pipelines that read
ArrayRecord files, whose reader does not survive fork: their workers start from
Python's fork server, the pipeline pickled by cloudpickle (`grain_mp._start`,
which also reads ``GRAIN_MP_START_METHOD``). Every worker process starts in
`ProcessExecutor.start` (`_start_quietly`). Workers ignore SIGINT (Ctrl-C is
the parent's), exit when the parent goes away, and are daemons. A worker that
dies without a word (SIGKILL, OOM) is reported by `collect` with its exit code.

Stopping. Workers are asked, terminated, then killed, all at once, within two
seconds (`grain_mp._ending`): a worker stuck in user code cannot hold
`close()`. `interrupt` (close() from another thread while `next()` waits on a
worker) only signals: the waiting `collect` sees its pipe end and raises, and
the thread that closes finishes the cleanup (pipes, segments) after it.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import warnings
from multiprocessing import connection, resource_tracker
from typing import Any

from grain_dataset.extension import WeakRegistry
from grain_mp import _start, worker_env
from grain_mp._ending import end_processes
from grain_mp._executor import FAILED
from grain_mp._mp_worker import HELD_BY_CONSUMER, worker_main
from grain_mp._segment_reader import SegmentReader
from grain_mp._sweep import sweep_dead_segments

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
_JOIN_S = 2.0

# Executors with running workers. At exit they are stopped before multiprocessing
# terminates its daemon children, so that every segment is unlinked by its owner (a
# WeakRegistry: a thread may start workers while the hook lists them).
_RUNNING = WeakRegistry()


@atexit.register
def _stop_all_at_exit() -> None:
    for executor in _RUNNING.alive():
        with contextlib.suppress(Exception):
            executor.stop()


def _start_quietly(process: multiprocessing.process.BaseProcess) -> None:
    """Starts a worker, silencing the two warnings about our deliberate fork.

    JAX registers an at-fork hook that warns whenever a process forks after
    jax is imported. Our forked workers run only the data pipeline, on the CPU
    (`worker_env`), and never use the parent's jax backends, which is the case
    that warning is about; a pipeline that does call jax in its workers should
    set GRAIN_MP_START_METHOD=forkserver (or spawn).

    Python 3.12+ warns (DeprecationWarning) at every fork of a process that has
    more than one OS thread, counted from /proc: jax's and BLAS's native pools,
    a thread prefetch's daemons and pytest-xdist's I/O thread all count, busy or
    not. Forking is our documented default (`grain_mp._start`); the one reader
    known not to survive it (ArrayRecord's) makes the workers start from the
    fork server instead, and GRAIN_MP_START_METHOD is the user's way out for
    anything else. The warning names neither grain nor that switch (it points
    into multiprocessing), so here it would only be noise, or an error under
    ``-W error`` and pytest's warnings-as-errors. Filtered for this call only,
    by its message: a fork elsewhere in the program still warns.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning
        )
        warnings.filterwarnings(
            "ignore",
            message=r"This process \(pid=\d+\) is multi-threaded, use of fork\(\)",
            category=DeprecationWarning,
        )
        process.start()


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


class ProcessExecutor:
    """Runs `dataset`'s pipeline in `count` worker processes (see the module doc).

    `dataset` is mp_prefetch's per-worker stage (`grain_mp._mp_parent.
    ProcessWorkersIterDataset`): its parent is the pipeline, and it knows how
    the workers start (`_method`, `_payload`, `_start_cause`).
    """

    def __init__(self, dataset: Any, count: int):
        self._dataset = dataset
        self._count = count
        self._buffer_size = dataset._options.per_worker_buffer_size
        # Credits are returned in groups (one write per group, not per element), but
        # soon enough that a worker always has half its buffer to fill.
        self._grant_every = max(1, self._buffer_size // 2)
        self._workers: list[_Worker] | None = None
        self._reader: SegmentReader | None = None
        self._owed = [0] * count
        self._released: list[list[str]] = [[] for _ in range(count)]
        self._held: list[set[str]] = [set() for _ in range(count)]
        self._owner: dict[str, int] = {}  # segment name -> the worker it came from

    def start(self, states: Any, ended: Any, options: Any) -> list[_Worker]:
        _start.check_can_start_workers()
        dataset = self._dataset
        count = self._count
        # Segments of runs whose processes were all killed (preemption) go first.
        sweep_dead_segments()
        self._reader = SegmentReader()
        self._owed = [0] * count
        self._released = [[] for _ in range(count)]
        self._held = [set() for _ in range(count)]
        self._owner = {}
        # DatasetOptions(min_shm_size=...) given above mp_prefetch; smaller arrays copy.
        min_shm_size = options.min_shm_size if options is not None else 0
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
            main = worker_env.entry(worker_main)  # accelerators hidden unless opted out
            for index in range(count):
                inherited = [conn for w in workers for conn in (w.out, w.credits)]
                out_read, out_write = ctx.Pipe(duplex=False)
                credit_read, credit_write = ctx.Pipe(duplex=False)
                inherited += [out_read, credit_write]
                process = ctx.Process(
                    target=main,
                    args=(
                        payload,
                        index,
                        count,
                        init_fn,
                        dataset._sequential_slice,
                        states[index],
                        out_write,
                        credit_read,
                        os.getpid(),
                        inherited if dataset._method == "fork" else [],
                        self._buffer_size,
                        min_shm_size,
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
                if not ended[index]:
                    worker.grant(self._buffer_size, [])
            self._workers = workers
            _RUNNING.add(self)
        except BaseException:
            _stop_workers(workers)
            raise
        return workers

    def stop(self) -> None:
        _RUNNING.discard(self)
        workers, self._workers = self._workers, None
        pids = [worker.process.pid for worker in workers or ()]
        _stop_workers(workers or [])
        reader, self._reader = self._reader, None
        if reader is not None:
            # After the workers: it unlinks every segment they made for us, sent or not.
            reader.close(creator_pids=pids)

    def interrupt(self) -> list[Any]:
        # Only signals: the thread in collect() owns the pipes and sees them end.
        workers = self._workers
        end_processes([worker.process for worker in workers or ()], ask_s=0.0)
        return []

    def collect(self, index: int) -> tuple[Any, ...]:
        """The next message of worker `index`; (FAILED, error), stopped, if it died without one.

        A blocking read is enough: only the worker holds the write end of its
        pipe (the parent closed its copy, later workers close what they
        inherited), so the worker's death ends the pipe and the read with it.
        What it sent before dying is still delivered first.
        """
        worker = self._workers[index]  # type: ignore[index]
        try:
            return worker.out.recv()
        except EOFError:
            pass
        worker.process.join(_JOIN_S)
        code = worker.process.exitcode
        if code == 128 + signal.SIGTERM:  # the worker's SIGTERM exit: SIGTERM from outside
            code = -signal.SIGTERM
        self.stop()
        how = (
            f"was killed by signal {-code} ({signal.Signals(-code).name})"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        crashed = code is not None and -code in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT)
        method = self._dataset._method
        if crashed:
            why = _NATIVE_CRASH
        elif code is not None and code > 0 and method != "fork":
            # Before its first word: it failed while importing the main script again.
            why = (
                f"(started by the {method!r} start method, "
                f"{self._dataset._start_cause}, it imports the main script again: see its "
                "output above; a script must build and iterate the pipeline under "
                "`if __name__ == '__main__':`). "
            )
        else:
            why = "(killed from outside, or out of memory). "
        error = RuntimeError(
            f"grain worker {index} of {self._count} {how} without reporting an error "
            + why
            + "The other workers are stopped; restore the last checkpoint to continue."
        )
        return (FAILED, error)

    def take(self, index: int, payload: Any) -> Any:
        reader: SegmentReader = self._reader  # type: ignore[assignment]
        # Views dropped since the last take go back first, so that `held` counts only
        # what the consumer still holds: counted late, a consumer holding exactly the
        # bound (device_put's buffers) would get copies it does not need.
        self._collect(reader)
        held = self._held[index]
        name = payload.segment
        # Batches stacked into segments of their own may bring more (`Payload.own`).
        own = payload.own
        # Zero copy: the arrays are views of the segment, which goes back to the
        # worker once they are garbage collected; past the bound, a copy.
        zero_copy = (name is not None or bool(own)) and len(held) < HELD_BY_CONSUMER
        element = reader.decode(payload, copy=not zero_copy)
        if name is not None:
            self._owner[name] = index
            if zero_copy:
                held.add(name)
        for _, other, _ in own:
            self._owner[other] = index
            if zero_copy:
                held.add(other)
        if not zero_copy and (name is not None or own):
            self._collect(reader)  # copied out: the segments are free at once
        self._owed[index] += 1
        if self._owed[index] >= self._grant_every:
            self._workers[index].grant(self._owed[index], self._released[index])  # type: ignore[index]
            self._owed[index], self._released[index] = 0, []
        return element

    def _collect(self, reader: SegmentReader) -> None:
        """Sends each segment freed since the last call back to the worker that made it.

        The consumer drops elements in any order, so a name freed now may be any
        worker's; `_owner` remembers whose (no parsing of names per element).
        """
        for name in reader.take_released():
            owner = self._owner.get(name)  # every name released was decoded in `take`
            if owner is None:
                continue
            self._released[owner].append(name)
            self._held[owner].discard(name)
