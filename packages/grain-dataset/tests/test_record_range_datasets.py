"""Record-range sharded Parquet, TFRecord and JSON-lines datasets.

Properties: over any number of hosts (more hosts than files included) the
shards are contiguous, balanced within one record and together hold every
record exactly once; inside workers (in-process worker slices here; real
mp_prefetch workers in integration_tests/test_streaming_sources.py) a host's
workers together read exactly its shard, in its order when their elements are
taken in turn; a fresh iterator restored at any position continues with
exactly the rest.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import (
    ShardedJsonLinesIterDataset,
    ShardedParquetIterDataset,
    ShardedTFRecordIterDataset,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._iter_stages import _record_range_iter
from grain_dataset.extension import iter_worker_slice
from grain_index import ShardOptions
from grain_sources import write_tfrecord, write_tfrecord_index

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

# Two files, fewer than the hosts below; Parquet row groups of 16 rows.
SIZES = (70, 53)
TOTAL = sum(SIZES)
KINDS = ("parquet", "tfrecord", "jsonl")


def _row(i):
    return {"id": i, "text": "x" * (i % 7)}


@pytest.fixture(scope="module", autouse=True)
def small_blocks():
    # Iterators read 1024 records per block: with 7, these files take many blocks,
    # and restores land inside blocks and on their edges.
    original, _record_range_iter._BLOCK = _record_range_iter._BLOCK, 7
    yield
    _record_range_iter._BLOCK = original


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    out = {kind: [] for kind in KINDS}
    start = 0
    for f, size in enumerate(SIZES):
        rows = [_row(i) for i in range(start, start + size)]
        start += size
        pq.write_table(pa.Table.from_pylist(rows), root / f"{f}.parquet", row_group_size=16)
        write_tfrecord([json.dumps(r).encode() for r in rows], root / f"{f}.tfrecord")
        write_tfrecord_index(root / f"{f}.tfrecord")
        (root / f"{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        for kind in KINDS:
            out[kind].append(str(root / f"{f}.{kind}"))
    return out


def _make(paths, kind, options=None):
    if kind == "parquet":
        return ShardedParquetIterDataset(paths[kind], shard_options=options)
    if kind == "tfrecord":
        return ShardedTFRecordIterDataset(paths[kind], shard_options=options).map(json.loads)
    return ShardedJsonLinesIterDataset(paths[kind], shard_options=options)


def _ids(iterable):
    return [row["id"] for row in iterable]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hosts", [1, 2, 3, 8, 13])
def test_shards_are_balanced_and_hold_every_record_once(paths, kind, hosts):
    shards = [_ids(_make(paths, kind, ShardOptions(h, hosts))) for h in range(hosts)]
    assert sorted(i for shard in shards for i in shard) == list(range(TOTAL))
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1
    for shard in shards:  # contiguous ranges, in file order
        assert shard == list(range(shard[0], shard[0] + len(shard))) if shard else True


@pytest.mark.parametrize("kind", KINDS)
def test_drop_remainder_gives_equal_shards(paths, kind):
    options = [ShardOptions(h, 8, drop_remainder=True) for h in range(8)]
    shards = [_ids(_make(paths, kind, o)) for o in options]
    assert {len(shard) for shard in shards} == {TOTAL // 8}
    assert len(set().union(*map(set, shards))) == 8 * (TOTAL // 8)


def test_two_files_serve_eight_hosts_within_one_row_group(paths):
    for h in range(8):
        ds = ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(h, 8))
        start, stop = ds.shard_range
        assert stop - start in (TOTAL // 8, TOTAL // 8 + 1)


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    hosts=st.integers(1, 5),
    workers=st.integers(1, 4),
    sequential=st.booleans(),
    data=st.data(),
)
def test_workers_of_a_host_read_exactly_its_shard(paths, kind, hosts, workers, sequential, data):
    host = data.draw(st.integers(0, hosts - 1))
    ds = _make(paths, kind, ShardOptions(host, hosts))
    whole = _ids(ds)
    parts = [_ids(iter_worker_slice(ds, w, workers, sequential)) for w in range(workers)]
    if sequential:
        assert [i for part in parts for i in part] == whole
    else:
        # Taken in turn, as mp_prefetch takes them, the workers give the host's order.
        turns = [
            parts[n % workers][n // workers]
            for n in range(len(whole))
            if n // workers < len(parts[n % workers])
        ]
        assert turns == whole
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    hosts=st.integers(1, 4),
    workers=st.integers(1, 3),
    data=st.data(),
)
def test_a_restore_at_any_position_continues_exactly(paths, kind, hosts, workers, data):
    host = data.draw(st.integers(0, hosts - 1))
    worker = data.draw(st.integers(0, workers - 1))
    ds = _make(paths, kind, ShardOptions(host, hosts))
    whole = _ids(iter_worker_slice(ds, worker, workers))
    k = data.draw(st.integers(0, len(whole)))
    iterator = iter_worker_slice(ds, worker, workers)
    head = [next(iterator)["id"] for _ in range(k)]
    state = iterator.get_state()
    iterator.close()
    resumed = iter_worker_slice(ds, worker, workers)
    resumed.set_state(state)
    assert head + _ids(resumed) == whole


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_conformance_in_a_pipeline(paths, kind):
    ds = _make(paths, kind, ShardOptions(1, 3)).filter(lambda r: r["id"] % 3).batch(4)
    assert_equal_output_after_checkpoint(ds)


def test_state_is_two_integers_and_restores_only_into_its_shard(paths):
    ds = ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(1, 3))
    iterator = iter(ds)
    for _ in range(5):
        next(iterator)
    state = iterator.get_state()
    assert state == {"next": 5, "record": ds.shard_range[0] + 5}
    other = iter(ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(2, 3)))
    with pytest.raises(ValueError, match="other shard options, files or worker count"):
        other.set_state(state)
    with pytest.raises(ValueError, match="expected the keys"):
        other.set_state({"row": 3})
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        other.set_state({"next": "3", "record": 3})
    too_far = {"next": TOTAL, "record": ds.shard_range[0] + TOTAL}
    with pytest.raises(ValueError, match="does not fit"):
        iter(ds).set_state(too_far)
    iterator.close()
    other.close()


def test_bad_arguments_say_what_to_pass(paths, tmp_path):
    with pytest.raises(ValueError, match=r"`shard_index` must be in \[0, shard_count\)"):
        ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(8, 8))
    with pytest.raises(TypeError, match=r"must be a grain\.sharding\.ShardOptions"):
        ShardedJsonLinesIterDataset(paths["jsonl"], shard_options=(0, 2))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ShardedTFRecordIterDataset([paths["tfrecord"][0], str(tmp_path / "gone.tfrecord")])
    with pytest.raises(ValueError, match="empty"):
        ShardedJsonLinesIterDataset([])
