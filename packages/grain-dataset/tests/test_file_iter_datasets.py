"""TFRecordIterDataset and ParquetIterDataset: file order, exact restores, bad states, pipelines."""

import json
import pickle

import numpy as np
import pytest

from grain_dataset import (
    IterDataset,
    MapDataset,
    assert_equal_output_after_checkpoint,
    without_fingerprint,
)
from grain_dataset._iter_stages._file_iter import ParquetIterDataset, TFRecordIterDataset
from grain_sources import CorruptRecordError, write_tfrecord

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

RECORDS = [f"record {i}".encode() * (i % 5) for i in range(23)]
ROWS = [{"id": i, "name": f"n{i}", "score": i / 4} for i in range(31)]


@pytest.fixture
def tfrecord_path(tmp_path):
    path = tmp_path / "data.tfrecord"
    write_tfrecord(RECORDS, path)
    return path


@pytest.fixture
def parquet_path(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=7)
    return path


def collect(ds):
    with iter(ds) as iterator:
        return list(iterator)


# -- plain iteration ---------------------------------------------------------------


def test_tfrecord_iteration(tfrecord_path):
    ds = TFRecordIterDataset(tfrecord_path)
    assert isinstance(ds, IterDataset)
    assert ds.parents == ()
    assert collect(ds) == RECORDS
    assert collect(ds) == RECORDS  # each iterator starts at the beginning


def test_parquet_iteration(parquet_path):
    ds = ParquetIterDataset(parquet_path)
    assert isinstance(ds, IterDataset)
    assert ds.parents == ()
    assert collect(ds) == ROWS


def test_parquet_reader_options(parquet_path):
    ds = ParquetIterDataset(parquet_path, columns=["name"], batch_rows=2)
    assert collect(ds) == [{"name": row["name"]} for row in ROWS]


def test_iterator_closes_its_file(tfrecord_path, parquet_path):
    for ds in (TFRecordIterDataset(tfrecord_path), ParquetIterDataset(parquet_path)):
        iterator = iter(ds)
        next(iterator)
        assert iterator._reader._file is not None
        iterator.close()
        assert iterator._reader._file is None


# -- states ------------------------------------------------------------------------


def test_tfrecord_checkpoint_contract(tfrecord_path):
    assert_equal_output_after_checkpoint(TFRecordIterDataset(tfrecord_path))


def test_parquet_checkpoint_contract(parquet_path):
    assert_equal_output_after_checkpoint(ParquetIterDataset(parquet_path, batch_rows=3))


def test_state_formats(tfrecord_path, parquet_path):
    with iter(TFRecordIterDataset(tfrecord_path)) as iterator:
        assert without_fingerprint(iterator.get_state()) == {"offset": 0, "index": 0}
        next(iterator)
        next(iterator)
        assert without_fingerprint(iterator.get_state()) == {
            "offset": 16 + 16 + len(RECORDS[1]),
            "index": 2,
        }
    with iter(ParquetIterDataset(parquet_path)) as iterator:
        assert without_fingerprint(iterator.get_state()) == {"row": 0}
        for _ in range(9):
            next(iterator)
        assert without_fingerprint(iterator.get_state()) == {"row": 9}


@pytest.mark.parametrize("steps", [0, 1, 7, 22, 23])
def test_tfrecord_restore_into_a_fresh_iterator(tfrecord_path, steps):
    ds = TFRecordIterDataset(tfrecord_path)
    with iter(ds) as iterator:
        for _ in range(steps):
            next(iterator)
        state = json.loads(json.dumps(iterator.get_state()))
    with iter(ds) as fresh:
        fresh.set_state(state)
        assert list(fresh) == RECORDS[steps:]
        assert fresh.get_state()["index"] == len(RECORDS)


@pytest.mark.parametrize("steps", [0, 6, 7, 8, 30, 31])
def test_parquet_restore_into_a_fresh_iterator(parquet_path, steps):
    ds = ParquetIterDataset(parquet_path)
    with iter(ds) as iterator:
        for _ in range(steps):
            next(iterator)
        state = iterator.get_state()
    with iter(ds) as fresh:
        fresh.set_state(state)
        assert list(fresh) == ROWS[steps:]


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ({"offset": 0}, ValueError, r"missing \['index'\]"),
        ({"offset": 0, "index": 0, "row": 1}, ValueError, r"unexpected \['row'\]"),
        ({"offset": -16, "index": 0}, ValueError, "must be an integer >= 0"),
        ({"offset": 0, "index": -1}, ValueError, "must be an integer >= 0"),
        ({"offset": "0", "index": 0}, ValueError, "must be an integer >= 0"),
        ({"offset": 10**9, "index": 0}, ValueError, "past the end"),
        ({"offset": 5, "index": 0}, ValueError, "not the start of a record"),
        ([0, 0], TypeError, "must be a dict"),
    ],
)
def test_tfrecord_rejects_wrong_states(tfrecord_path, state, error, match):
    with iter(TFRecordIterDataset(tfrecord_path)) as iterator:
        next(iterator)
        with pytest.raises(error, match=match) as info:
            iterator.set_state(state)
        assert "TFRecordIterDataset" in str(info.value)
        # A rejected state leaves the iterator where it was.
        assert next(iterator) == RECORDS[1]


def test_tfrecord_non_boundary_state_is_a_corrupt_record_error(tfrecord_path):
    with iter(TFRecordIterDataset(tfrecord_path)) as iterator:
        with pytest.raises(ValueError, match="offset 5") as info:
            iterator.set_state({"offset": 5, "index": 0})
        assert isinstance(info.value.__cause__, CorruptRecordError)


@pytest.mark.parametrize(
    ("state", "error", "match"),
    [
        ({}, ValueError, r"missing \['row'\]"),
        ({"row": -1}, ValueError, "must be an integer >= 0"),
        ({"row": 1.5}, ValueError, "must be an integer >= 0"),
        ({"row": len(ROWS) + 1}, ValueError, r"row must be an int in \[0, 31\]"),
        ({"offset": 0, "index": 0}, ValueError, "expected the keys"),
        (None, TypeError, "must be a dict"),
    ],
)
def test_parquet_rejects_wrong_states(parquet_path, state, error, match):
    with iter(ParquetIterDataset(parquet_path)) as iterator:
        next(iterator)
        with pytest.raises(error, match=match) as info:
            iterator.set_state(state)
        assert "ParquetIterDataset" in str(info.value)
        assert next(iterator) == ROWS[1]


# -- construction and pickling -----------------------------------------------------


def test_bad_paths_fail_at_construction(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"absent\.tfrecord"):
        TFRecordIterDataset(tmp_path / "absent.tfrecord")
    with pytest.raises(IsADirectoryError):
        TFRecordIterDataset(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"absent\.parquet"):
        ParquetIterDataset(tmp_path / "absent.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match=r"text\.parquet"):
        ParquetIterDataset(tmp_path / "text.parquet")


def test_bad_reader_options_fail_at_construction(parquet_path):
    with pytest.raises(ValueError, match="nope"):
        ParquetIterDataset(parquet_path, columns=["nope"])
    with pytest.raises(TypeError, match="set_state"):
        ParquetIterDataset(parquet_path, row=3)
    with pytest.raises(TypeError):
        ParquetIterDataset(parquet_path, no_such_option=1)


def test_datasets_pickle_as_path_and_options(tfrecord_path, parquet_path):
    datasets = [
        TFRecordIterDataset(tfrecord_path, verify_crc=False),
        ParquetIterDataset(parquet_path, columns=["id"]),
    ]
    for ds in datasets:
        payload = pickle.dumps(ds)
        assert len(payload) < 1000
        copy = pickle.loads(payload)
        assert collect(copy) == collect(ds)
        assert copy.path == ds.path


def test_repr_names_the_file(tfrecord_path, parquet_path):
    assert str(tfrecord_path) in repr(TFRecordIterDataset(tfrecord_path))
    assert str(parquet_path) in repr(ParquetIterDataset(parquet_path))


def test_corrupt_record_surfaces_while_iterating(tfrecord_path):
    data = bytearray(tfrecord_path.read_bytes())
    data[-1] ^= 0xFF  # the last record's data checksum
    tfrecord_path.write_bytes(bytes(data))
    with (
        iter(TFRecordIterDataset(tfrecord_path)) as iterator,
        pytest.raises(CorruptRecordError, match="data checksum"),
    ):
        list(iterator)
    assert collect(TFRecordIterDataset(tfrecord_path, verify_crc=False))[:-1] == RECORDS[:-1]


# -- in pipelines ------------------------------------------------------------------


def test_map_dataset_of_paths_builds_one_dataset_per_file(tmp_path):
    paths = []
    for shard in range(3):
        path = tmp_path / f"shard-{shard}.tfrecord"
        write_tfrecord([f"{shard}:{i}".encode() for i in range(4 + shard)], path)
        paths.append(str(path))
    per_file = MapDataset.source(paths).map(TFRecordIterDataset)
    assert len(per_file) == 3
    for shard in range(3):
        ds = per_file[shard]
        assert isinstance(ds, TFRecordIterDataset)
        assert ds.path == paths[shard]
        assert collect(ds) == [f"{shard}:{i}".encode() for i in range(4 + shard)]


def test_map_dataset_of_parquet_paths(tmp_path, parquet_path):
    other = tmp_path / "other.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS[:3]), other)
    per_file = MapDataset.source([str(parquet_path), str(other)]).map(ParquetIterDataset)
    # Indexing, not iterating: iterating a MapDataset would start read-ahead threads.
    assert [type(per_file[i]) for i in range(2)] == [ParquetIterDataset, ParquetIterDataset]
    assert collect(per_file[1]) == ROWS[:3]


def test_tfrecord_map_and_batch_resume_exactly(tfrecord_path):
    ds = TFRecordIterDataset(tfrecord_path).map(len).batch(4)
    batches = collect(ds)
    lengths = [len(record) for record in RECORDS]
    assert [batch.tolist() for batch in batches] == [
        lengths[i : i + 4] for i in range(0, len(RECORDS), 4)
    ]
    assert_equal_output_after_checkpoint(ds)


def test_parquet_map_and_batch_resume_exactly(parquet_path):
    ds = ParquetIterDataset(parquet_path, batch_rows=5).map(lambda row: row["id"] * 2).batch(6)
    batches = collect(ds)
    assert np.concatenate(batches).tolist() == [row["id"] * 2 for row in ROWS]
    assert [len(batch) for batch in batches] == [6, 6, 6, 6, 6, 1]
    assert_equal_output_after_checkpoint(ds)


def test_parquet_rows_batch_into_columns(parquet_path):
    ds = ParquetIterDataset(parquet_path, columns=["id", "score"]).batch(10, drop_remainder=True)
    batches = collect(ds)
    assert len(batches) == 3
    assert batches[1]["id"].tolist() == list(range(10, 20))
    assert batches[2]["score"].tolist() == [i / 4 for i in range(20, 30)]
