"""`device_put`: move a pipeline's batches onto JAX devices ahead of the consumer.

Why it is built this way:

* One background thread does both jobs. It keeps `device_buffer_size`
  batches transferred ahead (``jax.device_put``); while that buffer is full it
  reads up to `cpu_buffer_size` more host batches from the parent (the
  `_HostBuffer`, through ThreadPrefetch's ``_read_ahead_step`` hook), so the reading
  and the transfer both overlap with the caller's step. A first version used a
  second thread for the host buffer: its extra hand-off per batch and the GIL
  contention of three runnable threads on two cores cost 10-20% of the
  transfer rate (benchmarks/device_put.py: 0.81-0.92x a plain loop, now
  1.02-1.19x).
* The device buffer is a `ThreadPrefetchDatasetIterator` of grain_dataset over
  ``host buffer -> transfer``. That iterator already stores,
  with each element, its parent's state right after that element, and reports
  the state of the last element *handed out*. Stacked, the state of the whole
  stage is the parent pipeline's state after the last batch the caller
  received: batches read or transferred ahead never show in a checkpoint, and a
  checkpoint is the same with or without `device_put`. Its error, end-of-data,
  `set_state` and shutdown rules (the parent's exception object re-raised at
  its position; close without waiting on a slow parent) carry over unchanged.
* The transfer thread does not wait for each copy to finish: ``jax.device_put``
  starts it (asynchronously where the runtime can) and the batch's arrays are
  ready by the time a computation needs them, as with any jax dispatch. The
  device buffer still bounds how many batches exist ahead of the caller, so
  device and host memory stay bounded by the two buffer sizes. Blocking on
  every batch in the thread cost ~15% of the throughput on the CPU benchmark
  and bought nothing.
* Interpreter exit: the threads are daemons that hold no reference to the
  iterator the caller sees, so dropping it stops them. A daemon thread still
  running when the interpreter finalizes is ended where it next takes the GIL;
  inside jax's C++ code (a transfer, or freeing a batch's arrays as the thread
  winds down) that aborts the process ("terminate called after throwing an
  instance of ''"). So a hook registered after jax is imported (atexit runs it
  before jax's own hooks, which tear the backends down) closes every live
  iterator, refuses new transfers and waits for all device_put threads, those
  of iterators closed just before exit included (up to `_EXIT_WAIT_S`).
  `__del__` swallows errors of a half torn-down interpreter. Nothing is
  printed at exit.
* jax is imported inside the functions that need it, never at module import,
  so ``import grain_jax`` stays light.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grain_dataset import (
    DatasetIterator,
    IterDataset,
    MapDataset,
    ThreadPrefetchDatasetIterator,
)
from grain_dataset.extension import WeakRegistry

if TYPE_CHECKING:
    import jax

__all__ = ["DevicePutIterDataset", "device_put"]

# How long the exit hook waits, in all, for device_put threads to finish.
_EXIT_WAIT_S = 5.0


def device_put(
    ds: IterDataset[Any],
    device: jax.Device | jax.sharding.Sharding,
    *,
    cpu_buffer_size: int = 4,
    device_buffer_size: int = 2,
) -> IterDataset[Any]:
    """Returns `ds` with every batch transferred to `device` ahead of time.

    A background thread keeps `cpu_buffer_size` batches of `ds` ready on the
    host, transfers them with ``jax.device_put`` and keeps
    `device_buffer_size` batches already transferred (or, where jax copies
    asynchronously, with their copy under way), so the transfer of the next
    batches overlaps with the caller's work on the current one. Each batch
    (a PyTree: dicts, tuples and lists of numpy arrays, nested) becomes the same
    PyTree of `jax.Array`s placed or sharded as `device` says. With a sharding
    that spans other processes' devices, each process's batch is its local part
    of the global array (``jax.make_array_from_process_local_data``).

    The iterator's state is the state of `ds` after the last batch returned to
    the caller (batches read or transferred ahead do not count), so restoring
    it continues exactly with the next batch. Closing or dropping the iterator,
    or breaking out of a loop over it, stops the thread.

    Args:
      ds: the IterDataset of host batches (call ``.to_iter_dataset()`` on a
        MapDataset first).
      device: a `jax.Device`, or a `jax.sharding.Sharding` such as
        ``NamedSharding(mesh, PartitionSpec('data'))``.
      cpu_buffer_size: how many host batches to read ahead (>= 1).
      device_buffer_size: how many batches to keep transferred ahead (>= 1).

    Returns:
      An IterDataset of PyTrees of `jax.Array`s.

    Example::

        mesh = jax.sharding.Mesh(np.array(jax.devices()), axis_names=("data",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        ds = grain.experimental.device_put(
            ds=ds, device=sharding, cpu_buffer_size=3, device_buffer_size=2
        )
        for batch in ds:
            state = train_step(state, batch)
    """
    return DevicePutIterDataset(
        ds, device, cpu_buffer_size=cpu_buffer_size, device_buffer_size=device_buffer_size
    )


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"`{name}` of device_put must be a positive int, got {type(value).__name__} {value!r}."
        )
    result = value.__index__()
    if result < 1:
        raise ValueError(f"`{name}` of device_put must be a positive int (>= 1), got {result}.")
    return result


def _check_device(device: Any) -> None:
    import jax

    if not isinstance(device, jax.Device | jax.sharding.Sharding):
        raise TypeError(
            "`device` of device_put must be a jax.Device (e.g. jax.devices()[0]) or a "
            "jax.sharding.Sharding (e.g. NamedSharding(mesh, PartitionSpec('data'))), "
            f"got {type(device).__name__} {device!r}."
        )


def _make_put(device: Any) -> Callable[[Any], Any]:
    """The function the transfer thread applies to each batch."""
    import jax

    if isinstance(device, jax.sharding.Sharding) and not device.is_fully_addressable:
        return lambda tree: _process_local_put(tree, device)
    return lambda tree: jax.device_put(tree, device)


def _process_local_put(tree: Any, sharding: jax.sharding.Sharding) -> Any:
    """Each leaf as the process-local part of a global array sharded by `sharding`."""
    import jax

    return jax.tree.map(lambda leaf: jax.make_array_from_process_local_data(sharding, leaf), tree)


class DevicePutIterDataset(IterDataset[Any]):
    """The parent's batches as `jax.Array`s on `device`, transferred ahead; see `device_put`."""

    def _fingerprint_token(self) -> str | None:
        return None  # its state is its parent's

    def __init__(
        self,
        parent: IterDataset[Any],
        device: Any,
        *,
        cpu_buffer_size: int = 4,
        device_buffer_size: int = 2,
    ):
        if not isinstance(parent, IterDataset):
            fix = (
                ": it is a MapDataset, call .to_iter_dataset() on it first"
                if isinstance(parent, MapDataset)
                else f", got {type(parent).__name__}"
            )
            raise TypeError(f"`ds` of device_put must be an IterDataset{fix}.")
        _check_device(device)
        cpu_buffer_size = _positive_int(cpu_buffer_size, "cpu_buffer_size")
        device_buffer_size = _positive_int(device_buffer_size, "device_buffer_size")
        super().__init__(parent)
        self._device = device
        self._cpu_buffer_size = cpu_buffer_size
        self._device_buffer_size = device_buffer_size
        self._put = _make_put(device)
        _register_exit_hook()

    @property
    def device(self) -> Any:
        """The `jax.Device` or `jax.sharding.Sharding` the batches go to."""
        return self._device

    @property
    def cpu_buffer_size(self) -> int:
        """How many host batches are read ahead."""
        return self._cpu_buffer_size

    @property
    def device_buffer_size(self) -> int:
        """How many batches are kept transferred ahead."""
        return self._device_buffer_size

    def __iter__(self) -> DevicePutDatasetIterator:
        return DevicePutDatasetIterator(self, iter(self._parents[0]))

    def __repr__(self) -> str:
        return (
            f"DevicePutIterDataset(device={self._device!r}, "
            f"cpu_buffer_size={self._cpu_buffer_size}, "
            f"device_buffer_size={self._device_buffer_size})"
        )


class _Label:
    """Names an inner stage in statistics (`stats()`) without being a dataset."""

    __slots__ = ("_text",)

    def __init__(self, text: str):
        self._text = text

    def __repr__(self) -> str:
        return self._text


class _TransferIterator(DatasetIterator[Any]):
    """Applies the transfer to each batch of `parent`; its state is the parent's."""

    def __init__(self, parent: _HostBuffer, put: Callable[[Any], Any], label: _Label):
        super().__init__(parent)
        self._parent = parent
        self._put = put
        self._dataset = label

    def __next__(self) -> Any:
        value = next(self._parent)
        _exit_guard.enter()
        try:
            return self._put(value)
        except Exception as error:
            error.add_note(f"grain: raised while transferring a batch in {self._dataset!r}")
            raise
        finally:
            del value
            _exit_guard.leave()

    _reads_ahead = True

    def _read_ahead_step(self) -> bool:
        """The host buffer's read-ahead, offered to the device buffer's thread."""
        return self._parent._read_ahead_step()

    def get_state(self) -> dict[str, Any]:
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)

    def __repr__(self) -> str:
        return f"_TransferIterator({self._dataset!r})"


class _HostBuffer(DatasetIterator[Any]):
    """Up to `capacity` batches of `parent` read ahead, by the transfer thread itself.

    It has no thread: the device buffer's producer calls `_read_ahead_step` while
    the device buffer is full, then `__next__` when there is room. Each read-ahead
    entry keeps the parent's state after it (or the error the parent raised,
    raised again at its position), so the state stays the state after the last
    batch returned.
    """

    def __init__(self, parent: DatasetIterator[Any], capacity: int, label: _Label):
        super().__init__(parent)
        self._parent = parent
        self._capacity = capacity
        self._dataset = label
        self._ahead: collections.deque[tuple[bool, Any, Any]] = collections.deque()
        self._state: Any = None  # the state after the last batch returned; None: the parent's

    _reads_ahead = True

    def _read_ahead_step(self) -> bool:
        """Reads one more batch ahead; False when the buffer is full or the parent is done."""
        ahead = self._ahead
        if len(ahead) >= self._capacity or (ahead and not ahead[-1][0]):
            return False
        try:
            value = next(self._parent)
        except BaseException as error:  # StopIteration too: raised again at its position
            ahead.append((False, error, None))
            return False
        try:
            state = self._parent.get_state()
        except BaseException as error:
            ahead.append((False, error, None))
            return False
        ahead.append((True, value, state))
        return True

    def __next__(self) -> Any:
        if not self._ahead:
            value = next(self._parent)
            self._state = None
            return value
        ok, value, state = self._ahead.popleft()
        if not ok:
            self._state = None
            raise value
        self._state = state
        return value

    def get_state(self) -> dict[str, Any]:
        return self._parent.get_state() if self._state is None else self._state

    def set_state(self, state: dict[str, Any]) -> None:
        self._ahead.clear()
        self._state = None
        self._parent.set_state(state)

    def __repr__(self) -> str:
        return f"_HostBuffer({self._dataset!r})"


class DevicePutDatasetIterator(ThreadPrefetchDatasetIterator[Any]):
    """The iterator of `DevicePutIterDataset`.

    It is the device buffer: a `ThreadPrefetchDatasetIterator` whose thread
    transfers batches and, while the device buffer is full, reads host batches
    ahead into the `_HostBuffer`. Its state is the parent's state after the
    last batch returned; `close()` (or dropping it) stops the thread.
    """

    def __init__(self, dataset: DevicePutIterDataset, parent: DatasetIterator[Any]):
        host = _HostBuffer(
            parent,
            dataset.cpu_buffer_size,
            _Label(f"device_put host buffer(cpu_buffer_size={dataset.cpu_buffer_size})"),
        )
        transfer = _TransferIterator(
            host, dataset._put, _Label(f"device_put transfer(device={dataset.device!r})")
        )
        super().__init__(transfer, dataset.device_buffer_size, dataset=dataset)
        self._host = host
        _live_iterators.add(self)

    def _producer_threads(self) -> list[threading.Thread]:
        """This iterator's and the host buffer's threads, running or winding down."""
        found = []
        for iterator in (self, self._host):
            for name in ("_thread", "_stale"):
                thread = iterator.__dict__.get(name)
                if thread is not None:
                    found.append(thread)
        return found

    def close(self) -> None:
        """Stops both background threads and closes the parent; idempotent."""
        # The threads end on their own after close (the device buffer's closes the
        # host buffer as it exits); remembered so that the exit hook can wait for them.
        with contextlib.suppress(Exception):  # at exit the module may be half torn down
            for thread in self._producer_threads():
                _closing_threads.add(thread)
        super().close()

    def __repr__(self) -> str:
        dataset = self._dataset
        return (
            f"DevicePutDatasetIterator(device={dataset.device!r}, "
            f"cpu_buffer_size={dataset.cpu_buffer_size}, "
            f"device_buffer_size={dataset.device_buffer_size})"
        )


# -- interpreter exit ------------------------------------------------------------------


class _ExitGuard:
    """Counts transfers in flight; after `shut()` no new one starts."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._running = 0
        self._shut = False

    def enter(self) -> None:
        with self._cond:
            if self._shut:
                raise RuntimeError("device_put: the interpreter is exiting, no transfer starts.")
            self._running += 1

    def leave(self) -> None:
        with self._cond:
            self._running -= 1
            if self._shut and not self._running:
                self._cond.notify_all()

    def shut(self, deadline: float) -> None:
        """Refuses new transfers and waits (until `deadline`) for those running."""
        with self._cond:
            self._shut = True
            self._cond.wait_for(
                lambda: not self._running, timeout=max(0.0, deadline - time.monotonic())
            )


_exit_guard = _ExitGuard()
_live_iterators = WeakRegistry()  # DevicePutDatasetIterators
# Producer threads of closed iterators that may still be winding down.
_closing_threads = WeakRegistry()
_hook_lock = threading.Lock()
_hook_registered = False


def _at_exit() -> None:
    """Stops every device_put thread before jax's exit hooks and finalization run.

    A daemon thread still running when the interpreter finalizes is ended where
    it next takes the GIL; inside jax's C++ code (a transfer, or freeing a
    batch's arrays) that aborts the process. So: refuse new transfers, close
    every live iterator and wait for all of their threads, up to `_EXIT_WAIT_S`.
    """
    with contextlib.suppress(Exception):
        deadline = time.monotonic() + _EXIT_WAIT_S
        for iterator in _live_iterators.alive():
            with contextlib.suppress(Exception):
                iterator.close()
        _exit_guard.shut(deadline)
        for thread in _closing_threads.alive():
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


def _register_exit_hook() -> None:
    # Called after `import jax`: atexit runs hooks last-registered first, so
    # this one runs before jax's (which clear the backends).
    global _hook_registered
    with _hook_lock:
        if not _hook_registered:
            atexit.register(_at_exit)
            _hook_registered = True
