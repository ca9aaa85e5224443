"""The thread executor: worker loops in threads of this process, elements handed over as they are.

It implements `grain_mp._executor.Executor` for multithread_prefetch and, on a
free-threaded interpreter (or when ``grain.config`` asks for it), for
mp_prefetch's workers, the DataLoader's and ElasticIterator's
(`grain_mp._executor.executor_kind`). Thread w of n runs exactly what worker
process w would: `worker_init_fn(w, n)` first, then its slice of the pipeline
(`iter_worker_slice`: positions w, w+n, ... of every `to_iter_dataset`, or the
w-th contiguous slice) from the state it was given. So the stream and the
states are the processes' own, and a checkpoint taken with one executor
restores on the other.

What threads save: the pipeline is never pickled (each thread iterates the
consumer's own pipeline objects, through iterators of its own) and an element
is never copied: the consumer gets the object the thread made, arrays
included. What they cost: with the GIL on, only work that releases it (I/O,
numpy, decoders in C) runs in parallel; pure Python work wants processes.

Flow control. Each thread holds at most `buffer_size` finished elements ahead
(at least one), each with its pipeline's state after it, and makes the next
meanwhile, as a worker process does: a credit per element sent, returned when
the consumer takes it. Elements go
over in groups of up to `_GROUP`, none held longer than `_GROUP_S` (half a
millisecond), and at once before the thread waits for credits.

Stopping. Threads are daemons holding no reference to the consumer's
iterator; `stop` sets their flags and drops what they read ahead. A thread
stuck in a transformation that never returns cannot be stopped: it stays,
holding its own iterator, until the transformation returns. `interrupt`
(close() from another thread while `collect` waits) makes `collect` return
CLOSED within `POLL_S`, and hands back the threads' pipelines so that their
own waits (read threads, say) end too.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

from grain_dataset import IterDataset, unstamped
from grain_dataset.extension import POLL_S, iter_worker_slice
from grain_mp._executor import CLOSED, FAILED
from grain_mp._mp_worker import ELEMENTS, END, where_it_failed

# A thread hands over up to _GROUP elements in one message, none held longer than
# _GROUP_S: one queue operation and one wake-up of the consumer per element was most
# of the cost of a cheap element (the worker processes group the same way).
_GROUP = 8
_GROUP_S = 0.0005


class _Credits:
    """Elements a thread may still make, given back by the consumer in batches.

    A queue of counts: its get and put are C code, where a Condition's wait and
    notify run Python code on every hand-off.
    """

    def __init__(self, count: int):
        self._counts: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._counts.put(count)

    def take_all(self, timeout: float) -> int:
        """Every credit there is, waiting up to `timeout` for one; 0 if none came."""
        try:
            count = self._counts.get(True, timeout)
        except queue.Empty:
            return 0
        with contextlib.suppress(queue.Empty):
            while True:
                count += self._counts.get_nowait()
        return count

    def give(self, count: int) -> None:
        self._counts.put(count)


class _Slice:
    """One thread's messages, credits and stop flag: all the thread shares with the consumer.

    The thread may hold `size` elements ahead (at least one) besides the one it
    is making: it spends a credit to send each element it made, and the
    consumer gives one back for each element it takes (in batches of half the
    buffer, and all it owes before it waits on the thread). Elements go in
    groups (see `_GROUP`), and always before the thread waits for credits.
    """

    def __init__(self, size: int):
        self.queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.credits = _Credits(max(1, size))
        self.left = 0  # credits the thread holds: only the thread touches it
        self.owed = 0  # elements taken, credits not given back yet: only the consumer
        self.batch = max(1, size // 2)
        self.stop = threading.Event()
        # The thread's pipeline, for close() from another thread to interrupt its waits.
        self.iterator: Any = None

    def credit(self, group: list[tuple[Any, Any]]) -> bool:
        """Spends a credit, first sending `group` if it must wait; False once stopped."""
        if not self.left:
            self.flush(group)  # never hold elements while waiting for the consumer
            while not self.left:
                if self.stop.is_set():
                    return False
                self.left = self.credits.take_all(POLL_S)
        self.left -= 1
        return True

    def flush(self, group: list[tuple[Any, Any]]) -> None:
        if group:
            self.queue.put((ELEMENTS, group.copy()))
            group.clear()


def _thread_main(
    pipeline: IterDataset[Any],
    index: int,
    count: int,
    sequential: bool,
    worker_init_fn: Any,
    state: Any,
    box: _Slice,
) -> None:
    iterator = None
    produced: int | None = None
    group: list[tuple[Any, Any]] = []
    try:
        if worker_init_fn is not None:
            worker_init_fn(index, count)
        # The outer iterator's fingerprint covers its states.
        iterator = iter_worker_slice(pipeline, index, count, sequential)
        iterator = box.iterator = unstamped(iterator)
        if state is not None:
            iterator.set_state(state)
        produced = 0
        clock = time.perf_counter
        since = 0.0
        while not box.stop.is_set():
            began = clock()
            try:
                element = next(iterator)
            except StopIteration:
                box.flush(group)
                box.queue.put((END, iterator.get_state()))
                return
            produced += 1
            after = iterator.get_state()
            # Made first, sent against a credit: the next element is made while this
            # one waits for the consumer, as in a worker process.
            if not box.credit(group):
                return
            if not group:
                since = began
            group.append((element, after))
            del element, after
            # A slow element goes at once: the next one would keep it waiting.
            if len(group) >= _GROUP or clock() - since >= _GROUP_S:
                box.flush(group)
    except BaseException as error:
        box.flush(group)  # the elements before the error come first, in order
        # Worded as a worker process's note is; the traceback is the thread's own.
        where = where_it_failed(produced, index, count, sequential)
        error.add_note(f"grain worker {index} of {count} raised it {where} (a worker thread)")
        box.queue.put((FAILED, error))
    finally:
        box.iterator = None
        if iterator is not None:
            with contextlib.suppress(Exception):
                iterator.close()


class ThreadExecutor:
    """Worker loops in threads (`grain_mp._executor.Executor`), one `_Slice` each.

    Args:
      pipeline: what each thread runs on its slice (an IterDataset).
      count: threads.
      buffer_size: finished elements each thread may hold ahead (at least one).
      sequential_slice: contiguous slices instead of strided ones.
      worker_init_fn: called as ``worker_init_fn(w, count)`` in thread w first.
      name: the threads' name prefix.
    """

    def __init__(
        self,
        pipeline: IterDataset[Any],
        count: int,
        buffer_size: int,
        sequential_slice: bool = False,
        worker_init_fn: Any = None,
        name: str = "grain-worker-thread",
    ):
        self._pipeline = pipeline
        self._count = count
        self._buffer_size = buffer_size
        self._sequential = sequential_slice
        self._worker_init_fn = worker_init_fn
        self._name = name
        self._boxes: list[_Slice] | None = None
        # Set by close() from another thread: no wait lasts.
        self._interrupted = False

    def start(self, states: Any, ended: Any, options: Any) -> list[_Slice]:
        boxes = []
        for index in range(self._count):
            box = _Slice(self._buffer_size)
            boxes.append(box)
            if ended[index]:
                continue
            thread = threading.Thread(
                target=_thread_main,
                args=(
                    self._pipeline,
                    index,
                    self._count,
                    self._sequential,
                    self._worker_init_fn,
                    states[index],
                    box,
                ),
                name=f"{self._name}-{index}",
                daemon=True,
            )
            thread.start()
        self._boxes = boxes
        return boxes

    def stop(self) -> None:
        boxes, self._boxes = self._boxes, None
        for box in boxes or ():
            box.stop.set()
            # Read ahead, never returned: the states stay before them.
            with contextlib.suppress(queue.Empty):
                while True:
                    box.queue.get_nowait()

    def interrupt(self) -> list[Any]:
        self._interrupted = True
        boxes = self._boxes or []
        for box in boxes:
            box.stop.set()
        # Their pipelines' own waits (read threads of to_iter_dataset, say) end too.
        return [box.iterator for box in boxes if box.iterator is not None]

    def collect(self, index: int) -> tuple[Any, ...]:
        """The next message of thread `index`; CLOSED once close() from another thread came."""
        box = self._boxes[index]  # type: ignore[index]
        if box.owed:  # the thread may be waiting for them
            box.credits.give(box.owed)
            box.owed = 0
        while True:
            try:
                return box.queue.get(
                    True, POLL_S
                )  # (ELEMENTS, group), (END, state), (FAILED, error)
            except queue.Empty:
                if self._interrupted:
                    return (CLOSED,)

    def take(self, index: int, payload: Any) -> Any:
        boxes = self._boxes
        if boxes is not None:
            box = boxes[index]
            box.owed += 1
            if box.owed >= box.batch:
                box.credits.give(box.owed)
                box.owed = 0
        return payload  # the element itself: threads share memory
