"""The advanced tutorial's hierarchical shuffle and thread prefetch, through `import grain`."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grain


@pytest.fixture
def filenames(tmp_path):
    names = []
    for f in range(4):
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(pa.table({"x": list(range(f * 100, f * 100 + 25 * (f + 1)))}), path)
        names.append(str(path))
    return names


def _tutorial(filenames, seed=42):
    dataset = grain.MapDataset.source(filenames)
    dataset = dataset.map(grain.experimental.ParquetIterDataset)
    return grain.experimental.WindowShuffleIterDataset(
        grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(filenames)),
        window_size=10,
        seed=seed,
    )


@pytest.mark.timeout(60)
def test_hierarchical_shuffle_reads_every_row_once_in_a_seeded_order(filenames):
    rows = [row["x"] for row in _tutorial(filenames)]
    expected = [x for f in range(4) for x in range(f * 100, f * 100 + 25 * (f + 1))]
    assert sorted(rows) == sorted(expected)
    assert rows != sorted(rows)
    assert rows == [row["x"] for row in _tutorial(filenames)]
    assert rows != [row["x"] for row in _tutorial(filenames, seed=7)]


@pytest.mark.timeout(60)
def test_hierarchical_shuffle_restores_mid_window(filenames):
    ds = _tutorial(filenames)
    it = iter(ds)
    for _ in range(17):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    rest = [row["x"] for row in it]
    resumed = iter(ds)
    resumed.set_state(state)
    assert [row["x"] for row in resumed] == rest


@pytest.mark.timeout(60)
def test_thread_prefetch_as_the_tutorial_uses_it():
    ds = grain.MapDataset.range(50).to_iter_dataset()
    ds = ds.map(lambda x: x * 2)
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=3)
    assert list(ds) == [x * 2 for x in range(50)]
    grain.experimental.assert_equal_output_after_checkpoint(ds, max_steps=60)
