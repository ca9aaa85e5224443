"""grain_sources: what grain pipelines read from.

Layout: the source layer. It imports numpy and array_record (pyarrow and
google-crc32c only as optional extras), never another grain package.
`_protocol` holds the RandomAccessDataSource contract; each random-access
source lives in a module of its own (`_array_record`, `_range`,
`_shared_memory`); `_tfrecord` and `_parquet` are resumable sequential readers
that grain_dataset wraps as IterDatasets; `_writer` makes ArrayRecord files;
`_paths`, `_checks`, `_progress`, `_crc32c` and `_resumable` are what they share.
"""

from grain_sources._array_record import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources._arrays import ArrayDataSource as ArrayDataSource
from grain_sources._parquet import ParquetReader as ParquetReader
from grain_sources._protocol import RandomAccessDataSource as RandomAccessDataSource
from grain_sources._range import RangeDataSource as RangeDataSource
from grain_sources._shared_memory import InMemoryDataSource as InMemoryDataSource
from grain_sources._shared_memory import SharedMemoryDataSource as SharedMemoryDataSource
from grain_sources._tfrecord import CorruptRecordError as CorruptRecordError
from grain_sources._tfrecord import TFRecordReader as TFRecordReader
from grain_sources._tfrecord import TruncatedRecordError as TruncatedRecordError
from grain_sources._tfrecord import write_tfrecord as write_tfrecord
from grain_sources._writer import write_array_record as write_array_record

__all__ = [
    "ArrayDataSource",
    "ArrayRecordDataSource",
    "CorruptRecordError",
    "InMemoryDataSource",
    "ParquetReader",
    "RandomAccessDataSource",
    "RangeDataSource",
    "SharedMemoryDataSource",
    "TFRecordReader",
    "TruncatedRecordError",
    "write_array_record",
    "write_tfrecord",
]
