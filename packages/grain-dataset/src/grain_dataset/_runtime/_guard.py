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

How, with the class the user's code made: `DatasetIterator.__init_subclass__`
gives every iterator class, once, an *entry* in front of each of the four
methods (`hook_methods`). The entry looks at one attribute of the instance and,
for the iterators inside a pipeline, calls the class's own method at once; the
outermost one's entry takes the lock, and `set_state` checks the pipeline
fingerprint a state file handed it (`grain_dataset._runtime._fingerprint`). `guard` turns
this on for a new iterator; when another iterator adopts it as a parent it is
turned off (`unguard`), since only its child calls it then, from one thread at
a time. Statistics hook `__next__` the same way (`set_timer`), and a closed
iterator's `next()` raises through it. Nothing ever changes an iterator's class:
`type(iterator)` is the class that created it, and a debugger shows that one.
The entry costs every stage one more Python call per element, about 0.03
microseconds (Python 3.11, a 2-core VM): a chain of five iterator stages that
do almost nothing runs about 10% slower for it, a stage doing real work does
not notice it. The outermost pays one uncontended RLock besides. A method that
calls its base class's version (``super().__next__()``) goes through the guard
once: the base class's entry sees it is not the method of the instance's class
and calls straight through. The entries are made when the class is: a method
assigned to the class later has none (and no guard). `serialized` gives other
iterator classes (the DataLoader's) the same guard.

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
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from grain_dataset._common._contract import IteratorTraits
from grain_dataset._runtime import _fingerprint
from grain_dataset._runtime._carried import carried, carried_if_any
from grain_dataset._runtime._tracebacks import filter_frames

# On an entry `hook_methods` made: the class it was made for.
_ENTRY_OF = "_grain_entry_of"
# The lock of every closed iterator (its remaining calls are rare: get_state, close).
_CLOSED_LOCK = threading.RLock()

CLOSE_TIMEOUT_S = 2.0
"""close() from another thread returns within about this many seconds (see the module doc)."""
# How long close() waits for a call in another thread to leave before interrupting it:
# a call that is about to return finishes, and only a waiting one is interrupted.
_GRACE_S = 0.05
POLL_S = 0.1
"""How often a wait of a stage with `_interrupt` looks whether it was interrupted."""

Next = Callable[[Any], Any]
# What an iterator's `_grain_next` holds when not None: called as hook(self, method)
# instead of the class's own `__next__` method.
NextHook = Callable[[Any, Next], Any]


def _outermost_next(timer: NextHook | None) -> NextHook:
    """The hook of an outermost iterator's next(): the lock, then `timer` or the method."""

    def next_(self: Any, method: Next) -> Any:
        lock = self._call_lock
        lock.acquire()
        try:
            if lock is not self._call_lock:
                # close() ran while this call waited for the lock (it swaps the lock).
                raise closed_error(self)
            return method(self) if timer is None else timer(self, method)
        except StopIteration:
            raise
        except Exception:
            fields = carried_if_any(self)
            if fields is not None and fields.closing:
                # close() from another thread interrupted this call: say so, not how.
                raise closed_error(self) from None
            raise
        finally:
            lock.release()

    return next_


_GUARDED_NEXT = _outermost_next(None)


def _closed_next(self: Any, method: Next) -> Any:
    raise closed_error(self)


Method = TypeVar("Method", bound=Callable[..., Any])


def serialized(method: Method) -> Method:
    """`method` holding the iterator's lock, ``self._call_lock`` (an RLock; `add_lock`).

    Another thread waits until the call returns; a nested call from the same
    thread (a stage's `__next__` calling its own `get_state`) runs at once.
    ``close`` waits at most `CLOSE_TIMEOUT_S` (see the module docstring).
    """
    locked = _locked(method)

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return locked(self, *args, **kwargs)
        except StopIteration:
            raise
        except Exception as error:
            # Here, in the frame the caller called: the frames below it are all ours.
            filter_frames(error)
            raise

    return cast(Method, call)


def _locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` holding the iterator's lock (`serialized` without the traceback filter)."""
    if method.__name__ == "__next__":
        return lambda self: _GUARDED_NEXT(self, method)
    if method.__name__ == "close":
        return _locked_close(method)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._call_lock:
            return method(self, *args, **kwargs)

    return call


def _locked_close(close: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def close_(self: Any) -> Any:
        started = time.monotonic()
        lock = self._call_lock
        if not lock.acquire(timeout=_GRACE_S):
            _close_around(self, lock, close, started + CLOSE_TIMEOUT_S)
            return None
        try:
            return close(self)
        finally:
            lock.release()

    return close_


def _close_around(self: Any, lock: Any, close: Callable[[Any], Any], deadline: float) -> None:
    """Closes `self` while another thread holds `lock` inside a call (see the module doc)."""
    carried(self).closing = True
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


def interrupt(iterator: IteratorTraits) -> None:
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
        if not isinstance(node, IteratorTraits):
            continue
        more: Iterable[Any] | None = None
        try:
            more = node._interrupt()
        except Exception:  # one stage failing to stop must not keep the others running
            more = None
        pending.extend(more or ())
        pending.extend(node.__dict__.get("_parents", ()))


def add_lock(iterator: IteratorTraits) -> None:
    """Gives `iterator` the lock its `serialized` methods take."""
    iterator.__dict__["_call_lock"] = threading.RLock()


def closed_error(iterator: IteratorTraits) -> ValueError:
    """The error of `next()` on a closed `iterator`."""
    made_by = iterator._MADE_BY
    # Grain's wording, which clients match (`_closed_wording`).
    grain = iterator._closed_wording or f"Trying to advance a closed iterator: '{iterator!r}'."
    return ValueError(
        f"{grain} next() on a closed iterator ({type(iterator).__name__}): close() stopped its "
        f"threads and workers for good. Create a new one with {made_by} (and "
        "set_state(...) to continue where this one was)."
    )


def _mark_closed(self: Any) -> None:
    """Makes `self`'s next() raise, if it is an outermost DatasetIterator."""
    if is_outermost(self) and hasattr(type(self).__next__, _ENTRY_OF):
        carried(self).closed = True
        _install_next(self)


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
    # Iterators that asked for it add their pipeline's fingerprint
    # (grain_dataset._runtime._fingerprint).
    @functools.wraps(get_state)
    def get_state_(self: Any) -> Any:
        return _fingerprint.stamp(self, get_state(self))

    return get_state_


def _verifying(set_state: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(set_state)
    def set_state_(self: Any, state: Any) -> Any:
        state, unverified, mixes = _fingerprint.verify(self, state)
        with _fingerprint.restoring(mixes):
            result = set_state(self, state)
        if unverified:  # after the stages' own checks: a corrupt state raises, not warns
            _fingerprint.warn_unverified(self)
        return result

    return set_state_


def _next_entry(cls: type, method: Next) -> Next:
    # The hot path of every stage: one attribute read, then the class's own method.
    def template(self: Any) -> Any:
        hook = self._grain_next
        if hook is None or (type(self) is not cls and type(self).__next__ is not entry):
            return method(self)
        try:
            return hook(self, method)
        except StopIteration:
            raise
        except Exception as error:
            if self._call_lock is not None:  # the user's call: show the user's frames
                filter_frames(error)
            raise

    # A code object of its own per class: the interpreter specializes the attribute read
    # and the call for that class, where one code shared by all stages would not be.
    entry = types.FunctionType(
        template.__code__.replace(), template.__globals__, "__next__", None, template.__closure__
    )
    return entry


def _entry(cls: type, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    guarded = {"get_state": _stamping, "set_state": _verifying, "close": _closing}[name]
    outermost = _locked(guarded(method))

    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._call_lock is None or (
            type(self) is not cls and getattr(type(self), name) is not entry
        ):
            return method(self, *args, **kwargs)
        try:
            return outermost(self, *args, **kwargs)
        except Exception as error:
            filter_frames(error)  # here, in the frame the user called (see `serialized`)
            raise

    return entry


def hook_methods(cls: type) -> None:
    """Puts the guard's entry in front of `cls`'s four methods (see the module docstring).

    Each method `cls` has (its own or inherited) that is a plain function and
    not yet behind an entry gets one, set on `cls`; abstract ones are left
    for the subclass that defines them.
    """
    for name in ("__next__", "get_state", "set_state", "close"):
        method = getattr(cls, name, None)
        if (
            not isinstance(method, types.FunctionType)
            or hasattr(method, _ENTRY_OF)
            or getattr(method, "__isabstractmethod__", False)
        ):
            continue
        entry = _next_entry(cls, method) if name == "__next__" else _entry(cls, name, method)
        functools.update_wrapper(entry, method)
        setattr(entry, _ENTRY_OF, cls)
        setattr(cls, name, entry)


def _install_next(iterator: Any) -> None:
    """Sets the hook `iterator`'s next() goes through, from what it is now."""
    state = iterator.__dict__
    fields = carried_if_any(iterator)
    timer = None if fields is None else fields.timer
    hook: NextHook | None
    if fields is not None and fields.closed:
        hook = _closed_next
    elif state.get("_call_lock") is None:
        hook = timer
    else:
        hook = _GUARDED_NEXT if timer is None else _outermost_next(timer)
    state["_grain_next"] = hook


def set_timer(iterator: Any, timer: NextHook) -> None:
    """Makes `iterator`'s next() run as ``timer(iterator, method)`` (statistics)."""
    carried(iterator).timer = timer
    _install_next(iterator)


def guard(iterator: Any) -> None:
    """Serializes the calls into `iterator` (see the module docstring); idempotent."""
    if iterator.__dict__.get("_call_lock") is None:
        add_lock(iterator)
        _install_next(iterator)


def unguard(iterator: Any) -> None:
    """Undoes `guard`: `iterator` became another iterator's parent."""
    if iterator.__dict__.pop("_call_lock", None) is not None:
        _install_next(iterator)


def is_outermost(iterator: Any) -> bool:
    """Whether `iterator` is the one its user calls (no other iterator adopted it)."""
    return iterator.__dict__.get("_call_lock") is not None
