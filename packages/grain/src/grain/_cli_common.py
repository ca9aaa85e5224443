"""What the `grain` commands share: their errors and number formats.

The progress bar and `format_rate` are grain_convert's (its `convert` draws the
bar when called from Python too); the commands take them from there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_convert.extension import ProgressBar as ProgressBar
from grain_convert.extension import format_rate as format_rate

# Exit statuses every command keeps (the top-level --help lists them).
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed: a check did not match, a record or stage raised
EXIT_USAGE = 2  # bad usage: a bad option, a missing input path, an input it cannot read
EXIT_INTERRUPTED = 130  # Ctrl-C


class CommandError(Exception):
    """A failure shown as one line on stderr; `code` is the exit status."""

    code = EXIT_FAILED


class UsageError(CommandError):
    """Bad usage found after parsing: a missing path, an input of an unknown format."""

    code = EXIT_USAGE


def format_bytes(size: float) -> str:
    """``512 B``, ``1.5 kB``, ``12.3 MB``, ``1.2 GB`` (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def tree_nbytes(element: Any) -> int:
    """The bytes of the array leaves (numpy, or anything with an int `nbytes`) of a tree."""
    if isinstance(element, dict):
        return sum(tree_nbytes(value) for value in element.values())
    if isinstance(element, list | tuple):
        return sum(tree_nbytes(value) for value in element)
    if isinstance(element, np.ndarray | np.generic):
        return int(element.nbytes)
    nbytes = getattr(element, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else 0
