"""Naming the stage in which a user function failed, without hiding the original error."""

from __future__ import annotations

from typing import Any


def note_stage(error: BaseException, stage: Any) -> None:
    """Adds a note naming `stage` to `error` (once); its type and traceback stay as they were."""
    text = f"grain: raised by the user function of {stage!r}"
    notes = getattr(error, "__notes__", ())
    if text not in notes:
        error.add_note(text)


class WrongTypeError(TypeError, ValueError):
    """An argument of the wrong type where Grain raises a ValueError.

    Both, so that code written for Grain (``except ValueError``) and code
    written for this library (``except TypeError``) catch it.
    """


class OutOfRangeError(ValueError, IndexError):
    """A position outside what a dataset holds, where Grain raises an IndexError.

    Both, so that ``except IndexError`` (Grain) and ``except ValueError`` (a bad
    state here) catch it.
    """
