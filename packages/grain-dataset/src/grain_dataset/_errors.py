"""Naming the stage in which a user function failed, without hiding the original error."""

from __future__ import annotations

from typing import Any


def note_stage(error: BaseException, stage: Any) -> None:
    """Adds a note naming `stage` to `error` (once); its type and traceback stay as they were."""
    text = f"grain: raised by the user function of {stage!r}"
    notes = getattr(error, "__notes__", ())
    if text not in notes:
        error.add_note(text)
