"""Errors leave a pipeline showing the user's frames, not ours (``py_traceback_filtering``).

An exception raised by a user's map function deep inside a pipeline reaches
the user through a dozen frames of stages, threads and read-ahead. Those say
nothing about the user's bug, so the iterator the user holds drops every frame
that belongs to the library's packages from the traceback (and from the
tracebacks of the exceptions it chains), and adds a note saying so. The
setting ``grain.config.update("py_traceback_filtering", "off")`` keeps them;
"quiet_remove_frames" and "tracebackhide" drop them without the note.

Only the outermost iterator's calls filter (the guard of `_guard`), after the
exception has left every stage: stages that catch and wrap errors still see
the whole traceback.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import types

import grain_dataset
import grain_index
import grain_sources
from grain_dataset._common._config import config

NOTE = (
    "grain: the library's own frames were removed from this traceback; "
    'grain.config.update("py_traceback_filtering", "off") (or '
    "GRAIN_PY_TRACEBACK_FILTERING=off) keeps them."
)

_MARK = "_grain_frames_filtered"


def _package_dirs() -> tuple[str, ...]:
    dirs = [os.path.dirname(module.__file__ or "") for module in (grain_index, grain_sources)]
    dirs.append(os.path.dirname(grain_dataset.__file__ or ""))
    # The layers above this one, where installed; they are found by name so that this
    # layer does not import them.
    for name in ("grain_mp", "grain_jax", "grain"):
        spec = _find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return tuple(os.path.join(d, "") for d in dirs if d)


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


_DIRS: tuple[str, ...] | None = None


def _is_ours(filename: str) -> bool:
    global _DIRS
    if _DIRS is None:
        _DIRS = _package_dirs()
    return filename.startswith(_DIRS)


def _strip(tb: types.TracebackType | None) -> types.TracebackType | None:
    frames = []
    while tb is not None:
        if not _is_ours(tb.tb_frame.f_code.co_filename):
            frames.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    rebuilt = None
    for frame, lasti, lineno in reversed(frames):
        rebuilt = types.TracebackType(rebuilt, frame, lasti, lineno)
    return rebuilt


def filter_frames(error: BaseException) -> None:
    """Drops the library's frames from `error`'s traceback and its chain, per the setting.

    Never raises; the note is added once per exception, however often it is filtered.
    """
    try:
        mode = config.get_or_default("py_traceback_filtering")
    except ValueError:
        return
    if mode == "off":
        return
    # An error already filtered (by an inner iterator, or in the worker that raised
    # it) is stripped again, of the frames added since, but gets no second note.
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = _strip(current.__traceback__)
        pending.extend((current.__cause__, current.__context__))
    if getattr(error, _MARK, False):
        return
    try:
        setattr(error, _MARK, True)
    except (AttributeError, TypeError):  # an exception type with __slots__
        return
    if mode in ("auto", "remove_frames"):
        # First, right under the message: the notes stages added say more, last.
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list):
            notes.insert(0, NOTE)
        else:
            error.add_note(NOTE)
