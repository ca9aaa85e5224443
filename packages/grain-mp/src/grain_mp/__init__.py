"""grain_mp: worker processes and the DataLoader.

Layout: the multiprocessing layer, above grain_dataset (which it extends with
`IterDataset.mp_prefetch` through grain_dataset's hook). `_options` holds
MultiprocessingOptions; `_prefetch` runs a pipeline in worker processes and
merges their outputs round robin with an exact state; `_transport` moves
elements' numpy arrays through reused shared memory; `_shm_array` is the public
SharedMemoryArray; `_sweep` names segments by run and removes those of dead runs;
`_autotune` picks worker and buffer sizes from a measured sample; `_data_loader`
and `_operations` build the DataLoader on the Dataset API.
"""

from grain_mp._autotune import PerformanceConfig as PerformanceConfig
from grain_mp._autotune import pick_performance_config as pick_performance_config
from grain_mp._data_loader import DataLoader as DataLoader
from grain_mp._data_loader import PyGrainDatasetIterator as PyGrainDatasetIterator
from grain_mp._options import MultiprocessingOptions as MultiprocessingOptions
from grain_mp._prefetch import MultiprocessPrefetchIterDataset as MultiprocessPrefetchIterDataset
from grain_mp._shm_array import SharedMemoryArray as SharedMemoryArray
from grain_mp._shm_array import SharedMemoryArrayMetadata as SharedMemoryArrayMetadata

__all__ = [
    "DataLoader",
    "MultiprocessPrefetchIterDataset",
    "MultiprocessingOptions",
    "PerformanceConfig",
    "PyGrainDatasetIterator",
    "SharedMemoryArray",
    "SharedMemoryArrayMetadata",
    "pick_performance_config",
]
