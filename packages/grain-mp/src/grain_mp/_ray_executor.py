"""The Ray executor: worker loops on Ray actors, results through Ray's object store.

It implements `grain_mp._executor.Executor` for mp_prefetch's workers when
their options say ``executor=RayWorkers(...)`` (`grain_mp._ray_options`).
Worker w of n runs on one actor exactly what worker process w would:
`worker_init_fn(w, n)`, then its slice of the pipeline (`iter_worker_slice`)
from the state it was given. So the stream and the states are the local
workers', and over a positional pipeline (`grain_mp._mp_positional`) a
checkpoint restores with any number of actors, processes, or none.

Pull, not push. The consumer asks each actor for a group of elements
(`_RayWorker.produce`: up to `_GROUP` elements, a byte share, or `_GROUP_S`
seconds, at least one element) and keeps `_DEPTH` such calls outstanding per
actor: one computing, one queued behind it, so the actor never waits for the
consumer and never runs further ahead. Bytes in flight are therefore bounded
by ``RayWorkers.max_bytes_in_flight`` (split into a share per call), plus one
element per call. Results travel as Ray objects: small ones inline in the
reply, large ones through the object store, whose numpy arrays ``ray.get``
returns without a copy (read-only views of the store, released once dropped).

Faults. The executor remembers, per worker, the state after the last element
it handed to the consumer. When a call fails because the actor or the node
holding its result went away (any `ray.exceptions.RayError` but a task error),
the actor is killed for good, a new one starts at that state, and the calls
are issued again: the elements the old actor computed but the consumer never
received are computed again, those it received are not, and the consumer sees
a delay. Each worker may be replaced `RayWorkers.max_restarts` times per run.
Starting actors (at start or as a replacement) waits at most
`RayWorkers.start_timeout_s`; an actor that asks for more CPUs than any node
has fails at once. Both raise a RuntimeError naming the resources.

Accelerators. Actors get `grain_mp.worker_env`'s variables in their runtime
environment (JAX on the CPU, CUDA and HIP devices hidden) and apply them again
before unpickling the pipeline, as worker processes do.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import pickle
import sys
import time
from typing import Any

import numpy as np

from grain_dataset import unstamped
from grain_dataset.extension import POLL_S, iter_worker_slice
from grain_mp import _ray_pool, _start, worker_env
from grain_mp._executor import CLOSED, FAILED
from grain_mp._mp_worker import ELEMENTS, END, ERROR, error_message, where_it_failed
from grain_mp._ray_options import RayWorkers

INSTALL = 'pip install "grain-mp[ray]"'
# Outstanding calls per actor: one computing, one queued behind it.
_DEPTH = 2
# A call returns after _GROUP elements, its byte share, or _GROUP_S seconds, whichever
# comes first: one call (a round trip to the actor) per element was most of the cost
# of a cheap element, and a slow one should not wait for the group to fill.
_GROUP = 32
_GROUP_S = 0.05


def import_ray(address: str | None) -> Any:
    """`ray`, or an ImportError naming the extra to install."""
    if "ray" not in sys.modules and address is None:
        # Ray's uv integration (read once, at import) would re-run `uv run` in every
        # worker of a new local cluster; the workers share this environment anyway.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            f"MultiprocessingOptions(executor=RayWorkers(...)) needs Ray, which is not "
            f"installed: {INSTALL} (or pip install ray)."
        ) from error
    return ray


def connect(workers: RayWorkers) -> Any:
    """`ray`, connected: this process's connection, or a new one to `workers.address`."""
    ray = import_ray(workers.address)
    if not ray.is_initialized():
        try:
            # Ray's defaults otherwise: the actors' output reaches this terminal, as a
            # local worker's does.
            ray.init(address=workers.address)
        except (ConnectionError, RuntimeError) as error:
            raise RuntimeError(
                f"could not connect to the Ray cluster at {workers.address!r} for "
                f"mp_prefetch's workers ({error}). Start one with `ray start --head`, or "
                "give RayWorkers(address=...) the address it printed."
            ) from error
    return ray


def _nbytes(element: Any) -> int:
    """The bytes of `element`'s arrays and buffers, roughly for the rest (a budget, not a bill)."""
    if isinstance(element, np.ndarray):
        return int(element.nbytes)
    if isinstance(element, bytes | bytearray | memoryview | str):
        return len(element)
    if isinstance(element, dict):
        return sum(_nbytes(value) for value in element.values()) + 64
    if isinstance(element, list | tuple):
        return sum(_nbytes(value) for value in element) + 64
    return 64


class _RayWorker:
    """One worker's loop on a Ray actor: its slice of the pipeline, a group per call."""

    def __init__(self) -> None:
        self._iterator: Any = None
        self._index = self._count = 0
        self._sequential = False
        self._produced: int | None = None
        # The first call returns its first element at once: the time to the first batch.
        self._group = 1

    def start(
        self,
        settings: dict[str, str | None],
        payload: bytes,
        index: int,
        count: int,
        sequential: bool,
        state: Any,
    ) -> tuple[Any, ...] | None:
        """Builds worker `index`'s slice at `state`; None, or the ERROR message."""
        worker_env.enter_worker(settings)  # before anything of the user's is unpickled
        self._index, self._count, self._sequential = index, count, sequential
        try:
            pipeline, init_fn = pickle.loads(payload)
            if init_fn is not None:
                init_fn(index, count)
            iterator = unstamped(iter_worker_slice(pipeline, index, count, sequential))
            if state is not None:
                iterator.set_state(state)
        except BaseException as error:
            return self._error(error)
        self._iterator = iterator
        self._produced = 0
        return None

    def produce(self, max_bytes: int) -> tuple[Any, ...]:
        """(ELEMENTS, group), (END, group, state) or (ERROR, group, ...): group first."""
        iterator = self._iterator
        group: list[tuple[Any, Any]] = []
        size = 0
        began = time.perf_counter()
        try:
            limit, self._group = self._group, _GROUP
            while len(group) < limit and size < max_bytes:
                if group and time.perf_counter() - began >= _GROUP_S:
                    break
                try:
                    element = next(iterator)
                except StopIteration:
                    return (END, group, iterator.get_state())
                self._produced += 1  # type: ignore[operator]
                group.append((element, iterator.get_state()))
                size += _nbytes(element)
        except BaseException as error:
            return (ERROR, group, self._error(error))
        return (ELEMENTS, group)

    def reset(self) -> None:
        """Drops the previous run (its pipeline, iterator and what they hold) for reuse."""
        self._iterator = None
        self._produced = None
        self._group = 1
        gc.collect()

    def where(self) -> tuple[str, int]:
        """(node id, process id) of this actor."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def _error(self, error: BaseException) -> tuple[Any, ...]:
        where = where_it_failed(self._produced, self._index, self._count, self._sequential)
        message = error_message(f"{where} (a Ray actor, pid {os.getpid()})", error, (__file__,))
        return message


class _Slot:
    """The consumer's side of one worker: its actor, its calls and its last state."""

    def __init__(self, state: Any):
        self.actor: Any = None
        self.calls: collections.deque[Any] = collections.deque()
        self.state = state  # after the last element handed to the consumer
        self.messages: collections.deque[tuple[Any, ...]] = collections.deque()
        self.done = False  # END or ERROR came: no more calls
        self.restarts = 0
        self.reused = False  # its actor came from the pool: a failed start is no restart
        self.clean = False  # its actor started the pipeline and never failed: poolable


class RayExecutor:
    """Worker loops on Ray actors (`grain_mp._executor.Executor`); see the module doc.

    Args:
      pipeline: what each actor runs on its slice (an IterDataset).
      count: actors.
      sequential_slice: contiguous slices instead of strided ones.
      worker_init_fn: called as ``worker_init_fn(w, count)`` on actor w first.
      workers: where and how the actors run.
    """

    def __init__(
        self,
        pipeline: Any,
        count: int,
        sequential_slice: bool,
        worker_init_fn: Any,
        workers: RayWorkers,
    ):
        self._pipeline = pipeline
        self._count = count
        self._sequential = sequential_slice
        self._worker_init_fn = worker_init_fn
        self._workers = workers
        self._payload: bytes | None = None
        self._ray: Any = None
        self._slots: list[_Slot] | None = None
        self._interrupted = False
        self._share = max(1, workers.max_bytes_in_flight // (count * _DEPTH))

    # -- life cycle ----------------------------------------------------------------------

    def start(self, states: Any, ended: Any, options: Any) -> list[_Slot]:
        ray = self._ray = connect(self._workers)
        self._check_feasible(ray)
        if self._payload is None:
            why = "to run it on Ray actors"
            self._payload = _start.pickled(self._pipeline, self._worker_init_fn, why)
        self._payload_ref = ray.put(self._payload)  # one copy for every actor
        actor_options = self._actor_options()
        self._actor_class = ray.remote(_RayWorker).options(**actor_options)
        self._pool_key = _ray_pool.key(ray, actor_options)
        self._settings = worker_env.for_workers()
        slots = [_Slot(states[index]) for index in range(self._count)]
        self._slots = slots
        try:
            wanted = [index for index in range(self._count) if not ended[index]]
            pooled = _ray_pool.take(ray, self._pool_key, len(wanted))
            fresh = len(wanted) - len(pooled)
            if fresh:  # idle actors of other pipelines' options may hold the CPUs
                _ray_pool.make_room(ray, self._pool_key, fresh * self._workers.num_cpus)
            starting = {}
            for index, slot in enumerate(slots):
                if ended[index]:
                    slot.done = True
                    continue
                starting[index] = self._new_actor(index, slot, pooled.pop() if pooled else None)
            self._await_starts(starting)
        except BaseException:
            self.stop(keep=False)
            raise
        return slots

    def stop(self, keep: bool = True) -> None:
        """Stops the run; actors that ran cleanly go back to the pool (`keep`), others die."""
        slots, self._slots = self._slots, None
        ray = self._ray
        for slot in slots or ():
            slot.calls.clear()
            slot.messages.clear()
            if slot.actor is not None:
                if keep and slot.clean:
                    _ray_pool.give(
                        ray,
                        self._pool_key,
                        slot.actor,
                        self._workers.keep_actors_s,
                        self._workers.num_cpus,
                    )
                else:
                    with contextlib.suppress(Exception):
                        ray.kill(slot.actor, no_restart=True)
                slot.actor = None

    def interrupt(self) -> list[Any]:
        self._interrupted = True
        return []

    # -- the consumer's calls -------------------------------------------------------------

    def collect(self, index: int) -> tuple[Any, ...]:
        """Worker `index`'s next message; an actor lost on the way is replaced first."""
        slot = self._slots[index]  # type: ignore[index]
        ray = self._ray
        while not slot.messages:
            if not slot.calls:  # its start was interrupted by close() from another thread
                return (CLOSED,)
            call = slot.calls[0]
            ready, _ = ray.wait([call], timeout=POLL_S)
            if not ready:
                if self._interrupted:
                    return (CLOSED,)
                continue
            try:
                result = ray.get(call)
            except ray.exceptions.RayTaskError as error:  # our loop failed: not the user's
                slot.clean = False
                return (FAILED, error)
            except ray.exceptions.RayError as error:  # the actor, or its node, went away
                failed = self._replace(index, slot, error)
                if failed is not None:
                    return failed
                continue
            slot.calls.popleft()
            self._receive(slot, result)
            if not slot.done:
                slot.calls.append(slot.actor.produce.remote(self._share))
        return slot.messages.popleft()

    def take(self, index: int, payload: Any) -> Any:
        return payload  # ray.get made the element: arrays are views of the object store

    # -- helpers --------------------------------------------------------------------------

    def _receive(self, slot: _Slot, result: tuple[Any, ...]) -> None:
        kind, group = result[0], result[1]
        if group:
            slot.messages.append((ELEMENTS, group))
            slot.state = group[-1][1]
        if kind == END:
            slot.done = True
            slot.state = result[2]
            slot.messages.append((END, result[2]))
        elif kind == ERROR:
            slot.done = True
            slot.messages.append(result[2])

    def _actor_options(self) -> dict[str, Any]:
        workers = self._workers
        runtime_env = dict(workers.runtime_env or {})
        hidden = {k: v for k, v in worker_env.for_workers().items() if v is not None}
        runtime_env["env_vars"] = {**dict(runtime_env.get("env_vars") or {}), **hidden}
        options: dict[str, Any] = {
            "num_cpus": workers.num_cpus,
            "runtime_env": runtime_env,
            "max_restarts": 0,  # replaced here, at the state the consumer has
        }
        if workers.spread:
            options["scheduling_strategy"] = "SPREAD"
        return options

    def _new_actor(self, index: int, slot: _Slot, actor: Any = None) -> Any:
        """Starts worker `index` at `slot.state` on `actor` (a pooled one) or a new one.

        Returns its start call.
        """
        slot.reused = actor is not None
        slot.clean = False
        slot.actor = self._actor_class.remote() if actor is None else actor
        slot.calls.clear()
        return slot.actor.start.remote(
            self._settings, self._payload_ref, index, self._count, self._sequential, slot.state
        )

    def _await_starts(self, starting: dict[int, Any]) -> None:
        """Waits for the actors' start calls; raises if the cluster did not start them in time."""
        ray = self._ray
        slots = self._slots
        assert slots is not None
        deadline = time.monotonic() + self._workers.start_timeout_s
        waiting = dict(starting)
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._no_actors(sorted(waiting))
            if self._interrupted:
                return
            calls = list(waiting.values())
            ready, _ = ray.wait(calls, num_returns=len(calls), timeout=min(POLL_S, left))
            for index, call in list(waiting.items()):
                if call not in ready:
                    continue
                del waiting[index]
                slot = slots[index]
                try:
                    message = ray.get(call)
                except ray.exceptions.RayError as error:
                    with contextlib.suppress(Exception):
                        ray.kill(slot.actor, no_restart=True)
                    if slot.reused:  # a pooled actor died while idle: not this run's loss
                        waiting[index] = self._new_actor(index, slot)
                        continue
                    slot.restarts += 1
                    if slot.restarts > self._workers.max_restarts:
                        raise self._lost(index, slot, error) from error
                    waiting[index] = self._new_actor(index, slot)
                    continue
                if message is not None:  # the user's pipeline failed to start
                    slot.done = True
                    slot.messages.append(message)
                    continue
                slot.clean = True
                for _ in range(_DEPTH):
                    slot.calls.append(slot.actor.produce.remote(self._share))

    def _replace(self, index: int, slot: _Slot, error: BaseException) -> tuple[Any, ...] | None:
        """A new actor for worker `index`, at the consumer's state; (FAILED, error) if none."""
        slot.restarts += 1
        with contextlib.suppress(Exception):
            self._ray.kill(slot.actor, no_restart=True)
        if slot.restarts > self._workers.max_restarts:
            return (FAILED, self._lost(index, slot, error))
        try:
            self._await_starts({index: self._new_actor(index, slot)})
        except RuntimeError as failure:
            return (FAILED, failure)
        return None

    def _lost(self, index: int, slot: _Slot, error: BaseException) -> RuntimeError:
        return RuntimeError(
            f"grain worker {index} of {self._count} lost its Ray actor {slot.restarts} times "
            f"(RayWorkers.max_restarts={self._workers.max_restarts}); the last time: "
            f"{type(error).__name__}: {error}. The other workers are stopped; restore the "
            "last checkpoint to continue."
        )

    def _no_actors(self, indices: list[int]) -> RuntimeError:
        free: Any = "unknown"
        with contextlib.suppress(Exception):
            free = f"{self._ray.available_resources().get('CPU', 0.0):g}"
        return RuntimeError(
            f"the Ray cluster did not start the actors of grain workers {indices} (of "
            f"{self._count}) within RayWorkers.start_timeout_s={self._workers.start_timeout_s}"
            f" s: each asks for num_cpus={self._workers.num_cpus} and the cluster has "
            f"{free} CPUs free. Add nodes, lower num_workers or RayWorkers(num_cpus=...), "
            "or raise start_timeout_s."
        )

    def _check_feasible(self, ray: Any) -> None:
        """Raises at once if no node could ever hold one actor (Ray would wait forever)."""
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        most = max((node.get("Resources", {}).get("CPU", 0.0) for node in nodes), default=0.0)
        if self._workers.num_cpus > most:
            raise RuntimeError(
                f"RayWorkers(num_cpus={self._workers.num_cpus}) asks for more CPUs per actor "
                f"than any node of the Ray cluster has (at most {most:g}, {len(nodes)} "
                "nodes): lower num_cpus or add larger nodes."
            )
