"""Hashes asked for by many reader threads at once, computed together.

Reader threads that each fetch one record (``source[i]`` from a thread pool)
each need one chunk hashed: about 250 µs of pure Python per KiB, under the GIL,
so threads add contention rather than speed. `HashCombiner.hash` lets the first
caller lead: it hashes everything pending, its own inputs and those of the
threads that arrived meanwhile, in one `hash64_many` call (vectorized across
inputs), and hands the results out. The others wait without the GIL. When a
round ends with callers still pending, the first of them leads the next round,
so no caller hashes for the others forever.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from grain_sources._highwayhash_many import hash64_many


class _Call:
    __slots__ = ("done", "error", "inputs", "lead", "result")

    def __init__(self, inputs: Sequence[bytes | memoryview]):
        self.inputs = inputs
        self.done = threading.Event()
        self.lead = False
        self.result: list[int] = []
        self.error: BaseException | None = None


class HashCombiner:
    """`hash64_many` shared by the threads of a process (see the module's doc)."""

    def __init__(self) -> None:
        self._reset()
        # A fork while another thread held the lock would leave the child's copy held.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[_Call] = []
        self._busy = False

    def hash(self, inputs: Sequence[bytes | memoryview]) -> list[int]:
        """The HighwayHash-64 (Riegeli's key) of each of `inputs`."""
        call = _Call(inputs)
        with self._lock:
            self._pending.append(call)
            call.lead = not self._busy
            self._busy = True
        if not call.lead:
            call.done.wait()
        if call.lead:
            self._round()
        if call.error is not None:
            raise call.error
        return call.result

    def _round(self) -> None:
        """Hashes every pending call's inputs, then hands the lead on or gives it up."""
        with self._lock:
            calls, self._pending = self._pending, []
        flat = [data for call in calls for data in call.inputs]
        try:
            hashes = hash64_many(flat)
        except BaseException as error:  # every waiting caller gets it, not just this one
            for call in calls:
                call.error = error
        else:
            start = 0
            for call in calls:
                call.result = hashes[start : start + len(call.inputs)]
                start += len(call.inputs)
        for call in calls:
            call.lead = False
            call.done.set()
        with self._lock:
            if self._pending:
                following = self._pending[0]
                following.lead = True
                following.done.set()
            else:
                self._busy = False


COMBINER = HashCombiner()
"""The process's combiner."""
