"""Global record indices over files laid end to end, as every multi-file source keeps them.

A source sums its files' record counts once (`ends`, and `starts = ends -
counts`); global index i then lives in file ``searchsorted(ends, i, "right")``
at ``i - starts[file]``. These two functions do that for a whole batch of
indices, and group the batch by file, so that a source reads each file once.
"""

from __future__ import annotations

import numpy as np


def locate(
    ends: np.ndarray, starts: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per index (checked, in range): its file and its index within that file."""
    files = np.searchsorted(ends, indices, side="right")
    return files, indices - starts[files]


def by_file(files: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(file, the positions in `files` that are in it), files in increasing order and the
    positions of each in their order in `files` (a stable sort: one pass, not one per file)."""
    if not len(files):
        return []
    order = np.argsort(files, kind="stable")
    cuts = np.flatnonzero(np.diff(files[order])) + 1
    return [(int(files[group[0]]), group) for group in np.split(order, cuts)]
