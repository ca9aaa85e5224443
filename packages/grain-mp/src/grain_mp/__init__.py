"""grain_mp: worker processes and the DataLoader.

Layout: the multiprocessing layer, above grain_dataset (which it extends with
`IterDataset.mp_prefetch` through grain_dataset's hook). `_options` holds
MultiprocessingOptions; `_prefetch` runs a pipeline in worker processes and
merges their outputs round robin with an exact state.
"""

from grain_mp._options import MultiprocessingOptions as MultiprocessingOptions
from grain_mp._prefetch import MultiprocessPrefetchIterDataset as MultiprocessPrefetchIterDataset

__all__ = ["MultiprocessPrefetchIterDataset", "MultiprocessingOptions"]
