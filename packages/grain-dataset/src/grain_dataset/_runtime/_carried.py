"""What the library carries on each iterator beside the iterator's own attributes.

An iterator is the user's object (a stage iterator of ours, a subclass of
theirs, ElasticIterator, the DataLoader's): the library keeps what it knows
about it in one `Carried` object, under one key of the iterator's ``__dict__``
(written there directly, so that a subclass's ``__setattr__`` or properties
never see it), created by the first module that needs it. Every field is
cold: read when a checkpoint is taken or restored, when the iterator closes,
or when statistics are shown.

    dataset       the dataset iter() was called on: the checkpoint's fingerprint
                  (`_fingerprint.remember_dataset`); None: unknown, no check
    stamps        get_state() adds that fingerprint to dict states (other
                  packages' iterators, which carry it in their own state)
    forced        the next set_state skips the fingerprint check once
                  (`force_restore`)
    closing       close() came while another thread was inside a call
                  (`_guard`): that call says "closed", not how it was stopped
    closed        the outermost iterator was closed: next() raises
    timer         the statistics timer of next() (`_guard.set_timer`)
    stats_record  the statistics recorded in this stage (`_core._stats`)

Three attributes stay the iterator's own, because they are read on every
call and one more lookup per stage per element would cost: ``_call_lock`` and
``_grain_next`` (`_guard`: the lock of the outermost iterator, and the hook its
next() goes through), and ``_ctx``, the context the whole pipeline shares
(`_core._base`).
"""

from __future__ import annotations

from typing import Any

_KEY = "_grain_carried"


class Carried:
    """The library's fields of one iterator (see the module docstring)."""

    __slots__ = ("closed", "closing", "dataset", "forced", "stamps", "stats_record", "timer")

    def __init__(self) -> None:
        self.dataset: Any = None
        self.stamps = False
        self.forced = False
        self.closing = False
        self.closed = False
        self.timer: Any = None
        self.stats_record: Any = None


def carried(iterator: Any) -> Carried:
    """`iterator`'s `Carried`, made on first use."""
    fields = iterator.__dict__
    found = fields.get(_KEY)
    if found is None:
        # setdefault: two threads making it at once keep the same one.
        found = fields.setdefault(_KEY, Carried())
    return found


def carried_if_any(iterator: Any) -> Carried | None:
    """`iterator`'s `Carried` if the library stored anything on it yet, else None."""
    return getattr(iterator, "__dict__", {}).get(_KEY)
