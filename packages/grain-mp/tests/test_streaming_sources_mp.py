"""Sharded streaming sources under mp_prefetch: real worker processes, exact resumes.

Record-range datasets (Parquet, JSON lines): 2 workers of a host read exactly
that host's shard, in the same order as without workers, and a run resumed
from a checkpoint at any of several positions (a fresh mp_prefetch iterator,
fresh workers) continues with exactly the rest. HFIterDataset: the workers
read the host's piece of a filtered HF stream, and a resume loses and repeats
nothing. Parquet rows as a random-access source (RecordFilesDataSource):
ElasticIterator resumes a filtered run of 2 shards on 3 with every element
at most once and none lost but the last partial batch, and mp_prefetch
restores a state of 2 workers with 3. Resizes: record-range states saved by
H hosts of W workers continue on H' hosts of W' workers (`resized_state`),
every record delivered once over the runs.
"""

import collections
import contextlib
import json
import os
import random

import numpy as np
import pytest

from grain_dataset import MapDataset, ShardedJsonLinesIterDataset, ShardedParquetIterDataset
from grain_index import ShardOptions
from grain_mp import ElasticIterator, MultiprocessingOptions

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.timeout(180)

SIZES = (57, 44)
TOTAL = sum(SIZES)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp_streams")
    out = {"parquet": [], "jsonl": []}
    start = 0
    for f, size in enumerate(SIZES):
        rows = [{"id": i} for i in range(start, start + size)]
        start += size
        pq.write_table(pa.Table.from_pylist(rows), root / f"{f}.parquet", row_group_size=8)
        (root / f"{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out["parquet"].append(str(root / f"{f}.parquet"))
        out["jsonl"].append(str(root / f"{f}.jsonl"))
    return out


def _keep(row):
    return row["id"] % 4 != 1


def _take(iterator, count):
    return [next(iterator)["id"] for _ in range(count)]


def _rest(iterator):
    ids = [row["id"] for row in iterator]
    iterator.close()
    return ids


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("sequential", [False, True])
def test_record_ranges_under_workers_resume_exactly(paths, kind, sequential):
    cls = ShardedParquetIterDataset if kind == "parquet" else ShardedJsonLinesIterDataset
    source = cls(paths[kind], shard_options=ShardOptions(1, 3))
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    alone = [row["id"] for row in source]
    unfiltered = _rest(iter(source.mp_prefetch(options, sequential_slice=sequential)))
    if sequential:
        assert sorted(unfiltered) == alone
    else:
        assert unfiltered == alone  # the workers' turns give one process's order
    # A filter makes the workers' shares uneven: the same records, in another order.
    ds = source.filter(_keep)
    prefetched = ds.mp_prefetch(options, sequential_slice=sequential)
    whole = _rest(iter(prefetched))
    assert sorted(whole) == [i for i in alone if _keep({"id": i})]
    for k in (0, 5, len(whole) // 2, len(whole)):
        iterator = iter(prefetched)
        head = _take(iterator, k)
        state = json.loads(json.dumps(iterator.get_state()))
        iterator.close()
        resumed = iter(prefetched)
        resumed.set_state(state)
        assert head + _rest(resumed) == whole


def test_hf_stream_under_workers_resumes_after_a_filter(paths):
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    from grain_dataset import HFIterDataset

    hf = datasets.load_dataset(
        "parquet", data_files=paths["parquet"], split="train", streaming=True
    ).filter(_keep)
    ds = HFIterDataset(hf, shard_options=ShardOptions(0, 2))
    alone = sorted(row["id"] for row in ds)
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    prefetched = ds.mp_prefetch(options)
    whole = _rest(iter(prefetched))
    assert sorted(whole) == alone
    iterator = iter(prefetched)
    head = _take(iterator, 13)
    state = json.loads(json.dumps(iterator.get_state()))
    iterator.close()
    resumed = iter(prefetched)
    resumed.set_state(state)
    assert head + _rest(resumed) == whole


def _rows_source(paths):
    from grain_sources import ParquetRecordFiles, RecordFilesDataSource

    return MapDataset.source(RecordFilesDataSource(ParquetRecordFiles(paths["parquet"])))


def _id(row):
    return row["id"]


def _steps(iterators, steps, out):
    for _ in range(steps):
        for index, iterator in enumerate(iterators):
            with contextlib.suppress(StopIteration):  # a shard that ended stays ended
                out[index] += np.asarray(next(iterator)).tolist()
    return [iterator.get_state() for iterator in iterators]


@pytest.mark.parametrize("workers", [0, 2])
def test_parquet_rows_resize_under_elastic_iterator(paths, workers):
    # Filtered, so ElasticIterator restores from the states of all old shards.
    ds = _rows_source(paths).filter(_keep).map(_id)
    mp = MultiprocessingOptions(num_workers=workers) if workers else None

    def shards(count):
        return [
            ElasticIterator(ds, 12, ShardOptions(i, count), multiprocessing_options=mp)
            for i in range(count)
        ]

    before = collections.defaultdict(list)
    old = shards(2)
    states = _steps(old, 3, before)
    for iterator in old:
        iterator.close()
    after = collections.defaultdict(list)
    new = shards(3)
    for iterator in new:
        iterator.set_state(states)
    _steps(new, 100, after)
    for iterator in new:
        iterator.close()
    delivered = [i for part in (*before.values(), *after.values()) for i in part]
    expected = [i for i in range(TOTAL) if _keep({"id": i})]
    # Every element once at most; only the last partial global batch may be left out.
    assert len(delivered) == len(set(delivered))
    assert set(delivered) <= set(expected)
    assert len(expected) - len(delivered) < 12


def test_parquet_rows_restore_with_another_worker_count(paths):
    ds = _rows_source(paths).filter(_keep).map(_id).to_iter_dataset()
    whole = list(ds)
    iterator = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    head = [next(iterator) for _ in range(17)]
    state = iterator.get_state()
    iterator.close()
    resumed = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=3)))
    resumed.set_state(state)
    rest = list(resumed)
    resumed.close()
    assert head + rest == whole


def _resized_run(paths, kind, hosts, workers, sequential, states, rng, last):
    cls = ShardedParquetIterDataset if kind == "parquet" else ShardedJsonLinesIterDataset
    delivered, saved = [], []
    for host in range(hosts):
        source = cls(paths[kind], shard_options=ShardOptions(host, hosts))
        ds = source.filter(_keep)
        if workers:
            options = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)
            ds = ds.mp_prefetch(options, sequential_slice=sequential)
        iterator = iter(ds)
        if states is not None:
            resized = source.resized_state(states, iterator.get_state())
            iterator.set_state(json.loads(json.dumps(resized)))
        if last:
            delivered += _rest(iterator)
            continue
        for _ in range(rng.randrange(0, 30)):
            try:
                delivered.append(next(iterator)["id"])
            except StopIteration:
                break
        saved.append(json.loads(json.dumps(iterator.get_state())))
        iterator.close()
    return delivered, saved


@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
@pytest.mark.parametrize("seed", range(4))
def test_record_ranges_resize_hosts_and_workers(paths, kind, seed):
    # Random host and worker counts and slicings, stopped at random positions (a
    # filter makes the workers' paces differ), then read to the end on another count.
    rng = random.Random(seed)
    runs = [(2, 3, False), (3, 2, False)] if seed == 0 else []
    while len(runs) < 3:
        runs.append((rng.randrange(1, 4), rng.choice([0, 2, 3]), rng.random() < 0.3))
    delivered, states = [], None
    for number, (hosts, workers, sequential) in enumerate(runs):
        out, states = _resized_run(
            paths, kind, hosts, workers, sequential, states, rng, last=number == len(runs) - 1
        )
        delivered += out
    assert sorted(delivered) == [i for i in range(TOTAL) if _keep({"id": i})]
