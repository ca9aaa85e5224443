"""ArrayRecordDataSource: paths, global indices across shards, errors, pickling, threads,
processes, file descriptors, and use in pipelines. Every file is a real ArrayRecord file
written in tmp_path."""

import concurrent.futures
import gc
import logging
import multiprocessing
import operator
import os
import pathlib
import pickle
import random
import re
import sys
import threading

import numpy as np
import pytest

import grain
from grain_sources import ArrayRecordDataSource, RandomAccessDataSource

ArrayRecordWriter = pytest.importorskip(
    "array_record.python.array_record_module", reason="array-record has no free-threaded wheel"
).ArrayRecordWriter

# Records per file of the multi-file fixture: unequal sizes, an empty file in the middle,
# and two files large enough for a whole-file request to take the read(list) path (>= 512).
COUNTS = (3, 700, 0, 1, 530, 17)


def make_record(file: int, index: int) -> bytes:
    """A record that says where it was written, of varying length (0 to 16 bytes of padding)."""
    return f"f{file}/r{index}|".encode() + bytes([65 + index % 26]) * (index % 17)


def write_file(path, records, options="group_size:1") -> str:
    """Writes `records` with the array_record writer itself (not the module under test)."""
    writer = ArrayRecordWriter(os.fspath(path), options)
    assert writer.ok()
    for record in records:
        writer.write(record)
    writer.close()
    return os.fspath(path)


@pytest.fixture
def shards(tmp_path):
    """Files of COUNTS records, and all their records in global order."""
    paths, expected = [], []
    for file, count in enumerate(COUNTS):
        records = [make_record(file, j) for j in range(count)]
        paths.append(write_file(tmp_path / f"part{file}.array_record", records))
        expected.extend(records)
    return paths, expected


@pytest.fixture
def source(shards):
    paths, _ = shards
    with ArrayRecordDataSource(paths) as src:
        yield src


def random_bytes(count: int, size: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(size) for _ in range(count)]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- paths -----------------------------------------------------------------------------------


def test_one_file_reads_every_record_including_empty_ones(tmp_path):
    records = [b"alpha", b"", b"\x00\x01\x02", b"x" * 10_000, b"omega"]
    path = write_file(tmp_path / "one.array_record", records)
    src = ArrayRecordDataSource(path)
    assert len(src) == len(records)
    assert src.paths == [path]
    assert src.num_records() == len(records)
    assert src.num_records(0) == len(records)
    got = [src[i] for i in range(len(src))]
    assert got == records
    assert all(type(record) is bytes for record in got)
    assert list(src) == records
    assert isinstance(src, RandomAccessDataSource)
    src.close()


def test_list_of_files_numbers_records_globally_in_the_given_order(shards):
    paths, expected = shards
    src = ArrayRecordDataSource(paths)
    assert len(src) == sum(COUNTS) == len(expected)
    assert src.paths == list(paths)
    assert [src.num_records(i) for i in range(len(COUNTS))] == list(COUNTS)
    assert [src[i] for i in range(len(src))] == expected
    # The boundaries around the empty file in the middle.
    assert src[3 + 699] == make_record(1, 699)
    assert src[3 + 700] == make_record(3, 0)
    assert src[3 + 700 + 1] == make_record(4, 0)
    # Reversing the list reverses the file order.
    backwards = ArrayRecordDataSource(paths[::-1])
    assert backwards[0] == make_record(5, 0)
    assert backwards[len(src) - 1] == make_record(0, 2)
    src.close()
    backwards.close()


def test_glob_reads_matches_in_sorted_order_and_skips_directories(tmp_path):
    # Created out of order, so that creation (or directory) order is not the sorted order.
    for name, count in [("shard-c", 2), ("shard-a", 3), ("shard-b", 1)]:
        write_file(tmp_path / name, [f"{name}:{j}".encode() for j in range(count)])
    (tmp_path / "shard-dir").mkdir()
    write_file(tmp_path / "other", [b"not matched"])
    src = ArrayRecordDataSource(str(tmp_path / "shard-*"))
    assert src.paths == [str(tmp_path / name) for name in ["shard-a", "shard-b", "shard-c"]]
    expected = [b"shard-a:0", b"shard-a:1", b"shard-a:2", b"shard-b:0", b"shard-c:0"]
    assert list(src) == [*expected, b"shard-c:1"]
    src.close()


def test_sharded_pattern_expands_to_all_shards_in_order(tmp_path):
    counts = [4, 0, 2]
    expected = []
    for shard, count in enumerate(counts):
        records = [f"shard{shard}:{j}".encode() for j in range(count)]
        write_file(tmp_path / f"train-{shard:05d}-of-00003", records)
        expected.extend(records)
    src = ArrayRecordDataSource(str(tmp_path / "train@3"))
    assert src.paths == [str(tmp_path / f"train-{i:05d}-of-00003") for i in range(3)]
    assert list(src) == expected
    assert src[4] == b"shard2:0"
    # A sharded pattern can also be one entry of a list, mixed with plain files.
    extra = write_file(tmp_path / "extra", [b"extra"])
    mixed = ArrayRecordDataSource([extra, str(tmp_path / "train@3")])
    assert list(mixed) == [b"extra", *expected]
    src.close()
    mixed.close()


class CustomPath:
    """An os.PathLike that is not a pathlib path."""

    def __init__(self, path):
        self._path = os.fspath(path)

    def __fspath__(self):
        return self._path


def test_path_like_objects_are_accepted(shards, tmp_path):
    paths, expected = shards
    as_pathlib = [pathlib.Path(path) for path in paths]
    as_custom = [CustomPath(path) for path in paths]
    for given in [as_pathlib, as_custom, tuple(as_pathlib)]:
        src = ArrayRecordDataSource(given)
        assert src.paths == list(paths)
        assert all(type(path) is str for path in src.paths)
        assert src.__getitems__(list(range(len(src)))) == expected
        src.close()
    single = ArrayRecordDataSource(pathlib.Path(paths[0]))
    assert list(single) == expected[:3]
    single.close()
    pattern = ArrayRecordDataSource(tmp_path / "part*.array_record")
    assert pattern.paths == sorted(paths)
    pattern.close()


# -- indexing ---------------------------------------------------------------------------------


def test_negative_indices_count_from_the_end(source, shards):
    _, expected = shards
    n = len(expected)
    for index in [-1, -2, -17, -18, -n, -n + 3]:
        assert source[index] == expected[index]
    assert source.__getitems__([-1, 0, -n]) == [expected[-1], expected[0], expected[0]]


@pytest.mark.parametrize(
    "convert",
    [
        list,
        tuple,
        lambda xs: np.asarray(xs, dtype=np.int32),
        lambda xs: np.asarray(xs, dtype=np.int64),
        lambda xs: np.asarray(xs, dtype=np.uint64),
        lambda xs: [np.int64(x) for x in xs],
    ],
    ids=["list", "tuple", "int32", "int64", "uint64", "list-of-np-int64"],
)
def test_getitems_accepts_index_sequences_and_arrays(source, shards, convert):
    _, expected = shards
    rng = random.Random(1)
    indices = [rng.randrange(len(expected)) for _ in range(300)]
    got = source.__getitems__(convert(indices))
    assert got == [expected[i] for i in indices]
    assert type(got) is list


def test_getitems_of_nothing_is_an_empty_list(source):
    assert source.__getitems__([]) == []
    assert source.__getitems__(np.array([], dtype=np.int64)) == []


def test_getitems_across_files_in_random_order_with_duplicates(source, shards):
    _, expected = shards
    rng = random.Random(2)
    for size in [1, 2, 7, 50, 400]:
        indices = [rng.randrange(len(expected)) for _ in range(size)]
        indices += indices[: size // 3]  # duplicates
        rng.shuffle(indices)
        assert source.__getitems__(indices) == [expected[i] for i in indices]


@pytest.mark.parametrize("group", [1, 10, 511, 512, 513, 700, 1400])
def test_getitems_with_small_and_large_groups_per_file(source, shards, group):
    """Groups of >= 512 indices of one file are read with read(list), smaller ones record by
    record; both must return the records in the requested order, duplicates included."""
    _, expected = shards
    rng = random.Random(group)
    big_file = range(3, 703)  # the 700 records of file 1
    other_big = range(704, 1234)  # the 530 records of file 4
    indices = [rng.choice(big_file) for _ in range(group)]
    indices += [rng.choice(other_big) for _ in range(group // 2)]
    indices += [0, 2, 703, 1234]  # files 0, 3 and 5
    rng.shuffle(indices)
    assert source.__getitems__(indices) == [expected[i] for i in indices]
    # The same group alone (a single-file request) and in a single-file source.
    ones = [i for i in indices if i in big_file]
    assert source.__getitems__(ones) == [expected[i] for i in ones]


def test_getitems_whole_file_in_reverse_order(tmp_path):
    records = [f"r{j}".encode() for j in range(600)]
    src = ArrayRecordDataSource(write_file(tmp_path / "f", records))
    order = list(range(599, -1, -1))
    assert src.__getitems__(order) == records[::-1]
    assert src.__getitems__(order + order) == records[::-1] * 2
    src.close()


def test_a_file_without_group_size_1_is_read_and_logged(tmp_path, caplog):
    records = [f"r{j}".encode() for j in range(40)]
    path = write_file(tmp_path / "grouped", records, options="group_size:8")
    with caplog.at_level(logging.WARNING, logger="grain_sources"):
        src = ArrayRecordDataSource(path)
    assert any(path in message and "group_size:1" in message for message in caplog.messages)
    assert [src[i] for i in range(40)] == records
    assert src.__getitems__(list(range(39, -1, -1))) == records[::-1]
    src.close()


# -- bad paths and options --------------------------------------------------------------------


def test_nonexistent_path_is_named(tmp_path):
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        ArrayRecordDataSource(missing)
    good = write_file(tmp_path / "good", [b"x"])
    with pytest.raises(FileNotFoundError, match=re.escape(missing)):
        ArrayRecordDataSource([good, missing])


def test_glob_without_matches_is_named(tmp_path):
    write_file(tmp_path / "data", [b"x"])
    (tmp_path / "dir-1").mkdir()  # a directory matching the pattern does not count
    for pattern in [str(tmp_path / "nothing-*"), str(tmp_path / "dir-*")]:
        with pytest.raises(FileNotFoundError, match=re.escape(pattern)):
            ArrayRecordDataSource(pattern)


def test_directory_is_rejected_with_its_name(tmp_path):
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        ArrayRecordDataSource(str(tmp_path))
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        ArrayRecordDataSource([tmp_path])


def test_sharded_pattern_with_a_missing_shard_names_it(tmp_path):
    for shard in [0, 2]:
        write_file(tmp_path / f"data-{shard:05d}-of-00003", [b"x"])
    pattern = str(tmp_path / "data@3")
    with pytest.raises(FileNotFoundError) as info:
        ArrayRecordDataSource(pattern)
    message = str(info.value)
    assert pattern in message
    assert str(tmp_path / "data-00001-of-00003") in message
    assert str(tmp_path / "data-00000-of-00003") + "'" not in message.split("missing")[-1]
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "data@0"))):
        ArrayRecordDataSource(str(tmp_path / "data@0"))


def test_zero_byte_file_is_named(tmp_path):
    path = tmp_path / "empty.array_record"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        ArrayRecordDataSource(str(path))


def test_a_valid_file_with_no_records_gives_an_empty_source(tmp_path):
    src = ArrayRecordDataSource(write_file(tmp_path / "none", []))
    assert len(src) == 0
    assert list(src) == []
    assert src.__getitems__([]) == []
    with pytest.raises(IndexError):
        src[0]
    src.close()


@pytest.mark.parametrize("cut", ["1 byte", "1000 bytes", "64 KiB", "half", "all but 1 byte"])
def test_truncated_file_is_named(tmp_path, cut):
    path = write_file(tmp_path / "whole", random_bytes(1000, 200))
    data = pathlib.Path(path).read_bytes()
    keep = {
        "1 byte": 1,
        "1000 bytes": 1000,
        "64 KiB": 65536,
        "half": len(data) // 2,
        "all but 1 byte": len(data) - 1,
    }[cut]
    truncated = tmp_path / "truncated.array_record"
    truncated.write_bytes(data[:keep])
    with pytest.raises(ValueError, match=re.escape(str(truncated))):
        ArrayRecordDataSource(str(truncated))


@pytest.mark.parametrize("size", [100, 100_000])
def test_file_of_another_format_is_named(tmp_path, size):
    path = tmp_path / "notes.txt"
    path.write_bytes((b"just some text, not an ArrayRecord file\n" * (size // 40 + 1))[:size])
    with pytest.raises(ValueError, match=re.escape(str(path))):
        ArrayRecordDataSource(str(path))


@pytest.mark.parametrize("entry", [1, None, b"bytes/path", 2.5, ["nested"]])
def test_non_path_entries_are_rejected(tmp_path, entry):
    good = write_file(tmp_path / "good", [b"x"])
    with pytest.raises(TypeError, match="`paths`"):
        ArrayRecordDataSource([good, entry])


@pytest.mark.parametrize("paths", [None, 3, b"bytes/path"])
def test_paths_of_the_wrong_type_are_rejected(paths):
    with pytest.raises(TypeError, match="`paths`"):
        ArrayRecordDataSource(paths)


@pytest.mark.parametrize("paths", [[], (), ""])
def test_no_paths_is_rejected(paths):
    error = ValueError if paths != "" else FileNotFoundError
    with pytest.raises(error, match="`paths`" if paths != "" else "does not exist"):
        ArrayRecordDataSource(paths)


@pytest.mark.parametrize("options", [5, b"max_parallelism:0", ["max_parallelism:0"]])
def test_reader_options_of_the_wrong_type(shards, options):
    paths, _ = shards
    with pytest.raises(TypeError, match="`reader_options`"):
        ArrayRecordDataSource(paths, reader_options=options)


@pytest.mark.parametrize(
    ("options", "named"),
    [("no_such_option:1", "no_such_option"), ("readahead_buffer_size:lots", "lots")],
)
def test_unknown_or_bad_reader_options(shards, options, named):
    paths, _ = shards
    with pytest.raises(ValueError, match="`reader_options`") as info:
        ArrayRecordDataSource(paths, reader_options=options)
    assert named in str(info.value)


def test_valid_reader_options_read_the_same(shards):
    paths, expected = shards
    src = ArrayRecordDataSource(paths, reader_options="readahead_buffer_size:16K")
    assert list(src) == expected
    src.close()


def test_reader_options_as_grains_dict_positionally(shards):
    paths, expected = shards
    src = ArrayRecordDataSource(paths, {"readahead_buffer_size": "16K", "max_parallelism": "1"})
    assert list(src) == expected
    src.close()
    with pytest.raises(ValueError, match="no_such_option"):
        ArrayRecordDataSource(paths, {"no_such_option": "1"})


# -- bad indices ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [1234 + 17, 10**6, 2**63, 2**80, -(1234 + 18), -(2**70)])
def test_index_out_of_range(source, index):
    assert len(source) == 1234 + 17
    with pytest.raises(IndexError, match=re.escape(str(index))):
        source[index]


@pytest.mark.parametrize("index", [1.0, 0.5, "0", True, False, np.True_, None, np.float64(1)])
def test_non_integer_index(source, index):
    with pytest.raises(TypeError, match="index"):
        source[index]


@pytest.mark.parametrize(
    "indices",
    [
        [0, 1, 1251],
        [5, -1252],
        np.array([0, 99999], dtype=np.int64),
        np.array([3, 2**64 - 1], dtype=np.uint64),
        [0, 2**70],
    ],
    ids=["past-end", "negative", "int64", "uint64-max", "huge"],
)
def test_getitems_out_of_range(source, indices):
    bad = [i for i in np.asarray(indices, dtype=object).tolist() if not -1251 <= i < 1251]
    with pytest.raises(IndexError, match=re.escape(str(bad[0]))):
        source.__getitems__(indices)


@pytest.mark.parametrize("indices", [[0.0, 1.0], np.array([1.5]), [True, False], ["0"], [0, None]])
def test_getitems_non_integers(source, indices):
    with pytest.raises(TypeError, match="integer"):
        source.__getitems__(indices)


# -- corrupt data -----------------------------------------------------------------------------


def corrupt_in_the_middle(tmp_path):
    """A valid file whose data region has 16 bytes flipped at size // 2, and its records."""
    records = random_bytes(1000, 200, seed=3)  # incompressible: the data fills the file
    path = pathlib.Path(write_file(tmp_path / "corrupt.array_record", records))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))
    return str(path), records


def test_corruption_in_the_middle_raises_naming_the_file_never_a_wrong_record(tmp_path):
    path, records = corrupt_in_the_middle(tmp_path)
    # The footer and index are intact, so creation succeeds; damage shows on read.
    failed = []
    for index in range(len(records)):
        src = ArrayRecordDataSource(path)  # fresh: each read below is independent
        try:
            record = src[index]
        except RuntimeError as error:
            message = str(error)
            failed.append(index)
        else:
            assert record == records[index]
            continue
        assert path in message
        assert f"record {index}" in message
    assert failed, "flipping 16 bytes of the data region must make some record unreadable"
    assert len(failed) < len(records)


def test_a_failed_read_does_not_poison_later_reads(tmp_path):
    path, records = corrupt_in_the_middle(tmp_path)
    bad = next(i for i in range(len(records)) if not reads_ok(path, i, records))
    src = ArrayRecordDataSource(path)
    assert src[1] == records[1]  # a pooled reader exists before the failure
    with pytest.raises(RuntimeError, match=re.escape(path)):
        src[bad]
    assert src[0] == records[0]
    good = [i for i in range(0, len(records), 3) if i != bad]
    assert src.__getitems__(good) == [records[i] for i in good]
    with pytest.raises(RuntimeError, match=re.escape(path)):
        src.__getitems__([2, bad, 4])
    assert src[len(records) - 1] == records[-1]


def test_close_after_a_failed_read_does_not_raise(tmp_path):
    path, records = corrupt_in_the_middle(tmp_path)
    bad = next(i for i in range(len(records)) if not reads_ok(path, i, records))
    gc.collect()
    baseline = open_fds()
    src = ArrayRecordDataSource(path)
    assert src[0] == records[0]
    with pytest.raises(RuntimeError):
        src[bad]
    with pytest.raises(RuntimeError):
        src.__getitems__([bad, 0])
    src.close()
    gc.collect()
    assert open_fds() == baseline  # neither the failed readers nor the good one leak


def reads_ok(path, index, records) -> bool:
    src = ArrayRecordDataSource(path)
    try:
        return src[index] == records[index]
    except RuntimeError:
        return False


def test_getitems_on_corrupt_data_raises_naming_the_file(tmp_path):
    path, records = corrupt_in_the_middle(tmp_path)
    for indices in [list(range(len(records))), list(range(len(records) - 1, 0, -3))]:
        src = ArrayRecordDataSource(path)
        with pytest.raises(RuntimeError, match=re.escape(path)):
            src.__getitems__(indices)


def test_getitems_error_names_the_record_that_failed(tmp_path):
    path, records = corrupt_in_the_middle(tmp_path)
    bad = next(i for i in range(len(records)) if not reads_ok(path, i, records))
    src = ArrayRecordDataSource(path)
    with pytest.raises(RuntimeError, match=f"record {bad} of"):
        src.__getitems__([0, 1, bad])


# -- pickling ---------------------------------------------------------------------------------


def test_pickle_before_and_after_reading(source, shards):
    _, expected = shards
    fresh = pickle.loads(pickle.dumps(source))
    assert len(fresh) == len(expected)
    assert fresh.paths == source.paths
    assert list(fresh) == expected
    source.__getitems__(list(range(0, len(expected), 5)))  # readers are open now
    blob = pickle.dumps(source)
    copy = pickle.loads(blob)
    assert copy.__getitems__(list(range(len(expected)))[::-1]) == expected[::-1]
    assert copy[-1] == expected[-1]
    assert source[7] == expected[7]  # the original still reads
    # The pickle holds paths and counts, not records.
    assert len(blob) < 2000 < sum(map(len, expected))
    assert make_record(1, 699) not in blob
    copy.close()
    fresh.close()


def test_pickle_keeps_reader_options(shards):
    paths, expected = shards
    src = ArrayRecordDataSource(paths, reader_options="readahead_buffer_size:16K")
    copy = pickle.loads(pickle.dumps(src))
    assert b"readahead_buffer_size:16K" in pickle.dumps(src)
    assert list(copy) == expected
    src.close()
    copy.close()


# -- threads and processes --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_threads_read_concurrently(source, shards):
    _, expected = shards
    n = len(expected)

    def work(seed):
        rng = random.Random(seed)
        for _ in range(150):
            index = rng.randrange(-n, n)
            if source[index] != expected[index]:
                return f"source[{index}] is wrong"
            indices = [rng.randrange(n) for _ in range(rng.choice([1, 5, 60, 600]))]
            if source.__getitems__(indices) != [expected[i] for i in indices]:
                return f"__getitems__ of {len(indices)} indices is wrong"
        return None

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, between a seek and its read too
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            errors = list(pool.map(work, range(8)))
    finally:
        sys.setswitchinterval(interval)
    assert errors == [None] * 8


def read_in_child(src, indices, conn):
    """Runs in a forked child that inherited `src` (and its open readers)."""
    try:
        conn.send((os.getpid(), [src[i] for i in indices], src.__getitems__(indices)))
    except BaseException as error:
        conn.send(repr(error))
    finally:
        conn.close()


@pytest.mark.timeout(60)
def test_fork_child_inherits_a_source_with_open_readers(source, shards):
    _, expected = shards
    indices = list(range(0, len(expected), 7))[::-1]
    assert source.__getitems__(indices) == [expected[i] for i in indices]  # readers open now
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=read_in_child, args=(source, indices, send))
    child.start()
    send.close()
    result = receive.recv()
    child.join(30)
    receive.close()
    assert child.exitcode == 0
    assert not isinstance(result, str), result
    pid, singles, batch = result
    assert pid != os.getpid()
    assert singles == batch == [expected[i] for i in indices]
    # The parent's readers were not disturbed by the child's reads.
    assert source.__getitems__(indices) == [expected[i] for i in indices]
    assert [source[i] for i in indices[:50]] == [expected[i] for i in indices[:50]]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_read_a_pickled_source(source, shards, method):
    _, expected = shards
    source.__getitems__([0, 10, 900, 1240])  # the parent has open readers before workers start
    rng = random.Random(4)
    singles = [rng.randrange(len(expected)) for _ in range(40)]
    groups = [[rng.randrange(len(expected)) for _ in range(size)] for size in [3, 80, 700]]
    pool = multiprocessing.get_context(method).Pool(2)
    try:
        got_singles = pool.starmap(operator.getitem, [(source, i) for i in singles])
        got_groups = pool.starmap(
            ArrayRecordDataSource.__getitems__, [(source, group) for group in groups]
        )
    finally:
        pool.close()
        pool.join()
    assert got_singles == [expected[i] for i in singles]
    assert got_groups == [[expected[i] for i in group] for group in groups]
    assert [source[i] for i in singles] == got_singles


# -- file descriptors and close -----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_no_file_descriptor_leak(shards):
    paths, expected = shards
    gc.collect()
    baseline = open_fds()
    src = ArrayRecordDataSource(paths)
    assert open_fds() == baseline  # counting records closes its readers
    rng = random.Random(5)

    def read():
        for _ in range(5):
            index = rng.randrange(len(expected))
            assert src[index] == expected[index]
        indices = [rng.randrange(len(expected)) for _ in range(100)]
        assert src.__getitems__(indices) == [expected[i] for i in indices]

    for _ in range(50):
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    # One thread at a time: the pool holds at most one reader per file.
    non_empty = sum(count > 0 for count in COUNTS)
    assert baseline < open_fds() <= baseline + non_empty
    src.close()
    gc.collect()
    assert open_fds() == baseline
    with pytest.raises(ValueError, match="closed"):
        src[0]
    with pytest.raises(ValueError, match="closed"):
        src.__getitems__([0, 1000])
    src.close()  # closing twice is harmless
    assert open_fds() == baseline


def test_context_manager_closes(shards):
    paths, expected = shards
    with ArrayRecordDataSource(paths) as src:
        assert src[5] == expected[5]
    with pytest.raises(ValueError, match="closed"):
        src[5]


# -- repr -------------------------------------------------------------------------------------


def test_repr_names_files_and_length(source, shards, tmp_path):
    paths, _ = shards
    text = repr(source)
    assert f"{len(COUNTS)} files" in text
    assert paths[0] in text
    assert paths[-1] in text
    assert f"len={sum(COUNTS)}" in text
    single = ArrayRecordDataSource(paths[1])
    assert "1 file" in repr(single)
    assert paths[1] in repr(single)
    assert "len=700" in repr(single)
    single.close()


# -- in pipelines -----------------------------------------------------------------------------


def test_in_a_map_dataset_with_shuffle_and_batch(tmp_path):
    records = [f"rec-{j:04d}".encode() for j in range(1000)]
    write_file(tmp_path / "data-00000-of-00002", records[:400])
    write_file(tmp_path / "data-00001-of-00002", records[400:])
    src = ArrayRecordDataSource(str(tmp_path / "data@2"))
    ds = grain.MapDataset.source(src).shuffle(seed=0).batch(64)
    assert len(ds) == 16
    batches = [ds[i] for i in range(len(ds))]
    flat = [bytes(record) for batch in batches for record in batch]
    assert sorted(flat) == records  # every record exactly once
    assert flat != records  # shuffled
    assert [len(batch) for batch in batches] == [64] * 15 + [1000 - 15 * 64]
    # The same seed gives the same order; a different one another order.
    again = [bytes(r) for b in grain.MapDataset.source(src).shuffle(seed=0).batch(64) for r in b]
    other = [bytes(r) for b in grain.MapDataset.source(src).shuffle(seed=1).batch(64) for r in b]
    assert again == flat
    assert sorted(other) == records
    assert other != flat
    src.close()


@pytest.mark.timeout(60)
def test_to_iter_dataset_with_threads_matches_no_threads(shards):
    paths, expected = shards
    src = ArrayRecordDataSource(paths)
    ds = grain.MapDataset.source(src).shuffle(seed=3)
    serial = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    threaded = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=4)))
    assert threaded == serial
    assert sorted(serial) == sorted(expected)
    src.close()


# -- the exception types Grain raises too ------------------------------------------------------


def test_errors_are_also_the_exception_types_grain_raises(tmp_path, shards):
    paths, expected = shards
    not_array_record = tmp_path / "text.txt"
    not_array_record.write_text("hello")
    cases = [
        (
            lambda: ArrayRecordDataSource(str(tmp_path / "missing")),
            (FileNotFoundError, RuntimeError),
        ),
        (lambda: ArrayRecordDataSource(str(tmp_path)), (IsADirectoryError, RuntimeError)),
        (lambda: ArrayRecordDataSource(str(not_array_record)), (ValueError, RuntimeError)),
        (lambda: ArrayRecordDataSource(5), (TypeError, ValueError)),
        (lambda: ArrayRecordDataSource([None]), (TypeError, ValueError)),
    ]
    for call, kinds in cases:
        for kind in kinds:
            with pytest.raises(kind):
                call()
    src = ArrayRecordDataSource(paths)
    for kind in (IndexError, ValueError):
        with pytest.raises(kind, match="out of range"):
            src[len(expected)]
    assert isinstance(src.paths, list)
    src.close()
