"""TFDS data sources through `import grain`, as in the spec's MNIST tutorials.

A tiny dataset is built locally with a `GeneratorBasedBuilder` in the
`array_record` format (no TensorFlow, no network) and read back with
`tfds.data_source`; the pipelines are the tutorials' shuffle/map/batch chains.
Random behaviour is checked by its properties: a permutation of the records,
the same for the same seed, different for another seed or another epoch.
"""

import copy
import json

import numpy as np
import pytest

import grain

tfds = pytest.importorskip("tensorflow_datasets")
PIL_Image = pytest.importorskip("PIL.Image")

NAME = "grain_integration_tfds_source"
NUM_TRAIN = 22  # not a multiple of the batch size: drop_remainder matters
NUM_TEST = 6
BATCH = 4
IMAGE_SHAPE = (8, 8, 3)
LABELS = ["cat", "dog", "bird"]


class GrainIntegrationTfdsSource(tfds.core.GeneratorBasedBuilder):
    """Registers itself with TFDS as `NAME` (once per process: module level)."""

    VERSION = tfds.core.Version("1.0.0")
    # No checksums file to look for beside this module. TFDS would search from the
    # top-level package of `__module__`, here the namespace package
    # `integration_tests` (pytest's importlib mode), and that search needs the
    # `importlib_resources` backport, which is not installed.
    code_path = None

    def _info(self):
        # DatasetInfo directly: `dataset_info_from_configs` looks for metadata
        # files beside the builder's module.
        features = tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(shape=IMAGE_SHAPE),
                "label": tfds.features.ClassLabel(names=LABELS),
                "vec": tfds.features.Tensor(shape=(3,), dtype=np.float32),
                "text": tfds.features.Text(),
                "id": np.int64,
            }
        )
        return tfds.core.DatasetInfo(
            builder=self, features=features, supervised_keys=("image", "label")
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(0, NUM_TRAIN),
            "test": self._generate_examples(1000, NUM_TEST),
        }

    def _generate_examples(self, first_id, count):
        for i in range(first_id, first_id + count):
            # Image features take PIL images: a numpy image would need TensorFlow.
            yield (
                i,
                {
                    "image": PIL_Image.fromarray(_pixels(i)),
                    "label": i % len(LABELS),
                    "vec": np.array([i, 2 * i, -i], dtype=np.float32),
                    "text": f"record {i}",
                    "id": i,
                },
            )


def _pixels(record_id):
    return np.random.default_rng(record_id).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)


def _normalize(features):
    """The tutorials' map: the image as float32 in [0, 1], the rest kept."""
    out = dict(features)
    out["image"] = features["image"].astype(np.float32) / 255.0
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tfds")
    builder = GrainIntegrationTfdsSource(data_dir=str(directory), file_format="array_record")
    builder.download_and_prepare()
    return str(directory)


@pytest.fixture(scope="module")
def train(data_dir):
    return tfds.data_source(NAME, data_dir=data_dir, split="train")


def _pipeline(source, seed, drop_remainder):
    return (
        grain.MapDataset.source(source)
        .shuffle(seed=seed)
        .map(_normalize)
        .batch(batch_size=BATCH, drop_remainder=drop_remainder)
    )


def _ids(batches):
    return [int(i) for batch in batches for i in np.asarray(batch["id"]).ravel()]


def _assert_batches_equal(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(a[key], b[key]), key


def test_source_records_match_tfds(train):
    ds = grain.MapDataset.source(train)
    assert len(ds) == len(train) == NUM_TRAIN
    for i in range(NUM_TRAIN):
        got, expected = ds[i], train[i]
        assert got.keys() == expected.keys() == {"image", "label", "vec", "text", "id"}
        for key in expected:
            assert np.array_equal(got[key], expected[key]), key
    records = list(ds)
    assert sorted(int(r["id"]) for r in records) == list(range(NUM_TRAIN))
    first = records[0]
    record_id = int(first["id"])
    assert first["image"].dtype == np.uint8
    assert np.array_equal(first["image"], _pixels(record_id))
    assert int(first["label"]) == record_id % len(LABELS)
    assert first["text"] == f"record {record_id}".encode()
    assert np.array_equal(first["vec"], np.array([record_id, 2 * record_id, -record_id]))


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_tutorial_pipeline_batches(train, drop_remainder):
    ds = _pipeline(train, seed=42, drop_remainder=drop_remainder)
    batches = list(ds)
    full, rest = divmod(NUM_TRAIN, BATCH)
    assert len(ds) == len(batches) == (full if drop_remainder else full + 1)
    sizes = [len(b["id"]) for b in batches]
    assert sizes == [BATCH] * full + ([] if drop_remainder else [rest])
    for batch, size in zip(batches, sizes, strict=True):
        assert batch["image"].shape == (size, *IMAGE_SHAPE)
        assert batch["image"].dtype == np.float32
        assert batch["image"].min() >= 0.0
        assert batch["image"].max() <= 1.0
        assert batch["label"].shape == (size,)
        assert np.issubdtype(batch["label"].dtype, np.integer)
        assert batch["vec"].shape == (size, 3)
        assert batch["vec"].dtype == np.float32
        assert batch["text"].shape == (size,)
        assert batch["id"].shape == (size,)
        for k, record_id in enumerate(batch["id"].tolist()):
            assert np.allclose(batch["image"][k], _pixels(record_id) / 255.0)
            assert batch["label"][k] == record_id % len(LABELS)
            assert batch["text"][k] == f"record {record_id}".encode()
    ids = _ids(batches)
    assert len(set(ids)) == len(ids), "a record was visited twice in one epoch"
    if drop_remainder:
        assert len(ids) == full * BATCH
        assert set(ids) < set(range(NUM_TRAIN))
    else:
        assert sorted(ids) == list(range(NUM_TRAIN))


def test_shuffle_order_properties(train):
    def order(seed, epoch=0):
        ds = _pipeline(train, seed=seed, drop_remainder=False)
        return _ids(ds[i] for i in range(epoch * len(ds), (epoch + 1) * len(ds)))

    unshuffled = _ids(grain.MapDataset.source(train).batch(BATCH))
    first = order(1)
    assert sorted(first) == list(range(NUM_TRAIN))
    assert first != unshuffled
    assert order(1) == first, "the same seed must give the same order"
    assert order(2) != first, "another seed must give another order"
    second_epoch = order(1, epoch=1)
    assert sorted(second_epoch) == list(range(NUM_TRAIN))
    assert second_epoch != first, "each epoch must be shuffled anew"
    # The tutorials' other spelling: a pipeline seed, then shuffle().
    seeded = grain.MapDataset.source(train).seed(1).shuffle()
    seeded_ids = [int(r["id"]) for r in seeded]
    assert sorted(seeded_ids) == list(range(NUM_TRAIN))
    assert seeded_ids == [int(r["id"]) for r in grain.MapDataset.source(train).seed(1).shuffle()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("drop_remainder", [True, False])
def test_threads_read_the_same_elements(train, drop_remainder):
    ds = _pipeline(train, seed=7, drop_remainder=drop_remainder)
    serial = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    threaded = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=4)))
    _assert_batches_equal(threaded, serial)
    _assert_batches_equal(serial, list(ds))
    # Unbatched too: the records one by one, in the same shuffled order.
    records = grain.MapDataset.source(train).shuffle(seed=7)
    got = [int(r["id"]) for r in records.to_iter_dataset(grain.ReadOptions(num_threads=4))]
    assert got == [int(r["id"]) for r in records]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_threads", [0, 4])
@pytest.mark.parametrize("steps", [0, 1, 3])
def test_checkpoint_restore_continues_exactly(train, num_threads, steps):
    ds = _pipeline(train, seed=3, drop_remainder=False).to_iter_dataset(
        grain.ReadOptions(num_threads=num_threads)
    )
    everything = list(ds)
    it = iter(ds)
    for _ in range(steps):
        next(it)
    state = it.get_state()
    json.dumps(state)  # a checkpoint is plain data
    saved = copy.deepcopy(state)
    rest = list(it)
    _assert_batches_equal(rest, everything[steps:])

    restored = iter(ds)
    next(restored)  # wherever it was, set_state moves it to the checkpoint
    restored.set_state(saved)
    _assert_batches_equal(list(restored), rest)
    # Restoring the same iterator again goes back once more.
    restored.set_state(saved)
    _assert_batches_equal(list(restored), rest)


def test_map_dataset_iterator_checkpoint(train):
    """The spec's checkpoint tutorial: `.seed().shuffle().to_iter_dataset()`."""
    ds = grain.MapDataset.source(train).seed(45).shuffle().to_iter_dataset()
    it = iter(ds)
    first_labels = [int(next(it)["label"]) for _ in range(4)]
    state = it.get_state()
    next_ids = [int(next(it)["id"]) for _ in range(4)]
    it.set_state(state)
    assert [int(next(it)["id"]) for _ in range(4)] == next_ids
    fresh = iter(ds)
    fresh.set_state(state)
    assert [int(next(fresh)["id"]) for _ in range(4)] == next_ids
    assert all(0 <= label < len(LABELS) for label in first_labels)


def test_split_slices(data_dir, train):
    first_half = tfds.data_source(NAME, data_dir=data_dir, split="train[:50%]")
    second_half = tfds.data_source(NAME, data_dir=data_dir, split="train[50%:]")
    assert len(first_half) + len(second_half) == NUM_TRAIN
    assert len(first_half) == NUM_TRAIN // 2

    def epoch_ids(source, seed):
        ds = _pipeline(source, seed=seed, drop_remainder=False)
        return _ids(ds.to_iter_dataset(grain.ReadOptions(num_threads=2)))

    a, b = epoch_ids(first_half, 5), epoch_ids(second_half, 5)
    assert len(set(a)) == len(a) == len(first_half)
    assert len(set(b)) == len(b) == len(second_half)
    assert set(a).isdisjoint(b)
    assert sorted(a + b) == list(range(NUM_TRAIN))
    # The slice holds the first records of the split, in the split's order.
    assert [int(r["id"]) for r in grain.MapDataset.source(first_half)] == [
        int(train[i]["id"]) for i in range(len(first_half))
    ]
    test_split = tfds.data_source(NAME, data_dir=data_dir, split="test")
    assert sorted(_ids(_pipeline(test_split, seed=5, drop_remainder=False))) == list(
        range(1000, 1000 + NUM_TEST)
    )


@pytest.fixture
def mock_mnist():
    """`tfds.data_source("mnist")` under `tfds.testing.mock_data`, and its records as a list.

    The mock's source has a `__getitems__` that fails (tensorflow-datasets 4.9:
    "_getitems() missing 1 required positional argument: 'record_keys'"). Grain
    reads only `source[i]`, so pipelines over it work there, and must here: a
    list of the same records, read one by one, is what they must equal.
    """
    with tfds.testing.mock_data(num_examples=MOCK_EXAMPLES):
        try:
            source = tfds.data_source("mnist", split="train")
        except Exception as error:  # e.g. no mnist metadata in this tfds install
            pytest.skip(f"tfds.testing.mock_data cannot mock mnist offline here: {error!r}")
        yield source, [source[i] for i in range(len(source))]


MOCK_EXAMPLES = 10


def _mock_pipeline(source):
    return (
        grain.MapDataset.source(source)
        .shuffle(seed=10)
        .map(_normalize)
        .batch(batch_size=4, drop_remainder=True)
    )


def _check_mock_batches(batches, size=4):
    for batch in batches:
        assert batch["image"].shape == (size, 28, 28, 1)
        assert batch["image"].dtype == np.float32
        assert batch["label"].shape == (size,)
        assert ((batch["label"] >= 0) & (batch["label"] < 10)).all()


def test_mock_data_mnist_tutorial(mock_mnist):
    source, records = mock_mnist
    assert len(source) == MOCK_EXAMPLES
    elements = grain.MapDataset.source(source).shuffle(seed=10).map(_normalize)
    for i in range(MOCK_EXAMPLES):
        record = elements[i]
        assert record["image"].shape == (28, 28, 1)
        assert record["image"].dtype == np.float32
        assert 0 <= int(record["label"]) < 10
    batches = list(_mock_pipeline(source))
    assert len(batches) == MOCK_EXAMPLES // 4
    _check_mock_batches(batches)
    _assert_batches_equal(batches, list(_mock_pipeline(records)))
    labels = [int(label) for batch in batches for label in batch["label"]]
    ids = {int(r["label"]) for r in records}
    assert set(labels) <= ids


@pytest.mark.timeout(120)
def test_mock_data_with_reading_threads(mock_mnist):
    source, records = mock_mnist
    options = grain.ReadOptions(num_threads=2)
    threaded = list(_mock_pipeline(source).to_iter_dataset(options))
    assert len(threaded) == MOCK_EXAMPLES // 4
    _check_mock_batches(threaded)
    _assert_batches_equal(threaded, list(_mock_pipeline(records).to_iter_dataset(options)))
    _assert_batches_equal(threaded, list(_mock_pipeline(source)))


# The worker pipelines hold no function of this module: the workers of a pipeline
# over TFDS's ArrayRecord reader start from the fork server and receive the
# pipeline pickled, and this test module is not importable there.
def _mp_pipeline(source):
    return (
        grain.MapDataset.source(source)
        .shuffle(seed=3)
        .to_iter_dataset(grain.ReadOptions(num_threads=2))
        .batch(2)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )


@pytest.mark.timeout(180)
def test_mock_data_in_mp_prefetch_workers(mock_mnist):
    source, records = mock_mnist
    got = list(_mp_pipeline(source))
    assert sum(len(batch["label"]) for batch in got) == MOCK_EXAMPLES
    assert all(batch["image"].shape[1:] == (28, 28, 1) for batch in got)
    _assert_batches_equal(got, list(_mp_pipeline(records)))


@pytest.mark.timeout(180)
def test_mock_data_in_data_loader_workers(mock_mnist):
    source, records = mock_mnist

    def loader(data_source):
        return grain.DataLoader(
            data_source=data_source,
            sampler=grain.samplers.IndexSampler(
                MOCK_EXAMPLES, grain.sharding.NoSharding(), shuffle=True, num_epochs=1, seed=5
            ),
            operations=[grain.transforms.Batch(batch_size=2)],
            worker_count=2,
        )

    got = list(loader(source))
    assert len(got) == MOCK_EXAMPLES // 2
    _check_mock_batches([_normalize(batch) for batch in got], size=2)
    _assert_batches_equal(got, list(loader(records)))
