"""grain.multiprocessing: worker-process options and shared-memory arrays."""

from grain_mp import MultiprocessingOptions as MultiprocessingOptions
from grain_mp import SharedMemoryArray as SharedMemoryArray
from grain_mp import SharedMemoryArrayMetadata as SharedMemoryArrayMetadata

__all__ = ["MultiprocessingOptions", "SharedMemoryArray", "SharedMemoryArrayMetadata"]
