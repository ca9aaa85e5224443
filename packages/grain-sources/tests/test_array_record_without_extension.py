"""ArrayRecord without array_record's C++ extension (free-threaded CPython).

array-record has no free-threaded wheel, so it is the `arrayrecord` extra of
grain-sources. Without it, `ArrayRecordDataSource` reads local files with our
own reader of the format, and `write_array_record` raises an ImportError that
names the extra. On a free-threaded interpreter these tests run as they are; on
an ordinary one the extension's absence is simulated.

`data/small.array_record` was written by the C++ writer
(``write_array_record(RECORDS, path)``: group_size:1, zstd), so that these tests
need no writer.
"""

from __future__ import annotations

import importlib.util
import pickle
import sys
import threading
from pathlib import Path

import pytest

from grain_sources import ArrayRecordDataSource, _array_record, write_array_record
from grain_sources._array_record_remote import RemoteArrayRecordDataSource

if importlib.util.find_spec("cramjam") is None:
    pytest.importorskip("backports.zstd", reason="the fixture's chunks are zstd-compressed")

FIXTURE = Path(__file__).parent / "data" / "small.array_record"
RECORDS = [b"record-%03d" % i * (1 + i % 5) for i in range(64)]


@pytest.fixture
def no_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """array_record does not import, as on free-threaded CPython."""
    # Every level: an import looks up the full dotted name in sys.modules first.
    for name in ("array_record", "array_record.python", "array_record.python.array_record_module"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setattr(_array_record, "cpp_reader", lambda: None)


@pytest.mark.usefixtures("no_extension")
def test_local_files_are_read_by_our_reader(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # local reads need no fsspec
    before = set(threading.enumerate())
    source = ArrayRecordDataSource(str(FIXTURE))
    assert isinstance(source, RemoteArrayRecordDataSource)
    assert len(source) == len(RECORDS)
    assert source[5] == RECORDS[5]
    assert source.__getitems__([63, 0, 7, 7]) == [RECORDS[63], RECORDS[0], RECORDS[7], RECORDS[7]]
    assert list(source) == RECORDS
    clone = pickle.loads(pickle.dumps(source))
    assert clone[42] == RECORDS[42]
    # Positional reads in the calling thread: a later fork finds no thread of ours.
    # Threads started here, not a count: daemon threads of earlier tests in this
    # process (read-ahead pools that were shut down) may end meanwhile.
    assert set(threading.enumerate()) - before == set()


@pytest.mark.usefixtures("no_extension")
def test_zstd_chunks_decode_without_cramjam(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("backports.zstd", reason="needs PEP 784's zstd module (backports.zstd)")
    monkeypatch.setitem(sys.modules, "cramjam", None)  # no free-threaded wheel
    source = ArrayRecordDataSource(str(FIXTURE))
    assert source.__getitems__(list(range(64))) == RECORDS


@pytest.mark.usefixtures("no_extension")
def test_writing_names_the_extra():
    with pytest.raises(ImportError, match=r"grain-sources\[arrayrecord\]"):
        write_array_record([b"x"], "/nonexistent-dir/never-written")


def test_the_cpp_reader_reads_the_fixture_alike():
    if _array_record.cpp_reader() is None:
        pytest.skip("array_record is not installed (no free-threaded wheel)")
    source = ArrayRecordDataSource(str(FIXTURE))
    assert type(source) is ArrayRecordDataSource
    assert list(source) == RECORDS
