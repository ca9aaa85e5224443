"""grain_sources: what grain pipelines read from.

Layout: the source layer. It imports numpy and array_record (pyarrow and
google-crc32c only as optional extras), never another grain package.
`_protocol` holds the RandomAccessDataSource contract; each source lives in a
module of its own (`_array_record`, `_range`); `_writer` makes ArrayRecord
files; `_paths` and `_checks` are the argument handling they share.
"""

from grain_sources._array_record import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources._protocol import RandomAccessDataSource as RandomAccessDataSource
from grain_sources._range import RangeDataSource as RangeDataSource
from grain_sources._writer import write_array_record as write_array_record

__all__ = [
    "ArrayRecordDataSource",
    "RandomAccessDataSource",
    "RangeDataSource",
    "write_array_record",
]
