"""ParquetReader: rows as dicts, exact resumes by row number, and bad files."""

import gc
import pickle
import sys
import warnings

import pytest

from grain_sources._parquet import ParquetReader

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

NUM_ROWS = 40
GROUP = 7  # 40 rows in row groups of 7: six groups, the last one of 5 rows


def make_rows(n):
    return [
        {
            "id": i,
            "text": f"row {i}",
            "values": list(range(i % 4)),
            "pair": {"x": i, "y": -i},
        }
        for i in range(n)
    ]


ROWS = make_rows(NUM_ROWS)


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=GROUP)
    assert pq.ParquetFile(path).metadata.num_row_groups == 6
    return path


@pytest.fixture
def row_group_reads(monkeypatch):
    """The row group numbers passed to ParquetFile.read_row_group, in order."""
    calls = []
    original = pq.ParquetFile.read_row_group

    def counting(self, i, *args, **kwargs):
        calls.append(i)
        return original(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    return calls


def read_all(path, **kwargs):
    with ParquetReader(path, **kwargs) as reader:
        return list(reader)


def test_round_trip(path):
    assert read_all(path) == ROWS


def test_sizes(path):
    reader = ParquetReader(path)
    assert reader.num_rows == NUM_ROWS
    assert reader.num_row_groups == 6
    assert reader.row == 0


@pytest.mark.parametrize("batch_rows", [1, 3, 7, 10, 1000])
def test_batch_rows_does_not_change_the_rows(path, batch_rows):
    assert read_all(path, batch_rows=batch_rows) == ROWS


def test_reads_each_row_group_once_in_order(path, row_group_reads):
    assert read_all(path, batch_rows=3) == ROWS
    assert row_group_reads == list(range(6))


def test_columns_selection(path):
    rows = read_all(path, columns=["text", "id"])
    assert rows == [{"text": row["text"], "id": row["id"]} for row in ROWS]


def test_nested_column_path(path):
    rows = read_all(path, columns=["pair.x"])
    assert rows == [{"pair": {"x": row["pair"]["x"]}} for row in ROWS]


def test_unknown_column(path):
    with pytest.raises(ValueError, match=r"no column\(s\) \['nope'\].*choose from"):
        ParquetReader(path, columns=["id", "nope"])


def test_columns_as_a_string(path):
    with pytest.raises(TypeError, match=r"columns=\['id'\]"):
        ParquetReader(path, columns="id")


@pytest.mark.parametrize("batch_rows", [0, -1, 2.5, True])
def test_bad_batch_rows(path, batch_rows):
    with pytest.raises(ValueError, match="batch_rows"):
        ParquetReader(path, batch_rows=batch_rows)


# -- positions --------------------------------------------------------------------


@pytest.mark.parametrize("row", range(NUM_ROWS + 1))
def test_restore_at_every_row_reads_no_earlier_row_group(path, row_group_reads, row):
    with ParquetReader(path, row=row, batch_rows=3) as reader:
        assert list(reader) == ROWS[row:]
    first_group = row // GROUP
    expected = list(range(first_group, 6)) if row < NUM_ROWS else []
    assert row_group_reads == expected


@pytest.mark.parametrize("row", [0, 3, 6, 7, 8, 14, 35, 39, 40])
def test_restore_from_a_saved_row(path, row):
    with ParquetReader(path) as reader:
        for _ in range(row):
            next(reader)
        assert reader.row == row
        saved = reader.row
    with ParquetReader(path, row=saved) as resumed:
        assert list(resumed) == ROWS[row:]
        assert resumed.row == NUM_ROWS


def test_seek_back_and_forth(path, row_group_reads):
    with ParquetReader(path, batch_rows=4) as reader:
        for row in (10, 2, 39, 13, 0, 40, 21):
            reader.seek(row)
            assert [next(reader) for _ in range(min(3, NUM_ROWS - row))] == ROWS[row : row + 3]
            assert reader.row == min(row + 3, NUM_ROWS)
    # Moving inside the row group already read does not read it again.
    reader = ParquetReader(path)
    row_group_reads.clear()
    next(reader)
    reader.seek(5)
    assert next(reader) == ROWS[5]
    assert row_group_reads == [0]
    reader.close()


def test_rows_changed_by_the_user_are_read_again_after_seek(path):
    with ParquetReader(path) as reader:
        row = next(reader)
        row["text"] = "changed"
        row["values"].append(99)
        reader.seek(0)
        assert next(reader) == ROWS[0]


@pytest.mark.parametrize("row", [-1, NUM_ROWS + 1, 1.0, "3", None, True])
def test_bad_rows(path, row):
    with pytest.raises(ValueError, match=rf"row must be an int in \[0, {NUM_ROWS}\]"):
        ParquetReader(path, row=row)


def test_pickle_mid_way(path):
    with ParquetReader(path, columns=["id"], batch_rows=2) as reader:
        for _ in range(9):
            next(reader)
        copy = pickle.loads(pickle.dumps(reader))
        assert copy.row == 9
        assert copy.columns == ["id"]
        with copy:
            assert list(copy) == [{"id": i} for i in range(9, NUM_ROWS)]
        assert list(reader) == [{"id": i} for i in range(9, NUM_ROWS)]


def test_pickle_holds_no_data(path):
    with ParquetReader(path) as reader:
        next(reader)
        assert len(pickle.dumps(reader)) < 1000


def test_lazy_open_close_and_reopen(path):
    reader = ParquetReader(path)
    assert reader._file is None
    assert next(reader) == ROWS[0]
    assert reader._file is not None
    reader.close()
    reader.close()
    assert reader._file is None
    assert next(reader) == ROWS[1]
    assert list(reader) == ROWS[2:]
    assert reader._file is None  # closed at the end


def test_abandoned_reader_leaks_nothing(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = ParquetReader(path)
        next(reader)
        del reader
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_empty_table(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), path)
    reader = ParquetReader(path)
    assert reader.num_rows == 0
    assert list(reader) == []
    reader.seek(0)
    with pytest.raises(ValueError, match=r"\[0, 0\]"):
        reader.seek(1)


def test_many_small_row_groups(tmp_path, row_group_reads):
    rows = make_rows(23)
    path = tmp_path / "small_groups.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1)
    assert read_all(path, row=11) == rows[11:]
    assert row_group_reads == list(range(11, 23))


# -- bad files ---------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.parquet"):
        ParquetReader(tmp_path / "missing.parquet")


def test_directory(tmp_path):
    with pytest.raises(IsADirectoryError, match=tmp_path.name):
        ParquetReader(tmp_path)


@pytest.mark.parametrize("content", [b"", b"PAR1 but then just text, no footer"])
def test_not_a_parquet_file(tmp_path, content):
    path = tmp_path / "fake.parquet"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"fake\.parquet.* is not a readable Parquet file"):
        ParquetReader(path)


def test_pyarrow_missing(monkeypatch, path):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # makes the import fail
    with pytest.raises(ImportError, match=r"pip install grain-sources\[parquet\]"):
        ParquetReader(path)
