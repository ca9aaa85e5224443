"""mp_prefetch's worker loop: what runs inside one worker process.

Worker w of n builds its share of the pipeline (`iter_worker_slice`: positions
w, w+n, ... of every `to_iter_dataset` of that pipeline, or the w-th
contiguous slice with `sequential_slice`), restores the state it was given,
then sends ``(encoded element, state after it)`` pairs against credits. Cheap
elements go in groups of up to `GROUP` (none held longer than `GROUP_S`);
arrays travel through the worker's reused shared memory segments
(`grain_mp._transport`). Messages to the parent, all tuples:

    (ELEMENTS, [(payload, state), ...])   elements in order
    (END, state)                          the slice ended (sent against a credit)
    (WARNING, text)                       said once by the parent, in its process
    (ERROR, pickled error or None, summary, where and traceback)

The parent side (`grain_mp._process_executor`) starts this loop and reads the
pipe; nothing here touches the parent's objects.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
import traceback
from multiprocessing import connection
from typing import Any

from grain_dataset import unstamped
from grain_dataset.extension import iter_worker_slice, set_batch_allocator
from grain_mp._segment_pool import SegmentPool
from grain_mp._sweep import process_alive

_POLL_S = 0.5
# Elements of one worker the consumer may hold as zero-copy views; past that the
# parent copies. device_put's default buffers hold up to 8 batches alive (4 read
# ahead, 2 transferred, the one in transfer, the caller's; on CPU jax aliases the
# views instead of copying), so a bound of 4 made the parent copy 5-15% of the
# batches under it (2 workers, a consumer slower than the pipeline).
HELD_BY_CONSUMER = 8

# Messages from a worker: (kind, ...).
ELEMENTS, END, ERROR, WARNING = "elements", "end", "error", "warning"
# A worker sends up to _GROUP elements in one message, none held longer than _GROUP_S.
_GROUP = 8
_GROUP_S = 0.0005
# Batches stacked straight into shared memory (`SegmentPool.empty`), so that encode
# need not copy them; False: into numpy's memory, copied by encode (A/B benchmarks).
_STACK_INTO_SHM = True


class _Terminated(SystemExit):
    """SIGTERM in a worker: the parent ends it (`grain_mp._ending`); user code rarely catches it."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated(128 + signum)


def worker_main(
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
    # The parent copies out past HELD_BY_CONSUMER held elements; this bound is a safety net.
    # What the pool has to say (shared memory is full) is said in the parent, where the
    # user sees it and the user's warning filters apply.
    told: list[str] = []
    pool = SegmentPool(
        owner_pid=parent_pid,
        max_lent=buffer_size + 2 * HELD_BY_CONSUMER,
        on_fallback=told.append,
    )
    # Cheap elements go in groups: one message (a pipe write, a wake-up of the
    # parent, a read) per element was a third of the transport cost.
    group: list[tuple[Any, Any]] = []
    produced: int | None = None  # elements of this worker's slice so far, once it runs
    if _STACK_INTO_SHM:
        # The default batch_fn stacks large arrays into the pool's segments; encode
        # then lends a batch that arrives whole as it is, with no second copy.
        set_batch_allocator(pool.empty)
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
                    _send(out, (ELEMENTS, group))
                if not credit.take():
                    return
                out.send((END, iterator.get_state()))
                # Stay until the parent closes the pipes, so it never mistakes the end for a death.
                while credit.wait():
                    pass
                return
            # Arrays travel through reused shared memory; the rest is pickled.
            item = (pool.encode(element), iterator.get_state())
            del element
            if told:
                out.send((WARNING, told.pop()))
            if not credit.left:
                if group:  # never hold elements while waiting for the parent
                    _send(out, (ELEMENTS, group))
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
                _send(out, (ELEMENTS, group))
                group = []
    except (BrokenPipeError, EOFError, _Terminated):
        return  # the parent went away or closed us: nothing to report to
    except BaseException as error:
        if group:  # the elements before the error come first, in order
            with contextlib.suppress(BrokenPipeError, EOFError, OSError):
                _send(out, (ELEMENTS, group))
        where = where_it_failed(produced, worker_index, worker_count, sequential_slice)
        _send_error(out, where, error)
    finally:
        set_batch_allocator(None)
        pool.close()


def _send(out: connection.Connection, message: tuple[Any, ...]) -> None:
    """Sends `message` pickled plainly: the parent's ``recv()`` reads it as any message.

    ``Connection.send`` pickles with multiprocessing's ForkingPickler, which copies
    its dispatch table for every message (a third of the cost of a group of
    elements); nothing sent here needs its reducers (no pipes, no sockets).
    """
    out.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


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


def where_it_failed(produced: int | None, index: int, count: int, sequential: bool) -> str:
    """Which element a worker failed on, in its slice and, where known, in the pipeline."""
    if produced is None:
        return "while starting its pipeline"
    where = f"on element {produced} of its slice"
    if not sequential:  # worker i reads elements i, i + count, i + 2 * count, ...
        where += f" (element {index + produced * count} of the pipeline it runs)"
    return where


def error_message(
    where: str, error: BaseException, hidden: tuple[str, ...] = ()
) -> tuple[Any, ...]:
    """The (ERROR, pickled error or None, summary, where and traceback) message of `error`.

    Frames of this file and of `hidden` (another executor's loop) are left out:
    they are not the user's business.
    """
    # The worker's own frames, for the parent's note; the message and the notes come
    # with the pickled error.
    skip = (__file__, *hidden)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename not in skip]
    text = f"{where}; where it raised:\n" + "".join(traceback.format_list(frames))
    try:
        blob: bytes | None = pickle.dumps(error)
    except Exception:  # an exception that cannot cross processes still gets its text across
        blob = None
        text += "".join(traceback.format_exception_only(error))
    # "TypeName: message", for the parent's RuntimeError if the error cannot be rebuilt there.
    summary = "".join(traceback.format_exception_only(error)).strip()
    return (ERROR, blob, summary, text)


def _send_error(out: connection.Connection, where: str, error: BaseException) -> None:
    message = error_message(where, error)
    with contextlib.suppress(BrokenPipeError, EOFError, OSError):
        out.send(message)
