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


# -- resizes: another host or worker count after a checkpoint ------------------------


def _source(paths, kind, options):
    """(the sharded source, the pipeline over it that yields rows)."""
    if kind == "parquet":
        source = ShardedParquetIterDataset(paths[kind], shard_options=options)
        return source, source
    if kind == "tfrecord":
        source = ShardedTFRecordIterDataset(paths[kind], shard_options=options)
        return source, source.map(json.loads)
    source = ShardedJsonLinesIterDataset(paths[kind], shard_options=options)
    return source, source


def _host_state(leaves, sequential):
    """A host's state of the shape mp_prefetch gives it (one state without workers)."""
    if len(leaves) == 1 and not sequential:
        return leaves[0]
    state = {"next_worker": 0, "parents": leaves}
    if sequential:
        state["sequential_slice"] = 1
    return state


def _run_hosts(paths, kind, hosts, workers, sequential, states, takes):
    """Every host and worker of one run: restored from `states`, each reads its take."""
    delivered, saved = [], []
    for host in range(hosts):
        source, ds = _source(paths, kind, ShardOptions(host, hosts))
        iterators = [iter_worker_slice(ds, w, workers, sequential) for w in range(workers)]
        like = _host_state([it.get_state() for it in iterators], sequential)
        if states is not None:
            resized = json.loads(json.dumps(source.resized_state(states, like)))
            parts = resized.get("parents", [resized])
            for iterator, part in zip(iterators, parts, strict=True):
                iterator.set_state(part)
        for w, iterator in enumerate(iterators):
            for _ in range(takes(host, w)):
                try:
                    delivered.append(next(iterator)["id"])
                except StopIteration:
                    break
        saved.append(_host_state([it.get_state() for it in iterators], sequential))
        for iterator in iterators:
            iterator.close()
    return delivered, saved


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_resizes_lose_and_repeat_nothing(paths, kind, data):
    # Runs with random host and worker counts and slicings, each stopped at random
    # positions (workers at different paces), the last one read to the end.
    delivered, states = [], None
    runs = data.draw(st.integers(1, 4))
    for run in range(runs + 1):
        hosts, workers = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 4))
        sequential = data.draw(st.booleans())
        last = run == runs
        takes = st.integers(0, 30)

        def take(host, worker, last=last, takes=takes):
            return TOTAL if last else data.draw(takes)

        out, states = _run_hosts(paths, kind, hosts, workers, sequential, states, take)
        delivered += out
    assert sorted(delivered) == list(range(TOTAL))


def test_a_resized_state_is_small_and_restores_as_saved(paths):
    # 3 hosts of 4 workers at uneven paces -> 2 hosts of 3 workers, then a plain resume.
    def take(host, worker):
        return 3 + 2 * worker + host

    head, old = _run_hosts(paths, "parquet", 3, 4, False, None, take)
    middle, states = _run_hosts(paths, "parquet", 2, 3, False, old, take)
    plan = states[0]["parents"][0]["plan"]
    # A run per old worker at most, a range per old host: a few integers per old shard.
    assert len(plan["leftovers"]) <= 12
    assert len(plan["segments"]) <= 3
    assert json.loads(json.dumps(states)) == states
    rest, _ = _run_hosts(paths, "parquet", 2, 3, False, states, lambda h, w: TOTAL)
    assert sorted(head + middle + rest) == list(range(TOTAL))
    assert len(set(head + middle)) == len(head + middle)


def test_resizes_refuse_what_cannot_work(paths):
    source = ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(0, 2))
    iterator = iter(source)
    next(iterator)
    state = iterator.get_state()
    like = iter(source).get_state()
    with pytest.raises(TypeError, match="list of the states of all hosts"):
        source.resized_state(state, like)
    with pytest.raises(ValueError, match=r"keep\s+no state of their own"):
        source.resized_state([{"parent": state, "buffer": [1]}], like)
    # One host's state passed as if it were the only host: record 1 is not host 0 of 1's.
    wrong = ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(1, 2))
    wrong_it = iter(wrong)
    next(wrong_it)
    with pytest.raises(ValueError, match="in host order"):
        source.resized_state([wrong_it.get_state(), state], like)
    dropping = ShardedParquetIterDataset(
        paths["parquet"], shard_options=ShardOptions(0, 2, drop_remainder=True)
    )
    with pytest.raises(ValueError, match="drop_remainder=False"):
        dropping.resized_state([state, state], like)
    # A resized state restores only into the host and worker count it was made for.
    resized = source.resized_state([state, like], like)
    three = ShardedParquetIterDataset(paths["parquet"], shard_options=ShardOptions(0, 3))
    with pytest.raises(ValueError, match="resized for 2 hosts of 1 workers"):
        iter(three).set_state(resized)
    with pytest.raises(ValueError, match="states of all hosts of the last run"):
        source.resized_state([resized], like)
    iterator.close()
    wrong_it.close()
