"""grain.transforms: the transform protocols that pipeline stages accept.

Plain callables work wherever a transform does; these classes name the method a
stage calls and must be picklable so worker processes can run them.
`Transformation` is any one of them and `Transformations` a sequence of them
(what ``ds.apply(...)`` and a DataLoader's `operations` take).
"""

from grain_dataset import Batch as Batch
from grain_dataset import DatasetSelectionMap as DatasetSelectionMap
from grain_dataset import FilterTransform as Filter
from grain_dataset import FlatMapTransform as FlatMap
from grain_dataset import MapTransform as Map
from grain_dataset import MapWithIndex as MapWithIndex
from grain_dataset import RandomMapTransform as RandomMap
from grain_dataset import TfRandomMap as TfRandomMap
from grain_dataset import Transformation as Transformation
from grain_dataset import Transformations as Transformations

__all__ = [
    "Batch",
    "DatasetSelectionMap",
    "Filter",
    "FlatMap",
    "Map",
    "MapWithIndex",
    "RandomMap",
    "TfRandomMap",
    "Transformation",
    "Transformations",
]
