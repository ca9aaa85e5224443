"""Other random-access sources through `import grain`.

HuggingFace `datasets.Dataset` (built in memory, offline), plain Python
sequences, and user classes of `grain.sources.RandomAccessDataSource` with and
without `__getitems__` (what a PyTorch map-style dataset is to grain: torch is
never installed in this workspace, so it is not imported here).
"""

import threading

import numpy as np
import pytest

import grain


def _is_permutation_not_identity(got, items):
    return sorted(got) == sorted(items) and list(got) != list(items)


# --- HuggingFace datasets ---------------------------------------------------------------

N_HF = 26


@pytest.fixture(scope="module")
def hf_datasets():
    # Nothing here may reach the network; the HuggingFace libraries read these
    # variables when first imported, so they are set before the import.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield pytest.importorskip("datasets")


def _hf_dataset(hf_datasets):
    return hf_datasets.Dataset.from_dict(
        {
            "id": list(range(N_HF)),
            "label": [i % 4 for i in range(N_HF)],
            "score": [i / 10 for i in range(N_HF)],
            "text": [f"example {i}" for i in range(N_HF)],
            "vec": [[i, i + 0.5, -i] for i in range(N_HF)],
        }
    )


def _ids(batches):
    return [int(i) for batch in batches for i in np.asarray(batch["id"]).ravel()]


def test_hf_python_format_records_match(hf_datasets):
    hf_ds = _hf_dataset(hf_datasets)
    ds = grain.MapDataset.source(hf_ds)
    assert len(ds) == len(hf_ds) == N_HF
    for i in range(N_HF):
        assert ds[i] == hf_ds[i]
    assert list(ds) == [hf_ds[i] for i in range(N_HF)]
    assert ds[N_HF + 3] == hf_ds[3], "a later epoch reads the same records"

    shuffled = ds.shuffle(seed=11)
    ids = [r["id"] for r in shuffled]
    assert _is_permutation_not_identity(ids, range(N_HF))
    assert [r["id"] for r in ds.shuffle(seed=11)] == ids
    for record in shuffled:
        assert record == hf_ds[record["id"]]

    # A user turns the list column into an array before batching.
    batched = shuffled.map(lambda r: {**r, "vec": np.asarray(r["vec"], np.float32)}).batch(5)
    batches = list(batched)
    assert [len(b["id"]) for b in batches] == [5] * 5 + [1]
    assert _ids(batches) == ids
    first = batches[0]
    assert first.keys() == hf_ds[0].keys()
    assert first["id"].shape == first["label"].shape == first["score"].shape == (5,)
    assert np.issubdtype(first["id"].dtype, np.integer)
    assert first["score"].dtype == np.float64
    assert first["vec"].shape == (5, 3)
    assert first["vec"].dtype == np.float32
    assert first["text"].tolist() == [f"example {i}" for i in first["id"].tolist()]
    assert np.allclose(first["score"], first["id"] / 10)


@pytest.mark.timeout(120)
def test_hf_numpy_format_batches_and_threads(hf_datasets):
    hf_ds = _hf_dataset(hf_datasets)
    hf_ds.set_format("numpy")
    ds = grain.MapDataset.source(hf_ds)
    assert len(ds) == N_HF
    for i in range(N_HF):
        got, expected = ds[i], hf_ds[i]
        assert got.keys() == expected.keys()
        for key in expected:
            assert np.array_equal(got[key], expected[key]), key
    assert isinstance(ds[0]["vec"], np.ndarray)

    pipeline = ds.shuffle(seed=5).batch(batch_size=4, drop_remainder=True)
    batches = list(pipeline)
    assert len(pipeline) == len(batches) == N_HF // 4
    for batch in batches:
        assert batch["id"].shape == batch["label"].shape == (4,)
        assert batch["vec"].shape == (4, 3)
        assert batch["vec"].dtype == hf_ds[0]["vec"].dtype
        assert np.array_equal(batch["vec"][:, 0], batch["id"])
        assert batch["text"].tolist() == [f"example {i}" for i in batch["id"].tolist()]
    ids = _ids(batches)
    assert len(set(ids)) == len(ids) == (N_HF // 4) * 4

    serial = list(pipeline.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    threaded = list(pipeline.to_iter_dataset(grain.ReadOptions(num_threads=4)))
    for got in (serial, threaded):
        assert len(got) == len(batches)
        for a, b in zip(got, batches, strict=True):
            assert a.keys() == b.keys()
            for key in a:
                assert np.array_equal(a[key], b[key]), key

    # Unbatched, threaded: the shuffled records, each once, in the same order as without threads.
    records = ds.shuffle(seed=5)
    threaded_ids = [int(r["id"]) for r in records.to_iter_dataset(grain.ReadOptions(num_threads=4))]
    assert threaded_ids == [int(r["id"]) for r in records]
    assert _is_permutation_not_identity(threaded_ids, range(N_HF))


def test_hf_epochs_are_shuffled_differently(hf_datasets):
    hf_ds = _hf_dataset(hf_datasets)
    ds = grain.MapDataset.source(hf_ds).shuffle(seed=2)
    epoch0 = [ds[i]["id"] for i in range(N_HF)]
    epoch1 = [ds[i]["id"] for i in range(N_HF, 2 * N_HF)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(N_HF))
    assert epoch0 != epoch1
    other_seed = [r["id"] for r in grain.MapDataset.source(hf_ds).shuffle(seed=3)]
    assert other_seed != epoch0


# --- Plain Python sequences ----------------------------------------------------------------


@pytest.mark.parametrize(
    "sequence",
    [
        [3, 1, 4, 1, 5, 9, 2, 6, 5, 3],
        ("a", "b", "c", "d", "e", "f", "g"),
        range(5, 50, 5),
        np.arange(12, dtype=np.int32) * 7,
    ],
    ids=["list", "tuple", "range", "numpy"],
)
def test_plain_sequences(sequence):
    items = list(sequence)
    ds = grain.MapDataset.source(sequence)
    assert len(ds) == len(items)
    assert list(ds) == items
    assert [ds[i] for i in range(len(items))] == items
    assert ds[len(items) + 1] == items[1]
    shuffled = list(ds.shuffle(seed=8))
    assert sorted(shuffled) == sorted(items)
    assert list(ds.shuffle(seed=8)) == shuffled
    positions = list(grain.MapDataset.range(len(items)).shuffle(seed=8))
    assert shuffled == [items[p] for p in positions], "shuffling moves records, not values"
    assert positions != list(range(len(items)))
    batches = list(ds.batch(3))
    assert [len(b) for b in batches] == [3] * (len(items) // 3) + (
        [len(items) % 3] if len(items) % 3 else []
    )
    assert all(isinstance(b, np.ndarray) for b in batches)
    assert np.concatenate(batches).tolist() == items
    assert list(ds.to_iter_dataset(grain.ReadOptions(num_threads=2))) == items


def test_numpy_rows_are_records():
    array = np.arange(24, dtype=np.float32).reshape(6, 4)
    ds = grain.MapDataset.source(array)
    assert len(ds) == 6
    assert np.array_equal(ds[2], array[2])
    batch = ds.batch(4)[0]
    assert batch.shape == (4, 4)
    assert batch.dtype == np.float32
    assert np.array_equal(batch, array[:4])
    rows = np.stack(list(ds.shuffle(seed=1)))
    assert sorted(rows[:, 0].tolist()) == array[:, 0].tolist()
    assert rows[:, 0].tolist() != array[:, 0].tolist()
    for row in rows:
        assert np.array_equal(row, array[int(row[0]) // 4])


def test_str_is_a_sequence_of_characters():
    # A str is a Sequence: its records are its characters, like `list(text)`.
    text = "grain pipelines"
    ds = grain.MapDataset.source(text)
    assert len(ds) == len(text)
    assert list(ds) == list(text)
    assert "".join(ds.map(str.upper)) == text.upper()
    assert sorted(ds.shuffle(seed=3)) == sorted(text)
    assert ds.batch(5)[0].tolist() == list(text[:5])


@pytest.mark.parametrize(
    "not_random_access",
    [(x for x in range(3)), {1, 2, 3}, iter([1, 2, 3]), 42],
    ids=["generator", "set", "iterator", "int"],
)
def test_sources_without_random_access_are_refused(not_random_access):
    with pytest.raises(TypeError):
        grain.MapDataset.source(not_random_access)


# --- RandomAccessDataSource subclasses -------------------------------------------------------


class CountingSource(grain.sources.RandomAccessDataSource):
    """Records `{"index": i, "value": i * i}`; counts the calls that read them."""

    def __init__(self, n):
        self._n = n
        self._lock = threading.Lock()
        self.getitem_calls = 0

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        with self._lock:
            self.getitem_calls += 1
        index = int(index)
        if not 0 <= index < self._n:
            raise IndexError(index)
        return {"index": index, "value": index * index}


class BatchedCountingSource(CountingSource):
    """The same records, with a declared `__getitems__`: records the index lists it is asked for."""

    batched_reads = True

    def __init__(self, n):
        super().__init__(n)
        self.getitems_calls = []

    def __getitems__(self, indices):
        indices = list(indices)
        with self._lock:
            self.getitems_calls.append(indices)
        assert all(isinstance(i, int) and 0 <= i < self._n for i in indices), indices
        return [{"index": i, "value": i * i} for i in indices]


@pytest.mark.parametrize("source_type", [CountingSource, BatchedCountingSource])
def test_random_access_subclass(source_type):
    source = source_type(20)
    assert isinstance(source, grain.sources.RandomAccessDataSource)
    ds = grain.MapDataset.source(source)
    assert len(ds) == 20
    assert ds[7] == {"index": 7, "value": 49}
    assert ds[27] == {"index": 7, "value": 49}
    records = list(ds.shuffle(seed=6))
    assert _is_permutation_not_identity([r["index"] for r in records], range(20))
    assert all(r["value"] == r["index"] ** 2 for r in records)
    batch = ds.batch(6)[1]
    assert batch["index"].tolist() == list(range(6, 12))
    assert batch["value"].tolist() == [i * i for i in range(6, 12)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_threads", [0, 4])
def test_source_without_getitems_reads_each_record_once(num_threads):
    source = CountingSource(300)
    ds = grain.MapDataset.source(source).shuffle(seed=9)
    got = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads)))
    assert _is_permutation_not_identity([r["index"] for r in got], range(300))
    assert source.getitem_calls == 300


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_threads", [0, 4])
def test_getitems_is_called_per_chunk_when_iterating(num_threads):
    source = BatchedCountingSource(300)
    ds = grain.MapDataset.source(source).shuffle(seed=9)
    got = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads)))
    order = [r["index"] for r in got]
    assert _is_permutation_not_identity(order, range(300))
    assert source.getitem_calls == 0, "records were read one by one despite __getitems__"
    calls = source.getitems_calls
    assert 1 <= len(calls) <= 300 // 2, f"{len(calls)} calls: not batched"
    assert sorted(i for call in calls for i in call) == list(range(300)), "read once each"
    # The chunks are asked for in the shuffled order; threads may finish them in any order.
    if num_threads == 0:
        assert [i for call in calls for i in call] == order


def test_getitems_is_called_once_per_batch():
    source = BatchedCountingSource(64)
    ds = grain.MapDataset.source(source).shuffle(seed=1).batch(8)
    batch = ds[3]
    assert source.getitem_calls == 0
    assert len(source.getitems_calls) == 1
    (call,) = source.getitems_calls
    assert call == batch["index"].tolist()
    assert len(call) == 8

    source.getitems_calls.clear()
    batches = list(ds)
    assert source.getitem_calls == 0
    assert 1 <= len(source.getitems_calls) <= len(batches) == 8
    assert sorted(i for call in source.getitems_calls for i in call) == list(range(64))
    assert _ids_of(batches) == [i for call in source.getitems_calls for i in call]

    # A later epoch: indices are the source's own, in range.
    source.getitems_calls.clear()
    later = ds[len(ds) + 2]
    assert source.getitems_calls == [later["index"].tolist()]


class TorchStyleSource(CountingSource):
    """A `__getitems__` in PyTorch's style (a collated batch), without grain's declaration."""

    def __getitems__(self, indices):
        raise AssertionError("an undeclared __getitems__ was called")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_threads", [0, 4])
def test_an_undeclared_getitems_is_not_called_as_on_grain(num_threads):
    source = TorchStyleSource(40)
    ds = grain.MapDataset.source(source).shuffle(seed=2).batch(8)
    batches = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads)))
    assert _ids_of(batches) == _ids_of(list(ds))
    assert sorted(_ids_of(batches)) == list(range(40))
    assert all((b["value"] == b["index"] ** 2).all() for b in batches)
    assert source.getitem_calls == 80


def _ids_of(batches):
    return [int(i) for batch in batches for i in batch["index"].tolist()]
