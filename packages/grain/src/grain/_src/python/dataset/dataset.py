"""Grain's private module of the dataset base classes, which axlearn imports.

The same classes as `grain.MapDataset`, `grain.IterDataset` and
`grain.DatasetIterator`; import them from `grain`.
"""

from grain_dataset import DatasetIterator as DatasetIterator
from grain_dataset import IterDataset as IterDataset
from grain_dataset import MapDataset as MapDataset

__all__ = ["DatasetIterator", "IterDataset", "MapDataset"]
