"""Grain's private DataLoader module, which axlearn imports (`_determine_worker_count`).

`DataLoader` and `DataLoaderIterator` are `grain.DataLoader` and
`grain.DataLoaderIterator`. `_determine_worker_count(n)` is
`grain_mp.resolve_worker_count`: None gives one worker per CPU, an int >= 0
itself.
"""

from grain_mp import DataLoader as DataLoader
from grain_mp import DataLoaderIterator as DataLoaderIterator
from grain_mp import resolve_worker_count as _resolve_worker_count

__all__ = ["DataLoader", "DataLoaderIterator", "_determine_worker_count"]


def _determine_worker_count(input_worker_count: int | None) -> int:
    """Worker processes for `input_worker_count`: None means one per CPU (`os.cpu_count()`)."""
    return _resolve_worker_count(input_worker_count)
