"""One thread at a time inside the iterator its user holds.

The stages of a pipeline keep positions and buffers that two threads inside
`next()` at once would corrupt: elements handed out twice or skipped, random
numbers drawn twice, a consumer waiting forever on a producer that another
consumer already stopped, worker pipes read by two threads. So the iterator the
user calls (the *outermost*: one that no other iterator reads from) serializes
its `__next__`, `get_state`, `set_state` and `close`: a second thread calling
any of them waits until the first has returned. Two threads taking elements
from one iterator therefore each get distinct elements, together exactly the
single-threaded stream, and a state taken from another thread (a checkpoint) is
always one between two elements. The lock is reentrant: a stage whose `next()`
calls its own `get_state()` never waits on itself.

How, without a cost on every stage: `DatasetIterator.__init__` switches the
new iterator to a subclass of its class whose four methods take a lock
(`guard`); when another iterator adopts it as a parent it switches back
(`unguard`), since only its child calls it then, from one thread at a time.
Only the outermost iterator pays: one uncontended RLock and one more Python
call per `next()`, about 0.2 microseconds on a 2-core VM. That shows only where
the outermost stage hands out trivial elements one by one (a list read by
`to_iter_dataset`: 4.3 M elements/s became 2.2 M/s); batched or real work hides
it (map + batch: 2.68 M elements/s before, 2.6 M/s after). The subclass has the same name,
module and qualified name (reprs and messages do not change), and `isinstance`
checks hold. `serialized` gives other iterator classes (the DataLoader's) the
same guard.

Closing while another thread waits inside. A `next()` may wait for good: on a
worker process or a read thread stuck in user code (a transformation that
never returns). `close()` must not wait for it, so it takes the lock only if
the lock comes free within `_GRACE_S`. Otherwise it closes *around* the
running call: it marks the iterator closed (later `next()` calls raise at
once), then *interrupts* the pipeline: every stage that can wait on threads or
processes defines ``_interrupt()``, which stops them without the lock and
makes any wait of the running call end with an exception, within `POLL_S` for
a thread, as soon as they are ended for worker processes (the guard turns it
into the closed-iterator ValueError; an element the call still returns is
handed out, so nothing is lost). Then close() waits for the running call
to leave, up to `CLOSE_TIMEOUT_S` in all, and finishes the close with the
lock, as always. If the call does not leave (it runs user
code in the caller's own thread, or waits in a stage without the hook), a
daemon thread finishes the close as soon as it does, and close() returns.

``_interrupt(self)`` is the hook of this surface: it may run in any thread,
while the stage's own methods run in another, so it only sets flags, signals
processes and wakes waits; it returns the iterators to interrupt besides the
stage's parents (an iterator that a thread of the stage runs, say). A stage
whose threads it leaves stuck in user code must make sure they hold no
reference to the stage's iterator.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from grain_dataset import _fingerprint
from grain_dataset._tracebacks import filter_frames

_GUARDED_METHODS = ("__next__", "get_state", "set_state", "close")
_VARIANT = "_grain_guarded_variant"  # in a class's own __dict__: its guarded subclass
_BASE = "_grain_guarded_base"  # in a guarded subclass's own __dict__: the class it guards
_CLOSED = "_grain_closed_variant"  # a class's variant whose next() raises (closed)
# In an iterator's __dict__: close() came while another thread was inside a call.
_CLOSING = "_grain_closing"
# The lock of every closed iterator (its remaining calls are rare: get_state, close).
_CLOSED_LOCK = threading.RLock()

CLOSE_TIMEOUT_S = 2.0
"""close() from another thread returns within about this many seconds (see the module doc)."""
# How long close() waits for a call in another thread to leave before interrupting it:
# a call that is about to return finishes, and only a waiting one is interrupted.
_GRACE_S = 0.05
POLL_S = 0.1
"""How often a wait of a stage with `_interrupt` looks whether it was interrupted."""


def serialized(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` holding the iterator's lock, ``self._call_lock`` (an RLock; `add_lock`).

    Another thread waits until the call returns; a nested call from the same
    thread (a stage's `__next__` calling its own `get_state`) runs at once.
    ``close`` waits at most `CLOSE_TIMEOUT_S` (see the module docstring).
    """
    if method.__name__ == "__next__":  # the hot one: no *args, no context manager

        @functools.wraps(method)
        def next_(self: Any) -> Any:
            lock = self._call_lock
            lock.acquire()
            try:
                if lock is not self._call_lock:
                    # close() ran while this call waited for the lock (it swaps the lock).
                    _advance_closed(self)
                return method(self)
            except StopIteration:
                raise
            except Exception as error:
                if _CLOSING in self.__dict__:
                    # close() from another thread interrupted this call: say so, not how.
                    raise closed_error(self) from None
                filter_frames(error)
                raise
            finally:
                lock.release()

        return next_

    if method.__name__ == "close":
        return _serialized_close(method)

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._call_lock:
            try:
                return method(self, *args, **kwargs)
            except Exception as error:
                filter_frames(error)
                raise

    return call


def _serialized_close(close: Callable[[Any], Any]) -> Callable[[Any], Any]:
    @functools.wraps(close)
    def close_(self: Any) -> Any:
        started = time.monotonic()
        lock = self._call_lock
        if not lock.acquire(timeout=_GRACE_S):
            _close_around(self, lock, close, started + CLOSE_TIMEOUT_S)
            return None
        try:
            return close(self)
        except Exception as error:
            filter_frames(error)
            raise
        finally:
            lock.release()

    return close_


def _close_around(self: Any, lock: Any, close: Callable[[Any], Any], deadline: float) -> None:
    """Closes `self` while another thread holds `lock` inside a call (see the module doc)."""
    self.__dict__[_CLOSING] = True
    _mark_closed(self)
    interrupt(self)
    if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
        try:
            close(self)
        finally:
            lock.release()
        return

    def finish() -> None:  # once the call leaves; its thread holds `self` until then anyway
        with lock, contextlib.suppress(Exception):
            close(self)

    threading.Thread(target=finish, name="grain-close", daemon=True).start()


def interrupt(iterator: Any) -> None:
    """Calls ``_interrupt()`` of `iterator` and of every iterator it reads from.

    Safe while another thread is inside `iterator`: see the module docstring.
    """
    seen: set[int] = set()
    pending = [iterator]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        hook = getattr(type(node), "_interrupt", None)
        more: Iterable[Any] | None = None
        if hook is not None:
            try:
                more = hook(node)
            except Exception:  # one stage failing to stop must not keep the others running
                more = None
        pending.extend(more or ())
        pending.extend(getattr(node, "__dict__", {}).get("_parents", ()))


def add_lock(iterator: Any) -> None:
    """Gives `iterator` the lock its `serialized` methods take."""
    iterator.__dict__["_call_lock"] = threading.RLock()


def closed_error(iterator: Any) -> ValueError:
    """The error of `next()` on a closed `iterator`."""
    made_by = getattr(iterator, "_MADE_BY", "iter(dataset)")
    return ValueError(
        f"next() on a closed iterator ({type(iterator).__name__}): close() stopped its "
        f"threads and workers for good. Create a new one with {made_by} (and "
        "set_state(...) to continue where this one was)."
    )


def _advance_closed(self: Any) -> Any:
    raise closed_error(self)


def _mark_closed(self: Any) -> None:
    """Makes `self`'s next() raise, if it is an outermost DatasetIterator."""
    cls = type(self)
    if is_outermost(self) and cls.__dict__.get(_CLOSED) is not cls:
        self.__class__ = _closed_variant(cls)


def _closed_variant(cls: type) -> type:
    """`cls` whose `__next__` raises: what an outermost iterator becomes when closed."""
    variant = cls.__dict__.get(_CLOSED)
    if variant is None:
        namespace = {"__next__": _advance_closed, "__module__": cls.__module__, "__slots__": ()}
        variant = type(cls)(cls.__name__, (cls,), namespace)
        variant.__qualname__ = cls.__qualname__
        type.__setattr__(variant, _CLOSED, variant)
        type.__setattr__(cls, _CLOSED, variant)
    return variant


def _closing(close: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(close)
    def close_(self: Any) -> Any:
        try:
            return close(self)
        finally:
            # Only the iterator its user holds: stages inside may be closed and reopened.
            # A next() already waiting for the lock sees the lock swapped and raises too.
            _mark_closed(self)
            self.__dict__["_call_lock"] = _CLOSED_LOCK

    return close_


def _stamping(get_state: Callable[..., Any]) -> Callable[..., Any]:
    # The user's iterator adds its pipeline's fingerprint (see grain_dataset._fingerprint).
    @functools.wraps(get_state)
    def get_state_(self: Any) -> Any:
        return _fingerprint.stamp(self, get_state(self))

    return get_state_


def _verifying(set_state: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(set_state)
    def set_state_(self: Any, state: Any) -> Any:
        state, unverified = _fingerprint.verify(self, state)
        result = set_state(self, state)
        if unverified:  # after the stages' own checks: a corrupt state raises, not warns
            _fingerprint.warn_unverified(self)
        return result

    return set_state_


def _variant(cls: type) -> type:
    variant = cls.__dict__.get(_VARIANT)
    if variant is None:
        namespace: dict[str, Any] = {
            name: serialized(getattr(cls, name))
            for name in _GUARDED_METHODS
            if callable(getattr(cls, name, None))
        }
        if "get_state" in namespace:
            namespace["get_state"] = serialized(_stamping(getattr(cls, "get_state")))  # noqa: B009
        if "set_state" in namespace:
            namespace["set_state"] = serialized(_verifying(getattr(cls, "set_state")))  # noqa: B009
        if "close" in namespace:
            # The swap to the closed variant happens inside the lock (see next_).
            namespace["close"] = serialized(_closing(getattr(cls, "close")))  # noqa: B009
        namespace.update({_BASE: cls, "__module__": cls.__module__, "__slots__": ()})
        variant = type(cls)(cls.__name__, (cls,), namespace)
        variant.__qualname__ = cls.__qualname__
        type.__setattr__(cls, _VARIANT, variant)
    return variant


def guard(iterator: Any) -> None:
    """Serializes the calls into `iterator` (see the module docstring); idempotent."""
    cls = type(iterator)
    if _BASE in cls.__dict__:
        return
    variant = _variant(cls)
    add_lock(iterator)
    iterator.__class__ = variant


def unguard(iterator: Any) -> None:
    """Undoes `guard`: `iterator` became another iterator's parent."""
    base = type(iterator).__dict__.get(_BASE)
    if base is not None:
        iterator.__class__ = base
        iterator.__dict__.pop("_call_lock", None)


def is_outermost(iterator: Any) -> bool:
    """Whether `iterator` is the one its user calls (no other iterator adopted it).

    Its class is the guarded variant, or a subclass made of that one afterwards
    (statistics' timing class, the closed variant).
    """
    return any(_BASE in cls.__dict__ for cls in type(iterator).__mro__[:2])
