"""grain_sources: data sources for grain pipelines.

Layout: the source layer. It imports numpy and array_record, never another grain
package. Built so far: the RandomAccessDataSource protocol (`_protocol`).
ArrayRecordDataSource, RangeDataSource, in-memory and shared-memory sources and
resumable file readers arrive with the issue that builds this layer.
"""

from grain_sources._protocol import RandomAccessDataSource as RandomAccessDataSource

__all__ = ["RandomAccessDataSource"]
