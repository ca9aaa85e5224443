"""ArrayRecordDataSource: random access into one or many ArrayRecord files.

Index math: the files' record counts are summed once (`_ends`), so global
index i lives in file ``searchsorted(_ends, i, "right")`` at ``i - start``.

Reading: an ArrayRecordReader is stateful (`seek` then `read`) and holds the
GIL, so each read borrows a reader from a small per-file pool and returns it;
concurrent threads get readers of their own, and a pool never outgrows the
number of threads that read at once. ``read([i])`` costs time proportional to
the records in the file (it prepares the whole index), so single reads and small
per-file groups use ``seek`` + ``read``; only large groups use ``read(list)``,
whose per-record cost is lower once that set-up is paid.

Processes: the source pickles as its paths and record counts. Readers open
lazily in the process that reads, and a fork child never touches readers its
parent opened (their file offsets would be shared).

Without the C++ extension: array-record has no wheel for free-threaded CPython,
so it is an extra (``grain-sources[arrayrecord]``). Where it does not import,
local files are read like URLs, by our own reader of the format
(`_array_record_remote`) with positional reads (`_local_files`); writing still needs
the extension (`write_array_record` says so). See docs/freethreaded.md.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from grain_sources._checks import UnreadableFileError, record_index, record_indices
from grain_sources._file_index import by_file, locate
from grain_sources._object_store import RetryPolicy, is_url
from grain_sources._paths import PathLike, expand

if TYPE_CHECKING:
    from array_record.python.array_record_module import ArrayRecordReader

_log = logging.getLogger(__name__)

INSTALL_EXTENSION = (
    "pip install 'grain-sources[arrayrecord]' (array-record has no wheel for free-threaded "
    "CPython; there, local files are read by grain's own reader, whose zstd chunks need "
    "pip install 'grain-sources[arrayrecord-pure]')"
)


@functools.cache
def cpp_reader() -> Any:
    """array_record's ArrayRecordReader class, or None where the extension does not import."""
    try:
        from array_record.python.array_record_module import ArrayRecordReader
    except ImportError:
        return None
    return ArrayRecordReader


def _local_fallback(paths: Any) -> None:
    """Checks `paths` as the C++ path does (with Grain's wording); says once who reads them."""
    expand(paths)
    _log_fallback()


@functools.cache
def _log_fallback() -> None:
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    # On a GIL build the extension is only missing by choice; say what it costs.
    (_log.warning if gil else _log.info)(
        "array_record does not import: local ArrayRecord files are read by grain's own "
        "reader of the format (slower per record than the C++ reader); for the C++ reader: %s.",
        INSTALL_EXTENSION,
    )


DEFAULT_READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
"""Random-access reader options: no read-ahead, no reader thread pool (both slow
random reads down severalfold, measured in benchmarks/array_record.py)."""

# Per-file group size from which one read(list) beats a loop of seek+read.
_BATCH_READ_MIN = 512


def _close(reader: ArrayRecordReader) -> None:
    # close() re-raises the error a failed reader saw; it was reported when it happened.
    with contextlib.suppress(RuntimeError):
        reader.close()


class ArrayRecordDataSource:
    """Records of one or more ArrayRecord files, by global index.

    Args:
      paths: a file, a glob pattern (``"data/train-*"``), a sharded name
        (``"data/train@4"`` for ``train-00000-of-00004`` ...), or a list of
        these. Files are read in the order given (a glob's matches sorted).
        URLs (``"s3://bucket/train-*"``, ``"gs://bucket/train@4"``, any fsspec
        protocol) read straight from an object store; see below.
      reader_options: ArrayRecordReader options, as a string
        (``"readahead_buffer_size:0"``) or a dict of str to str as Grain takes
        them; the default suits random access. Local files only.
      filesystem: an fsspec filesystem to read the URLs with (its endpoint,
        credentials, options); None makes one from the URL's protocol and the
        environment. Passing one reads even local paths through it.
      retry: a `RetryPolicy` (tries, backoff, total deadline per request) for
        object stores; None uses the default (6 tries within 60 s).

    Every file is opened and checked when the source is created: a missing,
    empty, truncated or corrupt file raises an error naming it. Records are
    returned as bytes; decode them with a ``.map`` in the pipeline.

    Object stores: URLs are read by this library's own reader of the
    ArrayRecord format over range reads (the C++ reader reports 0 records for
    them): opening a file costs 2-3 requests, a record of a group_size:1 file
    one, a batch of records one concurrent round trip. Chunks are checked
    against their hashes; chunks of several records are cached. Transient
    errors are retried with jittered backoff; a missing object, denied access
    or a server that keeps failing raises an error naming the URL and the cause
    within the deadline. Needs ``pip install grain-sources[cloud]``.

    Example::

        grain_sources.write_array_record(records, "/data/train", num_shards=4)
        source = grain.sources.ArrayRecordDataSource("/data/train@4")
        ds = grain.MapDataset.source(source).shuffle(seed=0).map(decode)
    """

    # Declares that __getitems__(indices) returns [self[i] for i in indices] (see
    # grain_sources.RandomAccessDataSource): pipelines read many records per call.
    batched_reads: ClassVar[bool] = True
    # The C++ reader's threads do not survive fork: mp_prefetch starts its workers from
    # the fork server for a pipeline that holds this source (grain_mp._start).
    _grain_fork_unsafe: ClassVar[bool] = True

    def __new__(
        cls,
        paths: PathLike | Sequence[PathLike] | None = None,
        reader_options: str | Mapping[str, str] | None = None,
        *,
        filesystem: Any = None,
        retry: RetryPolicy | None = None,
        **options: Any,
    ) -> ArrayRecordDataSource:
        # URLs (or a filesystem) are read by our own reader; unpickling calls this
        # with no arguments and keeps the pickled class.
        if cls is ArrayRecordDataSource and paths is not None:
            listed = [paths] if isinstance(paths, str | os.PathLike) else paths
            urls = isinstance(listed, Sequence) and any(is_url(path) for path in listed)
            if urls or filesystem is not None or cpp_reader() is None:
                from grain_sources._array_record_remote import RemoteArrayRecordDataSource

                if not (urls or filesystem is not None):
                    _local_fallback(paths)
                return super().__new__(RemoteArrayRecordDataSource)
        return super().__new__(cls)

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        reader_options: str | Mapping[str, str] | None = None,
        *,
        filesystem: Any = None,
        retry: RetryPolicy | None = None,
    ):
        if isinstance(reader_options, Mapping):
            # Grain's form: {"readahead_buffer_size": "0"} is "readahead_buffer_size:0".
            reader_options = ",".join(f"{key}:{value}" for key, value in reader_options.items())
        self._options = DEFAULT_READER_OPTIONS if reader_options is None else reader_options
        if not isinstance(self._options, str):
            raise TypeError(
                f"`reader_options` must be a str like {DEFAULT_READER_OPTIONS!r} or a dict "
                f"of str to str, got {type(reader_options).__name__}."
            )
        self._files = tuple(expand(paths))
        counts = [self._count_records(path) for path in self._files]
        self._setup(np.cumsum(np.asarray(counts, dtype=np.int64)))

    def _setup(self, ends: np.ndarray) -> None:
        self._ends = ends
        self._starts = ends - np.diff(ends, prepend=0)
        # Python lists for single reads: bisect on a list beats numpy on one scalar.
        self._ends_list = ends.tolist()
        self._starts_list = self._starts.tolist()
        self._length = int(ends[-1]) if len(ends) else 0
        self._reset_readers()

    def _reset_readers(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: list[list[ArrayRecordReader]] = [[] for _ in self._files]
        self._closed = False

    def _count_records(self, path: str) -> int:
        if os.path.getsize(path) == 0:
            raise UnreadableFileError(
                f"{path!r} is empty (0 bytes): it is not an ArrayRecord file."
            )
        reader = self._open(path)
        try:
            count = reader.num_records()
            if count:
                options = reader.writer_options_string()
                if "group_size:1," not in f"{options},":
                    _log.warning(
                        "%s was written with %r: every random read decompresses a whole group; "
                        "write with group_size:1 for random access.",
                        path,
                        options,
                    )
            return count
        finally:
            _close(reader)

    def _open(self, path: str) -> ArrayRecordReader:
        reader_class = cpp_reader()
        if reader_class is None:  # unpickled where the extension is missing
            raise ImportError(
                f"reading {path!r} with the C++ reader needs array_record: " + INSTALL_EXTENSION,
                name="array_record",
            )
        try:
            reader = reader_class(path, self._options)
        except ValueError as error:
            raise ValueError(f"bad `reader_options` {self._options!r}: {error}") from None
        if not reader.ok():
            # The constructor never raises on a bad file; a read tells why it is bad.
            try:
                reader.read()
                reason = "the reader is not ok"
            except (RuntimeError, IndexError) as error:
                reason = str(error).split("; ", 1)[0] or "unreadable"
            finally:
                _close(reader)
            raise UnreadableFileError(
                f"{path!r} is not a readable ArrayRecord file ({reason}): it is corrupt, "
                "truncated or of another format."
            )
        return reader

    def _borrow(self, file: int) -> ArrayRecordReader:
        """An idle reader of `file`, or a new one; hand it back with `_give_back`."""
        if self._closed:
            raise ValueError(f"{self!r} is closed: create a new source to read again.")
        if self._pid != os.getpid():
            self._reset_readers()
        idle = self._idle[file]
        with self._lock:
            if idle:
                return idle.pop()
        return self._open(self._files[file])

    def _give_back(self, file: int, reader: ArrayRecordReader, failed: bool = False) -> None:
        # A reader that failed stays failed (not ok): it is never handed out again.
        if failed or self._closed or self._pid != os.getpid():
            _close(reader)
            return
        with self._lock:
            # Looked at again under the lock: a close() in another thread since the
            # check above has already emptied `_idle`, and would never close this one.
            if not self._closed:
                self._idle[file].append(reader)
                return
        _close(reader)

    def _read_failed(self, file: int, record: int, error: Exception) -> Exception:
        return RuntimeError(
            f"reading record {record} of {self._files[file]!r} failed: {error}. "
            "The file is corrupt or was changed after the source was created."
        )

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> bytes:
        if type(index) is not int or not 0 <= index < self._length:
            index = record_index(index, self._length, self)
        file = bisect.bisect_right(self._ends_list, index)
        record = index - self._starts_list[file]
        reader = self._borrow(file)
        try:
            reader.seek(record)
            value = reader.read()
        except BaseException as error:
            self._give_back(file, reader, failed=True)
            if isinstance(error, RuntimeError | IndexError):
                raise self._read_failed(file, record, error) from error
            raise
        self._give_back(file, reader)
        return value

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """The records at `indices`, reading each file once for all its indices."""
        indices = record_indices(indices, self._length, self)
        if len(self._files) == 1:
            return self._read_file(0, indices)
        files, local = locate(self._ends, self._starts, indices)
        first = int(files[0]) if len(files) else 0
        if not len(files) or (files == first).all():
            return self._read_file(first, local)
        out = np.empty(len(indices), dtype=object)
        for file, group in by_file(files):
            out[group] = self._read_file(file, local[group])
        return out.tolist()

    def _read_file(self, file: int, records: np.ndarray) -> list[bytes]:
        wanted = records.tolist()
        reader = self._borrow(file)
        try:
            out = self._read_with(reader, file, wanted)
        except BaseException:
            self._give_back(file, reader, failed=True)
            raise
        self._give_back(file, reader)
        return out

    def _read_with(self, reader: ArrayRecordReader, file: int, wanted: list[int]) -> list[bytes]:
        if len(wanted) >= _BATCH_READ_MIN:
            try:
                return reader.read(wanted)
            except (RuntimeError, IndexError):
                pass  # read again one by one below, to name the record that fails
        seek, read = reader.seek, reader.read
        out = []
        record = wanted[0] if wanted else 0
        try:
            for record in wanted:
                seek(record)
                out.append(read())
        except (RuntimeError, IndexError) as error:
            raise self._read_failed(file, record, error) from error
        return out

    def __iter__(self) -> Iterator[bytes]:
        step = 1024
        for start in range(0, self._length, step):
            yield from self.__getitems__(np.arange(start, min(start + step, self._length)))

    @property
    def paths(self) -> list[str]:
        """The files, in the order their records are numbered (a new list, as in Grain)."""
        return list(self._files)

    def num_records(self, file: int | None = None) -> int:
        """The records of file number `file`, or of all files when None."""
        if file is None:
            return self._length
        return int(self._ends[file] - self._starts[file])

    def close(self) -> None:
        """Closes every idle reader; readers in use close when returned."""
        self._closed = True
        with self._lock:
            idle, self._idle = self._idle, [[] for _ in self._files]
        for readers in idle:
            for reader in readers:
                _close(reader)

    def __enter__(self) -> ArrayRecordDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self._files, "options": self._options, "ends": self._ends}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._files = state["files"]
        self._options = state["options"]
        self._setup(state["ends"])

    def __repr__(self) -> str:
        files = self._files
        shown = repr(files[0]) if len(files) == 1 else f"{files[0]!r} ... {files[-1]!r}"
        count = "1 file" if len(files) == 1 else f"{len(files)} files"
        return f"ArrayRecordDataSource({count}: {shown}, len={self._length})"
