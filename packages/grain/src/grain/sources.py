"""grain.sources: what pipelines read from."""

from grain_sources import RandomAccessDataSource as RandomAccessDataSource

__all__ = ["RandomAccessDataSource"]
