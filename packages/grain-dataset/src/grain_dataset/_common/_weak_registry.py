"""WeakRegistry: objects held weakly, listed by one thread while others add more.

A `weakref.WeakSet` fails there: listing one while another thread adds to it
raises "Set changed size during iteration" (with the GIL now and then, without
it often), and an exit hook that lists its live iterators then stops none. This
keeps weak references in a dict keyed by id: a dict's copy is atomic (also on
free-threaded builds), and each entry's weak reference removes it when its
object dies, before the id can be reused.

Used by grain.monitoring's tracked iterators (`grain_dataset._core._stats`), the
running worker-process executors (`grain_mp._process_executor`) and
device_put's iterators and threads (`grain_jax._device_put`).
"""

from __future__ import annotations

import weakref
from typing import Any


class WeakRegistry:
    """A set of live objects, held weakly; safe to add to and list from many threads.

    Example::

        live = WeakRegistry()
        live.add(iterator)
        for iterator in live.alive():   # those not yet garbage collected
            iterator.close()
    """

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Any]] = {}

    def add(self, obj: Any) -> None:
        """Holds `obj` weakly (once, however often it is added)."""
        key = id(obj)
        refs = self._refs
        if key in refs:
            return

        def forget(ref: weakref.ref[Any]) -> None:
            if refs.get(key) is ref:
                refs.pop(key, None)

        refs[key] = weakref.ref(obj, forget)

    def discard(self, obj: Any) -> None:
        """Stops holding `obj`, if it is held."""
        ref = self._refs.get(id(obj))
        if ref is not None and ref() is obj:
            self._refs.pop(id(obj), None)

    def alive(self) -> list[Any]:
        """The objects held that are still alive, in the order they were added."""
        found = (ref() for ref in self._refs.copy().values())
        return [obj for obj in found if obj is not None]
