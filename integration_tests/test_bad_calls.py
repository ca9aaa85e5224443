"""Bad calls across the public API: each raises the right exception, naming the argument.

One table, `BAD_CALLS`, holds every case: add a row to extend it. A row is
``id: (call, exception type, text the message must contain)``; the text is the
argument's name (or, where the culprit is not an argument, the thing that is
wrong: the missing path, the stage that cannot be pickled). Rows that need
worker processes started by ``spawn`` (so that the pipeline must be pickled)
say so with `SPAWN`.

`packages/grain-dataset/tests/test_map_bad_input.py` covers MapDataset's
arguments in depth; this table spans the other layers: IterDataset stages,
options, sources, samplers, the DataLoader, worker processes, JAX and Orbax.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import grain
import grain.experimental as ge
from grain.python import DataLoader, IndexSampler, NoSharding

SPAWN = "spawn"
M = grain.MapDataset


def _it() -> grain.IterDataset:
    return M.range(10).to_iter_dataset()


def _sampler(n: int = 2) -> IndexSampler:
    return IndexSampler(n, shard_options=NoSharding(), num_epochs=1)


def _cpu() -> Any:
    import jax

    return jax.devices()[0]


def _save_into(tmp: str, item: Any) -> None:
    import grain.checkpoint

    grain.checkpoint.CheckpointHandler().save(tmp, args=grain.checkpoint.CheckpointSave(item))


def _iterate(ds: Any) -> None:
    iterator = iter(ds)
    try:
        next(iterator)
    finally:
        iterator.close()


class _Twice(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def __init__(self, lock: Any = None):
        self.lock = lock

    def flat_map(self, element: Any) -> list[Any]:
        return [element, element]


def _first(first: Any, *rest: Any) -> Any:
    return first


# id: (call, exception type, the text the message must contain[, SPAWN])
BAD_CALLS: dict[str, tuple[Any, ...]] = {
    # -- negative, zero and wrongly typed sizes ------------------------------------------
    "IterDataset.batch size 0": (lambda: _it().batch(0), ValueError, "`batch_size`"),
    "IterDataset.batch size float": (lambda: _it().batch(2.0), TypeError, "`batch_size`"),
    "IterDataset.batch drop_remainder str": (
        lambda: _it().batch(2, drop_remainder="no"),
        TypeError,
        "`drop_remainder`",
    ),
    "ReadOptions num_threads -1": (
        lambda: grain.ReadOptions(num_threads=-1),
        ValueError,
        "num_threads",
    ),
    "ReadOptions prefetch_buffer_size -1": (
        lambda: grain.ReadOptions(prefetch_buffer_size=-1),
        ValueError,
        "prefetch_buffer_size",
    ),
    "ReadOptions num_threads float": (
        lambda: grain.ReadOptions(num_threads=2.5),
        TypeError,
        "num_threads",
    ),
    "MultiprocessingOptions num_workers -1": (
        lambda: grain.MultiprocessingOptions(num_workers=-1),
        ValueError,
        "num_workers",
    ),
    "MultiprocessingOptions buffer 0": (
        lambda: grain.MultiprocessingOptions(num_workers=1, per_worker_buffer_size=0),
        ValueError,
        "per_worker_buffer_size",
    ),
    "LimitIterDataset count -1": (lambda: ge.LimitIterDataset(_it(), -1), ValueError, "`count`"),
    "LimitIterDataset count str": (lambda: ge.LimitIterDataset(_it(), "3"), TypeError, "`count`"),
    "RepeatIterDataset num_epochs -1": (
        lambda: ge.RepeatIterDataset(_it(), -1),
        ValueError,
        "`num_epochs`",
    ),
    "InterleaveIterDataset cycle_length 0": (
        lambda: ge.InterleaveIterDataset([_it(), _it()], cycle_length=0),
        ValueError,
        "`cycle_length`",
    ),
    "WindowShuffleIterDataset window_size 0": (
        lambda: ge.WindowShuffleIterDataset(_it(), window_size=0, seed=1),
        ValueError,
        "`window_size`",
    ),
    "WindowShuffleMapDataset window_size 0": (
        lambda: ge.WindowShuffleMapDataset(M.range(5), window_size=0, seed=1),
        ValueError,
        "`window_size`",
    ),
    "ThreadPrefetchIterDataset buffer -1": (
        lambda: ge.ThreadPrefetchIterDataset(_it(), prefetch_buffer_size=-1),
        ValueError,
        "`prefetch_buffer_size`",
    ),
    "RebatchIterDataset batch_size 0": (
        lambda: ge.RebatchIterDataset(_it(), batch_size=0),
        ValueError,
        "`batch_size`",
    ),
    "FirstFitPackIterDataset bins 0": (
        lambda: ge.FirstFitPackIterDataset(_it(), length_struct={"t": 4}, num_packing_bins=0),
        ValueError,
        "`num_packing_bins`",
    ),
    "BestFitPackIterDataset negative length": (
        lambda: ge.BestFitPackIterDataset(_it(), length_struct={"t": -4}, num_packing_bins=2),
        ValueError,
        "`length_struct['t']`",
    ),
    "ConcatThenSplitIterDataset length 0": (
        lambda: ge.ConcatThenSplitIterDataset(_it(), length_struct={"t": 0}),
        ValueError,
        "`length_struct['t']`",
    ),
    "CachedMapDataset max_elements -1": (
        lambda: ge.CachedMapDataset(M.range(5), max_elements=-1),
        ValueError,
        "`max_elements`",
    ),
    "batch_and_pad batch_size 0": (
        lambda: ge.batch_and_pad(_it(), batch_size=0),
        ValueError,
        "`batch_size`",
    ),
    "SharedMemoryArray negative shape": (
        lambda: grain.multiprocessing.SharedMemoryArray((-1,), np.float32),
        ValueError,
        "shape",
    ),
    "IndexSampler num_records -1": (
        lambda: IndexSampler(-1, shard_options=NoSharding()),
        ValueError,
        "`num_records`",
    ),
    "IndexSampler num_epochs 0": (
        lambda: IndexSampler(10, shard_options=NoSharding(), num_epochs=0),
        ValueError,
        "`num_epochs`",
    ),
    "ShardOptions index past count": (
        lambda: grain.python.ShardOptions(shard_index=3, shard_count=2),
        ValueError,
        "`shard_index`",
    ),
    "DataLoader worker_count -1": (
        lambda: DataLoader(data_source=[1, 2], sampler=_sampler(), worker_count=-1),
        ValueError,
        "`worker_count`",
    ),
    "RangeDataSource step 0": (
        lambda: grain.python.RangeDataSource(0, 10, 0),
        ValueError,
        "`step`",
    ),
    "device_put cpu_buffer_size -1": (
        lambda: ge.device_put(_it(), _cpu(), cpu_buffer_size=-1),
        ValueError,
        "`cpu_buffer_size`",
    ),
    "device_put device_buffer_size 0": (
        lambda: ge.device_put(_it(), _cpu(), device_buffer_size=0),
        ValueError,
        "`device_buffer_size`",
    ),
    # -- wrong types ----------------------------------------------------------------------
    "mp_prefetch options of the wrong type": (
        lambda: _it().mp_prefetch(5),
        TypeError,
        "`options`",
    ),
    "mp_prefetch worker_init_fn not callable": (
        lambda: _it().mp_prefetch(grain.MultiprocessingOptions(1), worker_init_fn=5),
        TypeError,
        "`worker_init_fn`",
    ),
    "IterDataset.map of an int": (lambda: _it().map(5), TypeError, "`transform`"),
    "IterDataset.random_map seed -1": (
        lambda: _it().random_map(lambda x, rng: x, seed=-1),
        ValueError,
        "`seed`",
    ),
    "IterDataset.seed str": (lambda: _it().seed("x"), TypeError, "`seed`"),
    "FlatMapIterDataset of an int": (
        lambda: ge.FlatMapIterDataset(_it(), 5),
        TypeError,
        "`transform`",
    ),
    "ZipIterDataset of an int": (
        lambda: ge.ZipIterDataset([_it(), 5]),
        TypeError,
        "`parents[1]`",
    ),
    "ThreadPrefetchIterDataset of a list": (
        lambda: ge.ThreadPrefetchIterDataset([1, 2, 3], prefetch_buffer_size=1),
        TypeError,
        "`parent`",
    ),
    "WithOptionsIterDataset options of the wrong type": (
        lambda: ge.WithOptionsIterDataset(_it(), 5),
        TypeError,
        "`options`",
    ),
    "DatasetOptions ratio above 1": (
        lambda: ge.DatasetOptions(filter_raise_threshold_ratio=2),
        ValueError,
        "`filter_raise_threshold_ratio`",
    ),
    "to_iter_dataset read_options of the wrong type": (
        lambda: M.range(3).to_iter_dataset(read_options=5),
        TypeError,
        "`read_options`",
    ),
    "to_iter_dataset allow_nones str": (
        lambda: M.range(3).to_iter_dataset(allow_nones="x"),
        TypeError,
        "`allow_nones`",
    ),
    "apply_transformations of an int": (
        lambda: ge.apply_transformations(M.range(3), [5]),
        TypeError,
        "transformations[0]",
    ),
    "get_element_spec of an int": (lambda: ge.get_element_spec(5), TypeError, "`ds`"),
    "DataLoader sampler of an int": (
        lambda: DataLoader(data_source=[1, 2], sampler=5),
        TypeError,
        "`sampler`",
    ),
    "DataLoader data_source of an int": (
        lambda: DataLoader(data_source=5, sampler=_sampler()),
        TypeError,
        "`data_source`",
    ),
    "DataLoader operation of an int": (
        lambda: DataLoader(data_source=[1, 2], sampler=_sampler(), operations=[5]),
        TypeError,
        "`operations[0]`",
    ),
    "SharedMemoryDataSource of an int": (
        lambda: grain.sources.SharedMemoryDataSource(5),
        TypeError,
        "`elements`",
    ),
    "ArrayRecordDataSource paths of an int": (
        lambda: grain.sources.ArrayRecordDataSource(3),
        TypeError,
        "`paths`",
    ),
    "device_put device str": (lambda: ge.device_put(_it(), "cpu"), TypeError, "`device`"),
    "device_put of a MapDataset": (
        lambda: ge.device_put(M.range(3), _cpu()),
        TypeError,
        "`ds`",
    ),
    "make_global_batch of a scalar": (lambda: ge.make_global_batch(5), ValueError, "`batch`"),
    "CheckpointSave of an int": (
        lambda: _save_into("/nonexistent-grain-dir", 5),
        TypeError,
        "data iterator",
    ),
    "mp_prefetch of a MapDataset": (
        lambda: __import__("grain_mp").MultiprocessPrefetchIterDataset(
            M.range(3), grain.MultiprocessingOptions(1)
        ),
        TypeError,
        "IterDataset",
    ),
    # -- empty datasets, zero weights, infinite where finite is needed --------------------
    "IterDataset.mix weights all zero": (
        lambda: grain.IterDataset.mix([_it(), _it()], weights=[0, 0]),
        ValueError,
        "`weights`",
    ),
    "IterDataset.mix no datasets": (lambda: grain.IterDataset.mix([]), ValueError, "`datasets`"),
    "MapDataset.mix weight nan": (
        lambda: M.mix([M.range(3), M.range(3)], weights=[float("nan"), 1]),
        ValueError,
        "`weights[0]`",
    ),
    "ZipIterDataset no parents": (lambda: ge.ZipIterDataset([]), ValueError, "`parents`"),
    "repeat with zero epochs": (lambda: M.range(3).repeat(0), ValueError, "`num_epochs`"),
    "mix of an empty dataset repeated": (
        lambda: M.mix([M.range(0).repeat(), M.range(3).repeat()])[0],
        ValueError,
        "of mix is empty",
    ),
    "element 0 of an empty dataset": (lambda: M.source([])[0], IndexError, "empty"),
    "a sampler without records": (
        lambda: IndexSampler(0, shard_options=NoSharding(), num_epochs=None),
        ValueError,
        "`num_records` must be >= 1",
    ),
    "concatenate an infinite dataset first": (
        lambda: M.concatenate([M.range(3).repeat(), M.range(3)]),
        ValueError,
        "`datasets[0]`",
    ),
    "index_shuffle index past max_index": (
        lambda: ge.index_shuffle(5, max_index=0, seed=1, rounds=4),
        ValueError,
        "`index`",
    ),
    # -- missing files --------------------------------------------------------------------
    "ArrayRecordDataSource missing file": (
        lambda: grain.sources.ArrayRecordDataSource("/nonexistent/x.array_record"),
        FileNotFoundError,
        "/nonexistent/x.array_record",
    ),
    "TFRecordIterDataset missing file": (
        lambda: ge.TFRecordIterDataset("/nonexistent/x.tfrecord"),
        FileNotFoundError,
        "/nonexistent/x.tfrecord",
    ),
    "ParquetIterDataset missing file": (
        lambda: ge.ParquetIterDataset("/nonexistent/x.parquet"),
        FileNotFoundError,
        "/nonexistent/x.parquet",
    ),
    "DatasetIterator.load missing directory": (
        lambda: __import__("asyncio").run(iter(_it()).load("/nonexistent-grain-checkpoint")),
        FileNotFoundError,
        "/nonexistent-grain-checkpoint",
    ),
    # -- unpicklable transforms (worker processes started by spawn) -----------------------
    # Lambdas and local classes pickle (by cloudpickle); what holds a lock does not.
    "mp_prefetch of a map holding a lock under spawn": (
        lambda: (
            M.range(4)
            .map(functools.partial(_first, threading.Lock()))
            .to_iter_dataset()
            .mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
        ),
        TypeError,
        "MapMapDataset",
        SPAWN,
    ),
    "mp_prefetch of an unpicklable worker_init_fn under spawn": (
        lambda: _it().mp_prefetch(
            grain.MultiprocessingOptions(num_workers=1),
            worker_init_fn=functools.partial(_first, threading.Lock()),
        ),
        TypeError,
        "`worker_init_fn`",
        SPAWN,
    ),
    # Sequential slices: the workers run the whole pipeline (over a positional pipeline
    # a flat map runs in the parent, where nothing is pickled).
    "flat_map of a transform holding a lock under spawn": (
        lambda: _iterate(
            ge.FlatMapIterDataset(_it(), _Twice(lock=threading.Lock())).mp_prefetch(
                grain.MultiprocessingOptions(num_workers=1), sequential_slice=True
            )
        ),
        TypeError,
        "FlatMapIterDataset",
        SPAWN,
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_call_raises_naming_the_argument(row, monkeypatch):
    call, error, named, *flags = row
    if SPAWN in flags:  # worker processes that must pickle the pipeline (threads never do)
        monkeypatch.setenv("GRAIN_PY_WORKER_EXECUTOR", "processes")
        monkeypatch.setenv("GRAIN_MP_START_METHOD", "spawn")
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error or issubclass(type(info.value), error)
    assert named in str(info.value), f"{named!r} is not named in: {info.value}"


def test_the_table_has_at_least_forty_rows():
    assert len(BAD_CALLS) >= 40


def test_every_row_is_well_formed():
    for key, row in BAD_CALLS.items():
        call, error, named, *flags = row
        assert isinstance(call, Callable), key  # type: ignore[arg-type]
        assert issubclass(error, BaseException), key
        assert isinstance(named, str), key
        assert named, key
        assert set(flags) <= {SPAWN}, key
        assert not re.search(r"\s$", named), key
