"""grain_sources: what grain pipelines read from.

Layout: the source layer. It imports numpy (array_record, pyarrow,
google-crc32c, fsspec, cramjam and backports.zstd only as optional extras:
array_record has no free-threaded wheel), never another grain package.
`_protocol` holds the RandomAccessDataSource contract and `reads_in_batches`,
the one place that decides whether a source may be read with `__getitems__`
(only where its class declares `batched_reads`); each
random-access source lives in a module of its own (`_array_record`, `_range`,
`_shared_memory`; `_array_record_remote` for URLs, over `_array_record_index`,
`_riegeli`, `_highwayhash` and the range-read layer `_object_store`);
`_tfrecord` and `_parquet` are resumable sequential readers
that grain_dataset wraps as IterDatasets (`_tfrecord_stream` reads TFRecord
from a stream the caller opened; `_record_files` numbers the records of
many files for record-range shards, `_record_source` reads them at random);
`_writer` makes ArrayRecord files; `_paths`, `_checks`, `_progress`,
`_crc32c` and `_resumable` are what they share.
"""

from grain_sources._array_record import ArrayRecordDataSource as ArrayRecordDataSource
from grain_sources._arrays import ArrayDataSource as ArrayDataSource
from grain_sources._block_shuffle import BlockShuffle as BlockShuffle
from grain_sources._object_store import ObjectAccessDeniedError as ObjectAccessDeniedError
from grain_sources._object_store import ObjectStore as ObjectStore
from grain_sources._object_store import ObjectStoreError as ObjectStoreError
from grain_sources._object_store import RetryPolicy as RetryPolicy
from grain_sources._object_store import is_url as is_url
from grain_sources._parquet import ParquetReader as ParquetReader
from grain_sources._protocol import RandomAccessDataSource as RandomAccessDataSource
from grain_sources._protocol import reads_in_batches as reads_in_batches
from grain_sources._range import RangeDataSource as RangeDataSource
from grain_sources._record_files import JsonLinesRecordFiles as JsonLinesRecordFiles
from grain_sources._record_files import ParquetRecordFiles as ParquetRecordFiles
from grain_sources._record_files import RecordFiles as RecordFiles
from grain_sources._record_files import RecordReader as RecordReader
from grain_sources._record_files import TFRecordRecordFiles as TFRecordRecordFiles
from grain_sources._record_source import RecordFilesDataSource as RecordFilesDataSource
from grain_sources._shared_memory import InMemoryDataSource as InMemoryDataSource
from grain_sources._shared_memory import SharedMemoryDataSource as SharedMemoryDataSource
from grain_sources._tfrecord import CorruptRecordError as CorruptRecordError
from grain_sources._tfrecord import TFRecordReader as TFRecordReader
from grain_sources._tfrecord import TruncatedRecordError as TruncatedRecordError
from grain_sources._tfrecord import write_tfrecord as write_tfrecord
from grain_sources._tfrecord_source import TFRecordDataSource as TFRecordDataSource
from grain_sources._tfrecord_source import write_tfrecord_index as write_tfrecord_index
from grain_sources._tfrecord_stream import TFRecordStreamReader as TFRecordStreamReader
from grain_sources._writer import write_array_record as write_array_record

__all__ = [
    "ArrayDataSource",
    "ArrayRecordDataSource",
    "BlockShuffle",
    "CorruptRecordError",
    "InMemoryDataSource",
    "JsonLinesRecordFiles",
    "ObjectAccessDeniedError",
    "ObjectStore",
    "ObjectStoreError",
    "ParquetReader",
    "ParquetRecordFiles",
    "RandomAccessDataSource",
    "RangeDataSource",
    "RecordFiles",
    "RecordFilesDataSource",
    "RecordReader",
    "RetryPolicy",
    "SharedMemoryDataSource",
    "TFRecordDataSource",
    "TFRecordReader",
    "TFRecordRecordFiles",
    "TFRecordStreamReader",
    "TruncatedRecordError",
    "is_url",
    "reads_in_batches",
    "write_array_record",
    "write_tfrecord",
    "write_tfrecord_index",
]
