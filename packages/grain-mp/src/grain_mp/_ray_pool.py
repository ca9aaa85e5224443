"""Started Ray actors kept between runs, so that the next iterator or restore skips the start.

Starting an actor costs seconds (a fresh worker process in its own runtime
environment, then imports); resetting one costs milliseconds. When an executor
stops (an iterator closed or exhausted, `set_state`), each actor that ran
cleanly is reset (`_RayWorker.reset`: its pipeline, iterator and everything they
held dropped, then a garbage collection) and kept here, idle, under a key of
what makes actors interchangeable: the Ray job and cluster they belong to and
the options they were started with (CPUs, runtime environment, placement). The
next executor with the same key takes them before starting new ones.

An idle actor is killed after ``RayWorkers.keep_actors_s`` seconds, when
`release_idle` is called (``RayWorkers.release_idle_actors()``), when an
executor needs the CPUs they hold for actors of another key, and at
interpreter exit. One found dead when taken is dropped (its replacement is a
new actor). Nothing here pins a cluster: the handles of a job that ended
(``ray.shutdown``) are dropped unused.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import threading
import time
from typing import Any

# How often the reaper looks for actors idle past their time.
_TICK_S = 0.25


@dataclasses.dataclass
class _Idle:
    actor: Any
    reset: Any  # the reset call's reference: ready once the actor is clean
    until: float  # monotonic time after which it is killed
    cpus: float


_lock = threading.Lock()
_idle: dict[str, list[_Idle]] = {}
_reaper: threading.Thread | None = None
_ray: Any = None
_exit_hooked = False


def key(ray: Any, actor_options: dict[str, Any]) -> str:
    """What makes two actors interchangeable: their job, their cluster, their options."""
    context = ray.get_runtime_context()
    cluster = getattr(context, "gcs_address", None)
    where = {"job": context.get_job_id(), "cluster": cluster, "options": actor_options}
    return json.dumps(where, sort_keys=True, default=repr)


def take(ray: Any, pool_key: str, count: int) -> list[Any]:
    """Up to `count` idle actors of `pool_key`, removed from the pool (none found dead)."""
    taken: list[Any] = []
    with _lock:
        entries = _idle.get(pool_key, [])
        while entries and len(taken) < count:
            entry = entries.pop()
            if _dead(ray, entry):
                _kill(ray, entry.actor)
                continue
            taken.append(entry.actor)
        if not entries:
            _idle.pop(pool_key, None)
    return taken


def give(ray: Any, pool_key: str, actor: Any, keep_s: float, cpus: float) -> None:
    """Resets `actor` and keeps it idle for `keep_s` seconds (kills it at once if 0)."""
    global _reaper, _ray, _exit_hooked
    if keep_s <= 0:
        _kill(ray, actor)
        return
    try:
        # Queued behind the calls still running on it: it runs when they are done.
        reset = actor.reset.remote()
    except Exception:  # a handle Ray no longer knows: nothing to keep
        _kill(ray, actor)
        return
    with _lock:
        _ray = ray
        _idle.setdefault(pool_key, []).append(_Idle(actor, reset, time.monotonic() + keep_s, cpus))
        if not _exit_hooked:
            atexit.register(release_idle)  # runs before Ray's own exit hook (registered earlier)
            _exit_hooked = True
        if _reaper is None:
            _reaper = threading.Thread(target=_reap, name="grain-ray-actor-pool", daemon=True)
            _reaper.start()


def make_room(ray: Any, pool_key: str, cpus: float) -> None:
    """Kills idle actors of other keys while the cluster has fewer than `cpus` CPUs free."""
    with _lock:
        others = [(k, e) for k, entries in _idle.items() if k != pool_key for e in entries]
    if not others:
        return
    with contextlib.suppress(Exception):
        if ray.available_resources().get("CPU", 0.0) >= cpus:
            return
    with _lock:
        for other_key, _ in others:
            for entry in _idle.pop(other_key, []):
                _kill(ray, entry.actor)


def release_idle() -> int:
    """Kills every idle actor now; returns how many there were."""
    with _lock:
        entries = [entry for bucket in _idle.values() for entry in bucket]
        _idle.clear()
        ray = _ray
    for entry in entries:
        _kill(ray, entry.actor)
    return len(entries)


def idle_count() -> int:
    """How many actors are idle in the pool now."""
    with _lock:
        return sum(len(bucket) for bucket in _idle.values())


def _reap() -> None:
    """Kills actors idle past their time; ends when the pool is empty."""
    global _reaper
    while True:
        time.sleep(_TICK_S)
        now = time.monotonic()
        expired: list[_Idle] = []
        with _lock:
            for pool_key in list(_idle):
                bucket = _idle[pool_key]
                expired.extend(entry for entry in bucket if entry.until <= now)
                bucket[:] = [entry for entry in bucket if entry.until > now]
                if not bucket:
                    del _idle[pool_key]
            ray = _ray
            if not _idle and not expired:
                _reaper = None
                return
        for entry in expired:
            _kill(ray, entry.actor)


def _dead(ray: Any, entry: _Idle) -> bool:
    """Whether `entry`'s actor is known to be gone (its reset failed)."""
    try:
        ready, _ = ray.wait([entry.reset], timeout=0)
        if ready:
            ray.get(entry.reset)
    except Exception:
        return True
    return False


def _kill(ray: Any, actor: Any) -> None:
    if ray is None:
        return
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)
