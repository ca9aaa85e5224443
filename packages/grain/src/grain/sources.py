"""grain.sources: what pipelines read from."""

from grain_sources import ArrayDataSource as ArrayDataSource
from grain_sources import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources import InMemoryDataSource as InMemoryDataSource
from grain_sources import RandomAccessDataSource as RandomAccessDataSource
from grain_sources import RangeDataSource as RangeDataSource
from grain_sources import SharedMemoryDataSource as SharedMemoryDataSource

__all__ = [
    "ArrayDataSource",
    "ArrayRecordDataSource",
    "InMemoryDataSource",
    "RandomAccessDataSource",
    "RangeDataSource",
    "SharedMemoryDataSource",
]
