"""grain_sources: data sources for grain pipelines.

Layout: the source layer. It imports numpy and array_record, never another grain
package. It will own the RandomAccessDataSource protocol, ArrayRecordDataSource,
RangeDataSource, in-memory and shared-memory sources, and resumable file readers.

Not built yet: this package holds only its face. Its API arrives with the
issue that builds the layer; nothing here pretends to work.
"""

__all__: list[str] = []
