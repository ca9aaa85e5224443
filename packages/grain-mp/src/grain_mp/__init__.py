"""grain_mp: worker processes and the DataLoader.

Layout: the multiprocessing layer, above grain_dataset (which it extends with
`IterDataset.mp_prefetch` through grain_dataset's hook). `_options` holds
MultiprocessingOptions; `_mp_prefetch` is mp_prefetch's entry, which plans
(positional or per worker) and merges the workers' outputs in order with an
exact state; `_mp_parent` is the per-worker stage and its round robin,
`_mp_worker` the loop in each worker, `_executor` the interface of who runs
those loops and `_process_executor` its worker processes; `_transport` moves
elements' numpy arrays through reused shared memory; `_shm_array` is the public
SharedMemoryArray; `_sweep` names segments by run and removes those of dead runs;
`_autotune` picks worker and buffer sizes from a measured sample; `_data_loader`
is the DataLoader, `_operations` plans which of its operations run in the
workers, `_loader_pipeline` builds it as one Dataset pipeline (with
`_loader_positions` reading its positions and `_record_stage` running record
operations), `_loader_state` is its checkpoint format, `_record_ops`
and `_pack_op` are Grain's DataLoader operations, `_load` is `grain.load`;
`_ray_options` is RayWorkers, `_ray_executor` runs the workers on Ray actors and
`_ray_pool` keeps started actors between runs;
`_multithread` is mp_prefetch's slicing and round robin with threads;
`_elastic` and `_elastic_plan` are ElasticIterator (ELASTIC.md).
The public module `worker_env` is the environment every worker process starts
with (accelerators hidden), used by the `grain` package's conversion workers too.

`mp_prefetch` is what `IterDataset.mp_prefetch` calls (grain_dataset imports it
lazily, by this public name); `sweep_dead_segments` reclaims the shared memory
of killed runs, as the out-of-room error suggests.
"""

from grain_mp._autotune import PerformanceConfig as PerformanceConfig
from grain_mp._autotune import pick_performance_config as pick_performance_config
from grain_mp._data_loader import DataLoader as DataLoader
from grain_mp._data_loader import DataLoaderIterator as DataLoaderIterator
from grain_mp._data_loader import PyGrainDatasetIterator as PyGrainDatasetIterator
from grain_mp._data_loader import resolve_worker_count as resolve_worker_count
from grain_mp._elastic import ElasticIterator as ElasticIterator
from grain_mp._load import load as load
from grain_mp._mp_prefetch import MultiprocessPrefetchIterDataset as MultiprocessPrefetchIterDataset
from grain_mp._mp_prefetch import mp_prefetch as mp_prefetch
from grain_mp._multithread import multithread_prefetch as multithread_prefetch
from grain_mp._options import MultiprocessingOptions as MultiprocessingOptions
from grain_mp._pack_op import PackAndBatchOperation as PackAndBatchOperation
from grain_mp._ray_options import RayWorkers as RayWorkers
from grain_mp._record_ops import BatchOperation as BatchOperation
from grain_mp._record_ops import FilterOperation as FilterOperation
from grain_mp._record_ops import MapOperation as MapOperation
from grain_mp._record_ops import Operation as Operation
from grain_mp._record_ops import RandomMapOperation as RandomMapOperation
from grain_mp._shm_array import SharedMemoryArray as SharedMemoryArray
from grain_mp._shm_array import SharedMemoryArrayMetadata as SharedMemoryArrayMetadata
from grain_mp._sweep import sweep_dead_segments as sweep_dead_segments

__all__ = [
    "BatchOperation",
    "DataLoader",
    "DataLoaderIterator",
    "ElasticIterator",
    "FilterOperation",
    "MapOperation",
    "MultiprocessPrefetchIterDataset",
    "MultiprocessingOptions",
    "Operation",
    "PackAndBatchOperation",
    "PerformanceConfig",
    "PyGrainDatasetIterator",
    "RandomMapOperation",
    "RayWorkers",
    "SharedMemoryArray",
    "SharedMemoryArrayMetadata",
    "load",
    "mp_prefetch",
    "multithread_prefetch",
    "pick_performance_config",
    "resolve_worker_count",
    "sweep_dead_segments",
]
