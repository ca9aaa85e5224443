"""Grain's private prefetch module, which axlearn, xLSTM-jax and others import.

`ThreadPrefetchIterDataset` and `ThreadPrefetchDatasetIterator` are those of
`grain.experimental`. `MultiprocessPrefetchIterDataset` is the class of
``ds.mp_prefetch(...)``; Grain 0.2.18 no longer has it under this path, but
axlearn still imports it (for an isinstance check), so it is kept.
"""

from grain_dataset import ThreadPrefetchDatasetIterator as ThreadPrefetchDatasetIterator
from grain_dataset import ThreadPrefetchIterDataset as ThreadPrefetchIterDataset
from grain_mp import MultiprocessPrefetchIterDataset as MultiprocessPrefetchIterDataset

__all__ = [
    "MultiprocessPrefetchIterDataset",
    "ThreadPrefetchDatasetIterator",
    "ThreadPrefetchIterDataset",
]
