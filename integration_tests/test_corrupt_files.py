"""Damaged ArrayRecord, TFRecord and Parquet files: an error naming the file, never wrong data.

What the package tests already cover is not repeated here: ArrayRecord files
truncated at five cut points and with 16 bytes flipped in the middle
(grain-sources' `test_array_record_source.py`), TFRecord flips at chosen
framing positions and truncation at every cut point through `TFRecordReader`
(`test_tfrecord.py`), a corrupt TFRecord surfacing while iterating
(grain-dataset's `test_file_iter_datasets.py`), and non-Parquet files.

Added here, as sweeps: a single-bit flip at every byte (or a dense sample of
bytes: every other one, every third) of a file and truncation at many cut
points, read through the public datasets. Each damaged file must give exactly
the original records, or raise an exception whose message names the file.
Reading a damaged file through `mp_prefetch` workers must do the same in the
parent. The figures (how many damaged files were detected, read identically,
read wrongly) are printed.

Parquet has no checksum over its footer, and its page checksums are optional
(pyarrow writes them with ``write_page_checksum=True``; the reader verifies
them whenever they are there): a flip in a page of a file written without
them, or in the footer's column names or row counts, can yield other data
that no reader can tell from the original. The sweep therefore writes
checksums and holds the pages to "never wrong data", and reports the footer's
undetectable flips separately (a known limit of the format).
"""

from __future__ import annotations

import collections
import pathlib
import random
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

import grain
import grain.experimental as ge
from grain_sources import write_array_record, write_tfrecord


def _records(count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 80, count)
    return [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in sizes]


def _flipped(data: bytes, position: int) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 1 << (position % 8)
    return bytes(damaged)


def sweep(
    path: pathlib.Path,
    good: bytes,
    expected: list[Any],
    read: Callable[[str], list[Any]],
    damaged_files: Iterable[tuple[str, bytes]],
) -> tuple[collections.Counter[str], list[str]]:
    """Writes each damaged version to `path` and reads it; (outcome counts, problems)."""
    counts: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    for what, data in damaged_files:
        path.write_bytes(data)
        try:
            got = read(str(path))
        except Exception as error:
            if str(path) in str(error):
                counts["detected"] += 1
            else:
                counts["unnamed error"] += 1
                problems.append(f"{what}: {type(error).__name__} not naming the file: {error}")
            continue
        if got == expected:
            counts["read identically"] += 1
        else:
            counts["wrong data"] += 1
            problems.append(f"{what}: read without an error, but the data differs")
    path.write_bytes(good)
    return counts, problems


# -- ArrayRecord ---------------------------------------------------------------------------


def _read_array_record(path: str) -> list[bytes]:
    source = grain.sources.ArrayRecordDataSource(path)
    try:
        one_by_one = [source[i] for i in range(len(source))]
        batched = source.__getitems__(list(range(len(source))))
    finally:
        source.close()
    assert batched == one_by_one or not batched  # both paths read the same bytes
    return one_by_one


@pytest.mark.timeout(120)
def test_array_record_bit_flips_and_cuts_are_detected_or_harmless(tmp_path):
    records = _records(60, seed=1)
    good_path = tmp_path / "good.array_record"
    write_array_record(records, str(good_path))
    good = good_path.read_bytes()
    # The records and the index sit in the first few KiB, then padding, then the footer:
    # every other byte of the head, every byte of the tail, a sample of the padding.
    head = range(0, min(len(good), 7000), 2)
    tail = range(max(0, len(good) - 2048), len(good))
    rng = random.Random(0)
    middle = rng.sample(range(7000, max(7000, len(good) - 2048)), 200) if len(good) > 9048 else []
    positions = sorted(set(head) | set(tail) | set(middle))
    flips = ((f"flip at {p}", _flipped(good, p)) for p in positions)
    cuts = ((f"cut at {c}", good[:c]) for c in range(0, len(good), 97))
    damaged = tmp_path / "damaged.array_record"
    counts, problems = sweep(damaged, good, records, _read_array_record, [*flips, *cuts])
    print(f"ArrayRecord ({len(good)} bytes): {dict(counts)}")
    assert not problems, "\n".join(problems[:20])
    assert counts["detected"] > 1000


# -- TFRecord ------------------------------------------------------------------------------


def _read_tfrecord(path: str) -> list[bytes]:
    return list(ge.TFRecordIterDataset(path))


@pytest.mark.timeout(120)
def test_tfrecord_every_bit_flip_and_cut_is_detected(tmp_path):
    records = _records(40, seed=2)
    good_path = tmp_path / "good.tfrecord"
    write_tfrecord(records, str(good_path))
    good = good_path.read_bytes()
    flips = ((f"flip at {p}", _flipped(good, p)) for p in range(len(good)))
    # Cutting at a record boundary leaves a shorter valid file: those cuts are skipped.
    boundaries, at = {0}, 0
    for record in records:
        at += 16 + len(record)
        boundaries.add(at)
    cuts = ((f"cut at {c}", good[:c]) for c in range(len(good)) if c not in boundaries)
    damaged = tmp_path / "damaged.tfrecord"
    counts, problems = sweep(damaged, good, records, _read_tfrecord, [*flips, *cuts])
    print(f"TFRecord ({len(good)} bytes): {dict(counts)}")
    assert not problems, "\n".join(problems[:20])
    # Every byte of a TFRecord file is under a CRC-32C: every flip is caught.
    assert counts["read identically"] == 0
    assert counts["detected"] == 2 * len(good) - len(boundaries) + 1


# -- Parquet -------------------------------------------------------------------------------

ROWS = [{"x": i * 7919 % 10007, "s": f"row-{i}"} for i in range(200)]


def _write_parquet(path: pathlib.Path, **options: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=40, **options)
    return path.read_bytes()


def _read_parquet(path: str) -> list[dict[str, Any]]:
    return list(ge.ParquetIterDataset(path))


def _footer_start(data: bytes) -> int:
    """Where the Thrift footer begins: it ends with its length and b"PAR1"."""
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


@pytest.mark.timeout(120)
def test_parquet_with_page_checksums_never_gives_wrong_data_from_a_damaged_page(tmp_path):
    pytest.importorskip("pyarrow")
    good = _write_parquet(tmp_path / "good.parquet", write_page_checksum=True)
    footer = _footer_start(good)
    damaged = tmp_path / "damaged.parquet"
    flips = [(f"flip at {p}", _flipped(good, p)) for p in range(0, footer, 2)]
    cuts = [(f"cut at {c}", good[:c]) for c in range(0, len(good), 11)]
    counts, problems = sweep(damaged, good, ROWS, _read_parquet, [*flips, *cuts])
    print(f"Parquet pages and cuts ({footer} of {len(good)} bytes): {dict(counts)}")
    assert not problems, "\n".join(problems[:20])
    footer_flips = [(f"flip at {p}", _flipped(good, p)) for p in range(footer, len(good))]
    counts, problems = sweep(damaged, good, ROWS, _read_parquet, footer_flips)
    unnamed = [p for p in problems if "not naming the file" in p]
    print(f"Parquet footer ({len(good) - footer} bytes): {dict(counts)}")
    assert not unnamed, "\n".join(unnamed[:20])
    # Undetectable by the format: a renamed column or a changed row count. Few, not zero.
    assert counts["wrong data"] <= 10, problems


@pytest.mark.timeout(60)
def test_parquet_errors_name_the_file_also_without_checksums(tmp_path):
    pytest.importorskip("pyarrow")
    good = _write_parquet(tmp_path / "good.parquet")
    damaged = tmp_path / "damaged.parquet"
    flips = [(f"flip at {p}", _flipped(good, p)) for p in range(0, len(good), 3)]
    counts, problems = sweep(damaged, good, ROWS, _read_parquet, flips)
    print(f"Parquet without page checksums ({len(good)} bytes): {dict(counts)}")
    unnamed = [p for p in problems if "not naming the file" in p]
    assert not unnamed, "\n".join(unnamed[:20])
    assert counts["detected"] > 300


# -- through worker processes ----------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["array_record", "tfrecord", "parquet"])
def test_damage_read_in_a_worker_process_reaches_the_parent_naming_the_file(tmp_path, kind):
    if kind == "array_record":
        records = _records(60, seed=3)
        path = tmp_path / "data.array_record"
        write_array_record(records, str(path))
        data = bytearray(path.read_bytes())
        data[2000:2016] = bytes(b ^ 0xFF for b in data[2000:2016])
        ds = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(str(path)))
        ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0))
    elif kind == "tfrecord":
        path = tmp_path / "data.tfrecord"
        write_tfrecord(_records(60, seed=3), str(path))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        ds = ge.TFRecordIterDataset(str(path))
    else:
        pytest.importorskip("pyarrow")
        path = tmp_path / "data.parquet"
        data = bytearray(_write_parquet(path, write_page_checksum=True))
        data[_footer_start(bytes(data)) // 2] ^= 0x10
        ds = ge.ParquetIterDataset(str(path))
    path.write_bytes(bytes(data))
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    iterator = iter(ds)
    try:
        with pytest.raises(Exception) as info:  # noqa: PT011 - checked below: names the file
            for _ in iterator:
                pass
    finally:
        iterator.close()
    assert str(path) in str(info.value), info.value
