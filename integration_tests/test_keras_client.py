"""A real client of the Grain API: Keras 3 (JAX backend) trains on our datasets.

Keras' grain adapter accepts a `grain.MapDataset`, a `grain.IterDataset` or a
`grain.DataLoader`; for a DataLoader it rebuilds a new one from the loader's
attributes (`_data_source`, `_sampler`, `_operations`, `_shard_options`,
`_read_options`, `_multiprocessing_options`) with one more operation appended,
and it imports `grain._src.python.shared_memory_array` for its numpy path. This
file runs `model.fit` / `evaluate` / `predict` on each kind, as a user would.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np
import pytest

import grain
import grain.python as pg

keras = pytest.importorskip(
    "keras", reason="keras is not installed (no free-threaded wheel of its backends)"
)

pytestmark = [
    pytest.mark.timeout(240),
    # Keras says this at the end of the first epoch of any dataset of unknown length,
    # Grain's too, and then trains every epoch (checked against Grain 0.2.18).
    pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning"),
]

FEATURES, RECORDS, BATCH = 4, 96, 16
TRUE_W = np.array([[1.5], [-2.0], [0.5], [3.0]], dtype=np.float32)


class Regression(grain.sources.RandomAccessDataSource):
    """(x, y) pairs of a linear model with a little noise; picklable for worker processes."""

    def __init__(self, n: int = RECORDS):
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(n, FEATURES)).astype(np.float32)
        noise = 0.01 * rng.normal(size=(n, 1)).astype(np.float32)
        self.y = self.x @ TRUE_W + noise

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index]


class Scale(grain.transforms.Map):
    def map(self, element):
        x, y = element
        return x * np.float32(1.0), y


def map_dataset():
    return grain.MapDataset.source(Regression()).seed(1).shuffle().batch(BATCH)


def iter_dataset():
    return grain.MapDataset.source(Regression()).to_iter_dataset().batch(BATCH)


def data_loader(worker_count=0):
    source = Regression()
    return grain.DataLoader(
        data_source=source,
        # As Keras' tests build it: no shard_options, num_epochs=1.
        sampler=grain.samplers.IndexSampler(num_records=len(source), num_epochs=1),
        operations=[Scale(), grain.transforms.Batch(batch_size=BATCH)],
        shard_options=grain.sharding.NoSharding(),
        worker_count=worker_count,
        read_options=grain.ReadOptions(num_threads=0),
    )


# shuffle=False in fit(): Keras warns that it cannot shuffle a grain dataset (the
# pipeline shuffles), and warnings are errors in these tests.


def model():
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    return net


KINDS = {
    "MapDataset": map_dataset,
    "IterDataset": iter_dataset,
    "DataLoader": data_loader,
    "DataLoader with 2 workers": lambda: data_loader(worker_count=2),
}


@pytest.mark.parametrize("make", KINDS.values(), ids=KINDS.keys())
def test_fit_evaluate_and_predict(make):
    dataset = make()
    net = model()
    history = net.fit(dataset, epochs=4, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert len(losses) == 4
    assert losses[-1] < 0.2 * losses[0], losses
    assert net.evaluate(dataset, verbose=0) < 0.2 * losses[0]
    predictions = net.predict(dataset, verbose=0)
    assert predictions.shape == (RECORDS, 1)
    # The model learned the data, so the pipeline delivered real (x, y) pairs.
    learned = np.asarray(net.layers[0].kernel.value)  # a jax array
    assert np.allclose(learned, TRUE_W, atol=0.3), learned


def test_keras_rebuilds_a_loader_from_its_attributes():
    loader = data_loader(worker_count=2)
    rebuilt = grain.DataLoader(
        data_source=loader._data_source,
        sampler=loader._sampler,
        operations=[*list(loader._operations), Scale()],
        worker_count=loader._multiprocessing_options.num_workers,
        worker_buffer_size=loader._multiprocessing_options.per_worker_buffer_size,
        shard_options=loader._shard_options,
        read_options=loader._read_options,
        enable_profiling=loader._multiprocessing_options.enable_profiling,
    )
    first = [x.tolist() for x, _ in loader]
    assert [x.tolist() for x, _ in rebuilt] == first
    assert len(first) == RECORDS // BATCH


@pytest.mark.parametrize(
    "make", [map_dataset, iter_dataset, data_loader], ids=["map", "iter", "loader"]
)
def test_keras_grain_adapter_numpy_and_jax_iterators(make):
    # Keras' own adapter, as its trainers use it (the numpy path imports grain._src).
    from keras.src.trainers.data_adapters import grain_dataset_adapter

    adapter = grain_dataset_adapter.GrainDatasetAdapter(make())
    assert adapter.batch_size == BATCH
    numpy_batches = list(adapter.get_numpy_iterator())
    jax_batches = list(adapter.get_jax_iterator())
    assert len(numpy_batches) == len(jax_batches) == RECORDS // BATCH
    for (x, y), (jx, jy) in zip(numpy_batches, jax_batches, strict=True):
        assert isinstance(x, np.ndarray)
        assert x.shape == (BATCH, FEATURES)
        assert np.array_equal(np.asarray(jx), x)
        assert np.array_equal(np.asarray(jy), y)


def test_the_keras_adapter_rejects_what_is_not_a_grain_dataset():
    from keras.src.trainers.data_adapters import grain_dataset_adapter

    assert keras.src.trainers.data_adapters.is_grain_dataset(iter_dataset())
    assert keras.src.trainers.data_adapters.is_grain_dataset(data_loader())
    with pytest.raises(ValueError, match=r"grain\.MapDataset"):
        grain_dataset_adapter.GrainDatasetAdapter([1, 2, 3])


def test_pg_namespace_loader_trains_too():
    source = Regression()
    loader = pg.DataLoader(
        data_source=source,
        sampler=pg.IndexSampler(len(source), pg.NoSharding(), shuffle=True, num_epochs=1, seed=3),
        operations=[pg.BatchOperation(batch_size=BATCH, drop_remainder=True)],
        worker_count=0,
    )
    net = model()
    losses = net.fit(loader, epochs=3, verbose=0, shuffle=False).history["loss"]
    assert losses[-1] < losses[0]
