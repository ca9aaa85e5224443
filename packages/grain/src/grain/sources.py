"""grain.sources: what pipelines read from."""

from grain_sources import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources import RandomAccessDataSource as RandomAccessDataSource
from grain_sources import RangeDataSource as RangeDataSource

__all__ = ["ArrayRecordDataSource", "RandomAccessDataSource", "RangeDataSource"]
