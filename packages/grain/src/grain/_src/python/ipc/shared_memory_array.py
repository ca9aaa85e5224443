"""Grain 0.2.18's private path of the shared-memory array, which Flax imports.

The same classes as `grain.multiprocessing.SharedMemoryArray` and
`grain.multiprocessing.SharedMemoryArrayMetadata`; import them from there.
"""

from grain_mp import SharedMemoryArray as SharedMemoryArray
from grain_mp import SharedMemoryArrayMetadata as SharedMemoryArrayMetadata

__all__ = ["SharedMemoryArray", "SharedMemoryArrayMetadata"]
