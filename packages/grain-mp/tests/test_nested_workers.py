"""Workers cannot start workers: a nested mp_prefetch is refused with errors that say so.

Worker processes are daemons, and Python does not let a daemon start processes
(a bare ``AssertionError: daemonic processes are not allowed to have
children`` from inside a worker). mp_prefetch over a pipeline that already has
one is refused when it is built; a pipeline with workers iterated inside a
worker (or any daemon process) fails with an error naming the cause and fixes.
"""

import multiprocessing

import pytest

from grain_dataset import MapDataset, ThreadPrefetchIterDataset
from grain_index import IndexSampler, NoSharding
from grain_mp import DataLoader, MultiprocessingOptions

pytestmark = pytest.mark.timeout(60)

NESTED = "mp_prefetch over a pipeline that already has an mp_prefetch"
IN_WORKER = "mp_prefetch cannot start worker processes inside the grain worker process"
IN_DAEMON = "mp_prefetch cannot start worker processes inside the daemon process"


def _options(workers):
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)


def _plus_one(x):
    return x + 1


@pytest.mark.parametrize(
    "between",
    [
        lambda ds: ds,
        lambda ds: ds.map(_plus_one).batch(2),
        lambda ds: ThreadPrefetchIterDataset(ds.filter(bool), prefetch_buffer_size=2),
    ],
    ids=["directly", "map_and_batch", "thread_prefetch"],
)
def test_mp_prefetch_over_mp_prefetch_is_refused_when_built(between):
    inner = MapDataset.range(20).to_iter_dataset().mp_prefetch(_options(2))
    with pytest.raises(ValueError, match=NESTED) as caught:
        between(inner).mp_prefetch(_options(2))
    message = str(caught.value)
    assert "num_workers=" in message  # one mp_prefetch with more workers
    assert "ThreadPrefetchIterDataset" in message  # or threads for the outer stages


def test_mp_prefetch_over_mp_prefetch_with_zero_workers_is_allowed():
    # num_workers=0 adds no stage: nothing is nested.
    ds = MapDataset.range(8).to_iter_dataset().mp_prefetch(_options(0)).map(_plus_one)
    assert list(ds.mp_prefetch(_options(2))) == list(range(1, 9))
    ds = MapDataset.range(8).to_iter_dataset().mp_prefetch(_options(2)).map(_plus_one)
    assert list(ds.mp_prefetch(_options(0))) == list(range(1, 9))


def _sum_of_inner_pipeline(n):
    """Iterates a pipeline with its own workers: run inside a worker, it cannot start them."""
    inner = MapDataset.range(n).to_iter_dataset().mp_prefetch(_options(2))
    return sum(inner)


def _sum_of_inner_loader(n):
    sampler = IndexSampler(n, NoSharding(), num_epochs=1)
    loader = DataLoader(data_source=list(range(n)), sampler=sampler, worker_count=2)
    return sum(loader)


@pytest.mark.parametrize("inner", [_sum_of_inner_pipeline, _sum_of_inner_loader])
def test_workers_started_inside_a_worker_raise_a_clear_error(inner):
    ds = MapDataset.range(1, 5).map(inner).to_iter_dataset().mp_prefetch(_options(2))
    with pytest.raises(RuntimeError, match=IN_WORKER) as caught:
        list(ds)
    message = str(caught.value)
    assert "num_workers=0" in message
    assert "worker_count=0" in message
    assert "grain worker" in "".join(caught.value.__notes__)  # raised there, sent here


def _report_error(conn):
    try:
        conn.send(("ok", _sum_of_inner_pipeline(4)))
    except Exception as error:
        conn.send((type(error).__name__, str(error)))


def test_workers_started_inside_any_daemon_process_raise_a_clear_error():
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_report_error, args=(send,), daemon=True, name="my-daemon")
    process.start()
    send.close()
    try:
        assert receive.poll(30)
        kind, message = receive.recv()
    finally:
        process.join(10)
    assert kind == "RuntimeError"
    assert message.startswith(f"{IN_DAEMON} 'my-daemon'")
