"""The DataLoader's Grain-facing surface: attributes Keras reads, DataLoaderIterator, load().

Facts from Grain 0.2.18 run as a black box: a loader exposes `_data_source`,
`_sampler`, `_operations` (a list), `_shard_options` (the loader's, else the
sampler's), `_read_options` (``ReadOptions()`` by default),
`_multiprocessing_options` and the `multiprocessing_options` property;
``worker_count=None`` means one worker per CPU (``os.cpu_count()``);
``DataLoaderIterator(loader, state, validate_state=True)`` takes the state as the
dict `get_state()`'s JSON decodes to; `grain.load` builds an IndexSampler and
appends a Batch when given a batch size. Grain's own checkpoints
(state version 2) are refused with an explanation.
"""

import json
import os

import numpy as np
import pytest

from grain_dataset import Batch, MapTransform, ReadOptions
from grain_index import IndexSampler, NoSharding, RecordMetadata, ShardOptions
from grain_mp import (
    DataLoader,
    DataLoaderIterator,
    MapOperation,
    MultiprocessingOptions,
    PyGrainDatasetIterator,
    load,
)

# What Grain 0.2.18 returned from `get_state()` after 3 elements of
# DataLoader(data_source=list(range(20)), sampler=IndexSampler(20, NoSharding(),
# shuffle=True, num_epochs=1, seed=0), worker_count=2) (Grain's first three
# elements were [15, 4, 10]).
GRAIN_STATE = (
    b'{\n    "version": 2,\n    "last_seen_indices": {\n        "0": 2,\n        "1": 1\n'
    b'    },\n    "last_worker_index": 0,\n    "worker_count": 2,\n    "sampler": '
    b'"IndexSampler(num_records=20, shard_options=NoSharding(shard_index=0, shard_count=1, '
    b'drop_remainder=False), shuffle=True, num_epochs=1, seed=0)",\n    "data_source": '
    b"\"<class 'list'>\"\n}"
)


class Double(MapTransform):
    def map(self, x):
        return x * 2


def _sampler(n=20, **kwargs):
    kwargs = {"shuffle": True, "num_epochs": 1, "seed": 0, **kwargs}
    return IndexSampler(n, **kwargs)


def _loader(**kwargs):
    kwargs = {"data_source": list(range(20)), "sampler": _sampler(), **kwargs}
    return DataLoader(**kwargs)


def test_the_attributes_keras_reads_have_graines_values():
    ops = (Double(), Batch(2))
    loader = _loader(operations=ops, worker_count=3, worker_buffer_size=4, enable_profiling=True)
    assert loader._data_source == list(range(20))
    assert repr(loader._sampler) == repr(_sampler())
    assert loader._operations == list(ops)
    assert isinstance(loader._operations, list)
    assert loader._shard_options == NoSharding()
    assert loader._read_options == ReadOptions(num_threads=16, prefetch_buffer_size=500)
    expected = MultiprocessingOptions(
        num_workers=3, per_worker_buffer_size=4, enable_profiling=True
    )
    assert loader._multiprocessing_options == expected
    assert loader.multiprocessing_options == expected
    defaults = _loader()
    assert defaults.multiprocessing_options == MultiprocessingOptions(0, 1, False)
    assert _loader(read_options=ReadOptions(num_threads=2))._read_options.num_threads == 2


def test_shard_options_shows_the_loaders_else_the_samplers():
    sharded = _sampler(shard_options=ShardOptions(1, 2))
    assert _loader(sampler=sharded)._shard_options == ShardOptions(1, 2)
    assert _loader(shard_options=ShardOptions(0, 4))._shard_options == ShardOptions(0, 4)


class CustomSampler:
    def __getitem__(self, step):
        if step >= 20:
            raise IndexError(step)
        return RecordMetadata(index=step, record_key=step)


def test_a_custom_sampler_without_shard_options_reads_everything():
    loader = _loader(sampler=CustomSampler())
    assert loader._shard_options == NoSharding()  # Grain raises here instead
    assert list(loader) == list(range(20))


@pytest.mark.timeout(60)
def test_a_loader_rebuilt_the_way_keras_does_reads_the_same_and_takes_its_states():
    sampler = _sampler(n=20, shard_options=ShardOptions(1, 2), num_epochs=2)
    loader = _loader(sampler=sampler, operations=[Double()], worker_count=0)
    rebuilt = DataLoader(
        data_source=loader._data_source,
        sampler=loader._sampler,
        operations=[*list(loader._operations), MapOperation(np.negative)],
        worker_count=loader._multiprocessing_options.num_workers,
        worker_buffer_size=loader._multiprocessing_options.per_worker_buffer_size,
        shard_options=loader._shard_options,
        read_options=loader._read_options,
        enable_profiling=loader._multiprocessing_options.enable_profiling,
    )
    original = list(loader)
    assert len(original) == 20  # the sampler's shard, two epochs: not sharded twice
    assert [int(x) for x in rebuilt] == [-x for x in original]
    it = iter(loader)
    for _ in range(7):
        next(it)
    resumed = iter(rebuilt)
    resumed.set_state(it.get_state())
    assert [int(x) for x in resumed] == [-x for x in original[7:]]


def test_worker_count_none_is_one_per_cpu():
    assert _loader(worker_count=None).multiprocessing_options.num_workers == os.cpu_count()


# -- DataLoaderIterator -----------------------------------------------------------------


def test_iter_returns_a_data_loader_iterator_also_named_py_grain_dataset_iterator():
    it = iter(_loader())
    assert type(it) is DataLoaderIterator
    assert PyGrainDatasetIterator is DataLoaderIterator


def test_the_iterator_is_constructible_with_a_state_as_grain_passes_it():
    loader = _loader(operations=[Double()])
    everything = list(loader)
    it = DataLoaderIterator(loader)
    assert [next(it) for _ in range(5)] == everything[:5]
    state = it.get_state()
    for form in (json.loads(state), state, state.decode()):
        assert list(DataLoaderIterator(loader, form)) == everything[5:]
    assert list(DataLoaderIterator(loader, None)) == everything
    assert list(DataLoaderIterator(data_loader=loader, state=json.loads(state))) == everything[5:]


def test_validate_state_false_skips_the_identity_check_only():
    loader = _loader()
    it = iter(loader)
    next(it)
    state = json.loads(it.get_state())
    state["sampler"] = "another sampler"
    with pytest.raises(ValueError, match="sampler"):
        DataLoaderIterator(loader, state)
    relaxed = DataLoaderIterator(loader, state, validate_state=False)
    assert list(relaxed) == list(loader)[1:]
    relaxed.set_state(state)  # set_state follows the iterator's setting
    state["last_seen_indices"] = {"0": 10**9}
    with pytest.raises(ValueError, match="past the end"):
        DataLoaderIterator(loader, state, validate_state=False)


def test_start_prefetch_starts_reading_early():
    loader = _loader(operations=[Double()])
    it = DataLoaderIterator(loader)
    it.start_prefetch()
    assert list(it) == list(loader)
    it.close()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: DataLoaderIterator([1, 2]), TypeError, "`data_loader`"),
        (lambda: DataLoaderIterator(_loader(), None, validate_state=1), TypeError, "validate"),
        (lambda: DataLoaderIterator(_loader(), {"x": 1}), ValueError, "not a DataLoader state"),
    ],
)
def test_bad_iterator_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- Grain's checkpoints ----------------------------------------------------------------


@pytest.mark.parametrize("form", ["bytes", "str", "dict"])
def test_a_grain_checkpoint_is_refused_with_the_reason(form):
    state = {"bytes": GRAIN_STATE, "str": GRAIN_STATE.decode(), "dict": json.loads(GRAIN_STATE)}
    loader = _loader(worker_count=0)
    it = iter(loader)
    message = "written by Google's Grain.*cannot be resumed.*sampler shuffles"
    with pytest.raises(ValueError, match=message):
        it.set_state(state[form])
    with pytest.raises(ValueError, match=message):
        DataLoaderIterator(loader, state[form], validate_state=False)
    assert list(it) == list(loader)  # the iterator did not move


# -- load ------------------------------------------------------------------------------


def test_load_builds_an_index_sampler_and_a_final_batch():
    loader = load(list(range(10)), num_epochs=1, batch_size=3)
    assert repr(loader._sampler) == repr(IndexSampler(10, NoSharding(), False, 1, None))
    assert loader._operations == [Batch(3, drop_remainder=False)]
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    dropped = load(list(range(10)), num_epochs=1, batch_size=3, drop_remainder=True)
    assert [b.tolist() for b in dropped] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_load_defaults_repeat_forever_without_shuffling():
    loader = load(list(range(10)))
    assert loader._operations == []
    assert loader.multiprocessing_options.num_workers == 0
    it = iter(loader)
    assert [next(it) for _ in range(12)] == [*range(10), 0, 1]
    it.close()


@pytest.mark.timeout(60)
def test_load_passes_everything_on():
    loader = load(
        list(range(10)),
        num_epochs=2,
        shuffle=True,
        seed=4,
        shard_options=ShardOptions(0, 2),
        transformations=[Double()],
        batch_size=4,
        worker_count=2,
        read_options=ReadOptions(num_threads=1),
    )
    sampler = IndexSampler(10, ShardOptions(0, 2), shuffle=True, num_epochs=2, seed=4)
    assert repr(loader._sampler) == repr(sampler)
    assert loader._shard_options == ShardOptions(0, 2)
    assert loader._read_options == ReadOptions(num_threads=1)
    assert loader.multiprocessing_options.num_workers == 2
    keys = [sampler[k].record_key * 2 for k in range(len(sampler))]
    assert [b.tolist() for b in loader] == [keys[i : i + 4] for i in range(0, 10, 4)]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"shuffle": True}, ValueError, "seed"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"num_epochs": 0}, ValueError, "num_epochs"),
        ({"worker_count": -1}, ValueError, "worker_count"),
        ({"transformations": None}, TypeError, "transformations"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 2**32}, ValueError, "seed"),
    ],
)
def test_load_refuses_what_grain_refuses(kwargs, error, match):
    with pytest.raises(error, match=match):
        load(list(range(10)), **kwargs)
    with pytest.raises(TypeError, match="source"):
        load(iter(range(3)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_closed_loader_iterator_refuses_next_and_its_state_resumes(workers):
    loader = _loader(worker_count=workers)
    expected = list(loader)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    it.close()
    with pytest.raises(ValueError, match="closed iterator"):
        next(it)
    it.close()  # idempotent
    resumed = DataLoaderIterator(loader, it.get_state())
    assert head + list(resumed) == expected


def test_loader_iterators_save_and_load_checkpoint_files(tmp_path):
    import asyncio

    loader = _loader()
    it = iter(loader)
    head = [next(it) for _ in range(7)]
    asyncio.run(it.save(tmp_path))
    saved = json.loads((tmp_path / "process_0-of-1.json").read_text())
    assert saved["grain_py_state_format"] == 1
    fresh = iter(loader)
    asyncio.run(fresh.load(tmp_path))
    assert head + list(fresh) == list(loader)


def test_multiprocessing_options_are_mutable_and_checked_like_grains():
    options = MultiprocessingOptions()
    options.num_workers = 3
    assert options == MultiprocessingOptions(num_workers=3)
    with pytest.raises(ValueError, match="per_worker_buffer_size"):
        options.per_worker_buffer_size = 0
    with pytest.raises(TypeError, match="enable_profiling"):
        options.enable_profiling = "yes"
    with pytest.raises(TypeError):
        hash(options)


@pytest.mark.parametrize("sampler", [None, 5, [0, 1, 2]])
def test_a_sampler_that_gives_no_record_metadata_is_refused_at_once(sampler):
    for kind in (TypeError, ValueError):  # ours, and Grain's for these calls
        with pytest.raises(kind, match="`sampler`"):
            DataLoader(data_source=[1, 2, 3], sampler=sampler, worker_count=0)


def test_an_operation_of_no_function_is_refused_with_both_types():
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match="map_function"):
            MapOperation(None)
