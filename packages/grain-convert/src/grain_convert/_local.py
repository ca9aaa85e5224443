"""The `local` executor: shard tasks in a pool of worker processes on this machine.

Workers are started by the fork server (no threads of the caller are
copied) and each runs one shard at a time, sent over its pipe, reporting
progress and then the shard's marker or its error. A worker that dies (killed,
out of memory) loses only the shard it held: the shard goes back to the
queue, up to `max_retries` times, and a new worker takes the dead one's place.
Workers ignore SIGINT: on Ctrl-C the parent stops them itself, so that the
interrupt surfaces once, in the parent.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import multiprocessing
import os
import signal
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any

from grain_convert._errors import ConversionError
from grain_convert._task import run_shard
from grain_mp import worker_env

_JOIN_TIMEOUT_S = 10.0


def _worker_main(connection: Connection, job: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    connection.send(("ready", -1, None))
    while True:
        shard = connection.recv()
        if shard is None:
            return
        index = shard["index"]
        try:
            marker = run_shard(job, shard, report=functools.partial(_report, connection, index))
        except ConversionError as error:
            connection.send(("error", index, str(error)))
        except Exception as error:  # a bug or an OS error: keep where it came from
            trace = "".join(traceback.format_exception(error))
            connection.send(("error", index, f"writing {shard['name']} failed: {error!r}\n{trace}"))
        else:
            connection.send(("done", index, marker))


def _report(connection: Connection, index: int, done: int) -> None:
    connection.send(("progress", index, done))


class _Worker:
    def __init__(self, context: Any, job: dict[str, Any]):
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=worker_env.entry(_worker_main),
            args=(child, job),
            name="grain-convert",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.shard: dict[str, Any] | None = None
        self.stopped = False
        self.ready = False
        self.exitcode: int | None = None

    def stop(self, graceful: bool) -> None:
        if self.stopped:
            return
        self.stopped = True
        if graceful and self.process.is_alive():
            with contextlib.suppress(OSError):
                self.connection.send(None)
            self.process.join(_JOIN_TIMEOUT_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(_JOIN_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.exitcode = self.process.exitcode
        self.process.close()
        self.connection.close()


def run_local(
    job: dict[str, Any],
    shards: list[dict[str, Any]],
    events: Any,
    *,
    workers: int | None = None,
    max_retries: int = 3,
) -> None:
    """Runs every shard task; calls ``events.progress(index, records)`` and
    ``events.done(index, marker)``; raises ConversionError on the first failure."""
    if not shards:
        return
    count = min(workers or os.cpu_count() or 1, len(shards))
    context = multiprocessing.get_context("forkserver")
    queue = collections.deque(shards)
    attempts: collections.Counter[int] = collections.Counter()
    pool: list[_Worker] = []
    finished = False
    try:
        pool = [_Worker(context, job) for _ in range(count)]
        while queue or any(worker.shard is not None for worker in pool):
            for worker in pool:
                if worker.shard is None and queue:
                    worker.shard = queue.popleft()
                    worker.connection.send(worker.shard)
            busy = [worker for worker in pool if worker.shard is not None]
            wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                while worker.shard is not None and worker.connection.poll():
                    if not _receive(worker, events):
                        break
                if worker.shard is not None and not worker.process.is_alive():
                    _retry_or_fail(worker, queue, attempts, max_retries)
                    pool[pool.index(worker)] = _Worker(context, job)
        finished = True
    finally:
        for worker in pool:
            worker.stop(graceful=finished)


def _receive(worker: _Worker, events: Any) -> bool:
    """Handles one message of the worker; False if its pipe is closed (it died)."""
    try:
        kind, index, payload = worker.connection.recv()
    except (EOFError, OSError):
        return False
    if kind == "ready":
        worker.ready = True
    elif kind == "progress":
        events.progress(index, payload)
    elif kind == "done":
        worker.shard = None
        events.done(index, payload)
    else:
        raise ConversionError(payload)
    return True


def _retry_or_fail(
    worker: _Worker,
    queue: collections.deque[dict[str, Any]],
    attempts: collections.Counter[int],
    max_retries: int,
) -> None:
    """Puts the shard of a dead worker back in the queue, unless it has died too often."""
    shard = worker.shard
    assert shard is not None
    worker.shard = None
    worker.stop(graceful=False)
    if not worker.ready:
        raise ConversionError(
            f"a worker process could not start (exit code {worker.exitcode}; its error is "
            "above on stderr): a script that calls convert (grain_convert.convert or "
            "grain.convert.convert) must do so under `if __name__ == '__main__':`, as worker "
            "processes import the main module"
        )
    attempts[shard["index"]] += 1
    if attempts[shard["index"]] > max_retries:
        raise ConversionError(
            f"the worker process writing {shard['name']} died {attempts[shard['index']]} "
            f"times (exit code {worker.exitcode}): see the system log (out of memory?)"
        )
    queue.appendleft(shard)
