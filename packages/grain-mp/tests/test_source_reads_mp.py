"""Worker processes, the DataLoader and ElasticIterator read sources the way Grain does.

A source is read with ``source[i]`` unless its class declares ``batched_reads =
True``: an undeclared `__getitems__` (broken, as tfds.testing.mock_data's, or
returning other records) is never called, in the parent or in a worker; a
declared one is. The sources log their batched calls to a file, so that calls
made in worker processes are counted too.
"""

from __future__ import annotations

import os

import pytest

from grain_dataset import MapDataset, ReadOptions
from grain_index import IndexSampler, NoSharding, ShardOptions
from grain_mp import DataLoader, ElasticIterator, MultiprocessingOptions

N = 30


class Records:
    """Record i is ``3 * i``; batched calls append a line to `log`."""

    def __init__(self, log, n=N):
        self._log = str(log)
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if not 0 <= index < self._n:
            raise IndexError(index)
        return 3 * index

    def _record_call(self, indices):
        with open(self._log, "a") as log:
            log.write(f"{os.getpid()} {len(indices)}\n")


class Different(Records):
    def __getitems__(self, indices):
        self._record_call(indices)
        return [-1 for _ in indices]


class Broken(Records):
    def __getitems__(self, indices):
        self._record_call(indices)
        raise TypeError("_getitems() missing 1 required positional argument: 'record_keys'")


class Declared(Records):
    batched_reads = True

    def __getitems__(self, indices):
        self._record_call(indices)
        return [3 * i for i in indices]


def _calls(log):
    """(the sizes of the batched calls, the processes that made them)."""
    if not log.exists():
        return [], set()
    lines = [line.split() for line in log.read_text().splitlines()]
    return [int(size) for _, size in lines], {int(pid) for pid, _ in lines}


def _mp_prefetch(source, batch):
    ds = MapDataset.source(source).map(lambda x: x + 1).to_iter_dataset()
    if batch:
        ds = ds.batch(4)
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    return [v.tolist() if batch else v for v in ds]


def _loader(source, workers):
    sampler = IndexSampler(N, NoSharding(), shuffle=True, num_epochs=1, seed=4)
    return [int(v) for v in DataLoader(data_source=source, sampler=sampler, worker_count=workers)]


def _elastic(source, workers):
    mp = MultiprocessingOptions(num_workers=workers) if workers else None
    out = []
    for index in range(2):
        iterator = ElasticIterator(
            MapDataset.source(source).shuffle(seed=2),
            6,
            ShardOptions(index, 2),
            read_options=ReadOptions(num_threads=2),
            multiprocessing_options=mp,
        )
        out.append([batch.tolist() for batch in iterator])
    return out


def _read(how, source):
    kind, _, arg = how.partition(":")
    if kind == "mp_prefetch":
        return _mp_prefetch(source, batch=arg == "batch")
    if kind == "loader":
        return _loader(source, int(arg))
    return _elastic(source, int(arg))


HOWS = [
    "mp_prefetch:records",
    "mp_prefetch:batch",
    "loader:0",
    "loader:2",
    "elastic:0",
    "elastic:2",
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("kind", [Different, Broken], ids=["different", "broken"])
def test_an_undeclared_getitems_is_never_called(tmp_path, kind, how):
    expected = _read(how, Records(tmp_path / "plain.log"))
    log = tmp_path / "calls.log"
    assert _read(how, kind(log)) == expected
    assert _calls(log) == ([], set()), "the undeclared __getitems__ was called"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["mp_prefetch:batch", "loader:0", "loader:2", "elastic:2"])
def test_a_declared_getitems_is_called_in_workers_too(tmp_path, how):
    expected = _read(how, Records(tmp_path / "plain.log"))
    log = tmp_path / "calls.log"
    assert _read(how, Declared(log)) == expected
    sizes, pids = _calls(log)
    assert sum(sizes) >= N, "every record was read through __getitems__"
    assert max(sizes) > 1
    if how.endswith(":2") or how.startswith("mp_prefetch"):
        assert os.getpid() not in pids, "the workers, not the parent, read the records"
