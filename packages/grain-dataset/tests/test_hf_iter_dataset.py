"""HFIterDataset over HuggingFace streaming datasets read from local Parquet and JSON-lines files.

Nothing is downloaded: the files are written to a tmp dir and read with HF's
packaged "parquet" and "json" builders, offline.
"""

import json
import os
import sys
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from grain_dataset import HFIterDataset  # noqa: E402
from grain_dataset.extension import iter_worker_slice  # noqa: E402
from grain_index import ShardOptions  # noqa: E402

SIZES = (90, 60)  # two files; Parquet row groups of 25 rows: 4 + 3 HF shards after reshard()
TOTAL = sum(SIZES)


def _keep(row):
    return row["id"] % 3 != 0


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    out = {"parquet": [], "json": []}
    start = 0
    for f, size in enumerate(SIZES):
        rows = [{"id": i, "text": f"t{i}"} for i in range(start, start + size)]
        start += size
        pq.write_table(pa.Table.from_pylist(rows), root / f"{f}.parquet", row_group_size=25)
        (root / f"{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        out["parquet"].append(str(root / f"{f}.parquet"))
        out["json"].append(str(root / f"{f}.jsonl"))
    return out


def _stream(files, kind="parquet"):
    return datasets.load_dataset(kind, data_files=files[kind], split="train", streaming=True)


def _ids(iterable):
    ids = [row["id"] for row in iterable]
    close = getattr(iterable, "close", None)
    if close is not None:
        close()
    return ids


FILTERED = [i for i in range(TOTAL) if i % 3 != 0]


@pytest.mark.parametrize("hosts", [1, 2, 3, 7])
def test_hosts_read_every_element_once_after_a_filter(files, hosts):
    hf = _stream(files).filter(_keep)
    shards = [
        _ids(iter(HFIterDataset(hf, shard_options=ShardOptions(h, hosts)))) for h in range(hosts)
    ]
    assert sorted(i for shard in shards for i in shard) == FILTERED
    # Hosts get HF shard counts that differ by at most one: with fewer files than hosts,
    # the shards are row groups (of 25 rows, or fewer at a file's end), so the rows kept
    # differ by at most two row groups' worth; by files, at most one file's (90 vs 60 rows).
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= (34 if hosts > 2 else 60)


def test_the_workers_of_a_host_read_exactly_the_host_piece(files):
    hf = _stream(files).filter(_keep)
    ds = HFIterDataset(hf, shard_options=ShardOptions(1, 2))
    host = _ids(iter(ds))
    parts = [_ids(iter_worker_slice(ds, w, 2)) for w in range(2)]
    assert sorted(parts[0] + parts[1]) == sorted(host)
    assert not set(parts[0]) & set(parts[1])


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hosts=st.integers(1, 3), data=st.data())
def test_resuming_after_a_filter_loses_and_repeats_nothing(files, hosts, data):
    host = data.draw(st.integers(0, hosts - 1))
    ds = HFIterDataset(_stream(files).filter(_keep), shard_options=ShardOptions(host, hosts))
    assert not ds.replays_on_restore
    whole = _ids(iter(ds))
    k = data.draw(st.integers(0, len(whole)))
    iterator = iter(ds)
    head = [next(iterator)["id"] for _ in range(k)]
    state = json.loads(json.dumps(iterator.get_state()))  # a checkpoint is JSON
    iterator.close()
    resumed = iter(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # HF's own state resumes: no replay, no warning
        resumed.set_state(state)
    assert head + _ids(resumed) == whole


def test_a_state_restores_through_a_pipeline(files):
    ds = HFIterDataset(_stream(files).filter(_keep)).map(lambda r: r["id"]).batch(4)
    whole = [list(b) for b in ds]
    for k in (0, 1, 7, len(whole)):
        iterator = iter(ds)
        head = [list(next(iterator)) for _ in range(k)]
        state = iterator.get_state()
        iterator.close()
        resumed = iter(ds)
        resumed.set_state(state)
        assert head + [list(b) for b in resumed] == whole


def test_a_shuffle_buffer_resumes_by_replay_and_says_what_it_costs(files):
    hf = _stream(files).shuffle(seed=3, buffer_size=20)
    ds = HFIterDataset(hf)
    assert ds.replays_on_restore
    whole = _ids(iter(ds))
    assert sorted(whole) == list(range(TOTAL))
    assert whole != list(range(TOTAL))
    iterator = iter(ds)
    head = [next(iterator)["id"] for _ in range(41)]
    state = iterator.get_state()
    assert state == {"hf": None, "read": 41}
    iterator.close()
    resumed = iter(ds)
    with pytest.warns(UserWarning, match=r"discards the 41 element\(s\).*shuffle buffer"):
        resumed.set_state(state)
    assert head + _ids(resumed) == whole


def test_a_batched_arrow_map_resumes_by_replay(files):
    def double(table):
        return table.set_column(0, "id", pa.compute.multiply(table["id"], 2))

    hf = _stream(files).with_format("arrow").map(double, batched=True, batch_size=7)
    ds = HFIterDataset(hf.with_format(None))
    assert ds.replays_on_restore
    assert not HFIterDataset(_stream(files).map(lambda r: r)).replays_on_restore


def test_replay_can_be_asked_for(files):
    ds = HFIterDataset(_stream(files).filter(_keep), resume="replay")
    iterator = iter(ds)
    head = [next(iterator)["id"] for _ in range(5)]
    state = iterator.get_state()
    iterator.close()
    resumed = iter(ds)
    with pytest.warns(UserWarning, match='resume="replay" was asked for'):
        resumed.set_state(state)
    assert head + _ids(resumed) == FILTERED


def test_fewer_shards_than_readers_reads_everything_and_warns(files):
    # JSON files are not split by reshard(): 2 HF shards for 3 hosts.
    hf = _stream(files, "json").filter(_keep)
    shards = []
    for h in range(3):
        ds = HFIterDataset(hf, shard_options=ShardOptions(h, 3))
        with pytest.warns(UserWarning, match="3 times the reading"):
            iterator = iter(ds)
        shards.append(_ids(iterator))
    assert sorted(i for shard in shards for i in shard) == FILTERED
    sizes = [len(shard) for shard in shards]
    assert max(sizes) - min(sizes) <= 1
    # It resumes exactly too: the state counts the elements read, others' included.
    ds = HFIterDataset(hf, shard_options=ShardOptions(2, 3))
    with pytest.warns(UserWarning, match="times the reading"):
        iterator = iter(ds)
    head = [next(iterator)["id"] for _ in range(9)]
    state = iterator.get_state()
    iterator.close()
    with pytest.warns(UserWarning, match="times the reading"):
        resumed = iter(ds)
    resumed.set_state(state)
    assert head + _ids(resumed) == shards[2]


def test_bad_input_says_what_to_pass(files):
    table = datasets.Dataset.from_dict({"id": [1, 2, 3]})
    with pytest.raises(TypeError, match=r"MapDataset\.source\(dataset\)"):
        HFIterDataset(table)
    with pytest.raises(TypeError, match=r"must be a datasets\.IterableDataset"):
        HFIterDataset([{"id": 1}])
    hf = _stream(files)
    with pytest.raises(ValueError, match="`resume` must be one of"):
        HFIterDataset(hf, resume="sometimes")
    with pytest.raises(TypeError, match="ShardOptions"):
        HFIterDataset(hf, shard_options=2)
    with pytest.raises(ValueError, match=r"`shard_index` must be in \[0, shard_count\)"):
        HFIterDataset(hf, shard_options=ShardOptions(3, 3))
    iterator = iter(HFIterDataset(hf))
    with pytest.raises(ValueError, match="expected the keys"):
        iterator.set_state({"next": 3})
    with pytest.raises(ValueError, match="must be HF's state_dict"):
        iterator.set_state({"hf": [1, 2], "read": 3})
    replaying = iter(HFIterDataset(hf, resume="replay"))
    with (
        pytest.warns(UserWarning, match="replay"),
        pytest.raises(ValueError, match="stream ends after 150 element"),
    ):
        replaying.set_state({"hf": None, "read": 151})


def test_without_the_datasets_package_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    with pytest.raises(ImportError, match="pip install datasets"):
        HFIterDataset(object())
