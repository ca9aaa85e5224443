"""IterDataset.mp_prefetch: worker processes, deterministic round robin, exact state, failures."""

import asyncio
import functools
import json
import multiprocessing
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import warnings

import numpy as np
import pytest

from grain_dataset import MapDataset, assert_equal_output_after_checkpoint
from grain_mp import MultiprocessingOptions
from grain_mp._sweep import parse_segment_name, segment_names

pytestmark = pytest.mark.timeout(60)


def _options(workers, buffer=2):
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)


def _double(x):
    return x * 2


def _not_multiple_of_3(x):
    return x % 3 != 0


def _pipeline(n=200):
    return MapDataset.range(n).seed(7).shuffle().map(_double).to_iter_dataset()


def _our_segments(owner=None):
    owner = os.getpid() if owner is None else owner
    return [name for name in segment_names() if parse_segment_name(name)[0] == owner]


def _image(i):
    time.sleep(0.005)
    return np.full((64, 64, 3), i % 256, np.uint8)  # 12 KB: travels in shared memory


def _no_children_left():
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not multiprocessing.active_children()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_same_order_as_one_process_without_many_to_one_steps(workers):
    ds = _pipeline()
    assert list(ds.mp_prefetch(_options(workers))) == list(ds)
    assert _no_children_left()


@pytest.mark.parametrize("workers", [2, 3])
def test_filter_and_batch_under_workers_give_the_one_process_batches(workers):
    ds = _pipeline(300).filter(_not_multiple_of_3).batch(8)
    single = [b.tolist() for b in ds]
    assert [b.tolist() for b in ds.mp_prefetch(_options(workers))] == single


def test_zero_workers_is_a_no_op():
    ds = _pipeline()
    assert ds.mp_prefetch(MultiprocessingOptions(num_workers=0)) is ds


def test_options_are_checked():
    with pytest.raises(ValueError, match="num_workers"):
        MultiprocessingOptions(num_workers=-1)
    with pytest.raises(ValueError, match="per_worker_buffer_size"):
        MultiprocessingOptions(num_workers=1, per_worker_buffer_size=0)
    with pytest.raises(TypeError, match="MultiprocessingOptions"):
        _pipeline().mp_prefetch({"num_workers": 2})
    with pytest.raises(TypeError, match="worker_init_fn"):
        _pipeline().mp_prefetch(_options(2), worker_init_fn=3)


_WORKER = {}


def _remember_worker(index, count):
    _WORKER["id"] = (index, count)


def _tag_with_worker(x):
    return (_WORKER["id"], x)


def test_worker_init_fn_runs_first_in_every_worker():
    ds = MapDataset.range(12).to_iter_dataset().map(_tag_with_worker)
    out = list(ds.mp_prefetch(_options(3), worker_init_fn=_remember_worker))
    assert [tag for tag, _ in out] == [(i % 3, 3) for i in range(12)]
    assert [x for _, x in out] == list(range(12))


def test_checkpoint_restores_exactly_at_every_step():
    ds = _pipeline(40).filter(_not_multiple_of_3).batch(3).mp_prefetch(_options(2))
    assert_equal_output_after_checkpoint(ds, max_steps=20)
    assert _no_children_left()


def test_a_checkpoint_of_another_seed_is_refused_and_states_carry_no_fingerprint(tmp_path):
    def pipeline(seed):
        ds = MapDataset.range(30).seed(seed).shuffle().to_iter_dataset()
        return ds.mp_prefetch(_options(2))

    it = iter(pipeline(1))
    for _ in range(5):
        next(it)
    state = it.get_state()
    asyncio.run(it.save(tmp_path))
    it.close()
    # The positions alone; the checkpoint file holds the mp_prefetch iterator's fingerprint.
    assert state == {"next_index": 5}
    saved = json.loads((tmp_path / "process_0-of-1.json").read_text())
    assert saved["grain_fingerprint"].endswith("to_iter > round_robin")
    other = iter(pipeline(2))
    with pytest.raises(ValueError, match=r"different pipeline: stage 2 .*shuffle"):
        asyncio.run(other.load(tmp_path))
    same = iter(pipeline(1))
    asyncio.run(same.load(tmp_path))
    assert list(same) == list(iter(pipeline(1)))[5:]
    other.close()
    assert _no_children_left()


def test_state_is_small_json_and_restores_across_epochs():
    ds = MapDataset.range(30).seed(1).shuffle().repeat(3).to_iter_dataset()
    mp = ds.mp_prefetch(_options(2))
    it = iter(mp)
    for _ in range(47):
        next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert len(json.dumps(state)) < 200
    rest = list(it)
    resumed = iter(mp)
    resumed.set_state(state)
    assert list(resumed) == rest
    assert len(rest) == 90 - 47


def test_a_state_from_another_worker_count_is_refused_where_workers_own_slices():
    # Sequential slices are not positional: each worker's state is its own (positional
    # pipelines restore with any count: test_mp_worker_count.py).
    it = iter(_pipeline().mp_prefetch(_options(2), sequential_slice=True))
    next(it)
    state = it.get_state()
    other = iter(_pipeline().mp_prefetch(_options(3), sequential_slice=True))
    with pytest.raises(ValueError, match="num_workers"):
        other.set_state(state)
    with pytest.raises(ValueError, match="keys"):
        other.set_state({"next_index": 3})
    it.close()


def _fail_on_13(x):
    if x == 13:
        raise KeyError(f"bad record {x}")
    return x


def test_a_worker_error_reaches_the_parent_with_its_traceback_and_stops_the_others():
    ds = MapDataset.range(40).to_iter_dataset().map(_fail_on_13).mp_prefetch(_options(2))
    it = iter(ds)
    seen = [next(it) for _ in range(13)]
    with pytest.raises(KeyError, match="bad record 13") as info:
        next(it)
    assert seen == list(range(13))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "grain worker 1 of 2 raised it on element 6 of its slice (element 13 of" in notes
    assert "_fail_on_13" in notes  # the worker's frames
    # Said once: the error, the stage and the filtering note are not repeated.
    shown = "".join(traceback.format_exception(info.value))
    assert shown.count("bad record 13") == 1, shown
    assert shown.count("grain: raised by the user function") == 1, shown
    assert shown.count("frames were removed") == 1, shown
    assert shown.count('raise KeyError(f"bad record {x}")') == 1, shown
    assert _no_children_left()


def _slow(x):
    time.sleep(0.01)
    return x


def test_a_killed_worker_is_reported_within_seconds_naming_it():
    ds = MapDataset.range(10_000).to_iter_dataset().map(_slow).mp_prefetch(_options(2))
    it = iter(ds)
    next(it)
    victim = next(p for p in multiprocessing.active_children() if p.name == "grain-worker-1")
    os.kill(victim.pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"grain worker 1 of 2 was killed by signal 9"):
        _drain(it)
    assert time.monotonic() - start < 5
    assert _no_children_left()


def _drain(iterator, started=None):
    if started is not None:
        started.set()
    for _ in iterator:
        pass


@pytest.mark.parametrize("how", ["close", "del", "break"])
def test_stopping_early_leaves_no_worker_and_no_segment(how):
    ds = MapDataset.range(10_000).to_iter_dataset().map(_image).mp_prefetch(_options(2))
    it = iter(ds)
    for x in it:
        if x is not None:
            break
    del x
    assert multiprocessing.active_children()
    assert _our_segments()
    if how == "close":
        it.close()
    elif how == "del":
        del it
    else:
        it = None
    assert _no_children_left()
    assert _our_segments() == []


def test_keyboard_interrupt_while_waiting_stops_cleanly():
    ds = MapDataset.range(10_000).to_iter_dataset().map(_image).map(_slow)
    it = iter(ds.mp_prefetch(_options(2)))
    next(it)
    draining = threading.Event()

    def interrupt():
        draining.wait()
        time.sleep(0.05)  # into the waits on the workers
        os.kill(os.getpid(), signal.SIGINT)

    # Not a Timer started just before the drain: on a loaded machine it could fire
    # before this thread returned from starting it, outside pytest.raises.
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        _drain(it, started=draining)
    it.close()
    assert _no_children_left()
    assert _our_segments() == []


def test_forking_beside_other_threads_does_not_warn(monkeypatch):
    # Python 3.12+ warns (DeprecationWarning) at a fork while the process has other
    # threads; mp_prefetch forks its workers on purpose and silences that warning
    # for their start only (grain_mp._process_executor._start_quietly).
    monkeypatch.setenv("GRAIN_MP_START_METHOD", "fork")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = list(_pipeline(20).mp_prefetch(_options(2)))
    finally:
        stop.set()
        other.join()
    assert got == list(_pipeline(20))
    assert [str(w.message) for w in caught if "fork" in str(w.message)] == []
    assert _no_children_left()


def _add_under(lock, x):
    with lock:
        return x + 1


def test_spawn_names_an_unpicklable_stage_before_any_worker_starts(monkeypatch):
    monkeypatch.setenv("GRAIN_MP_START_METHOD", "spawn")
    locked = functools.partial(_add_under, threading.Lock())  # a lock cannot be pickled
    ds = MapDataset.range(10).map(_double).to_iter_dataset().map(locked)
    with pytest.raises(TypeError, match=r"MapIterDataset.*cannot be pickled.*=fork"):
        ds.mp_prefetch(_options(2))
    assert not multiprocessing.active_children()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_that_do_not_fork_run_lambdas_and_closures(monkeypatch, tmp_path, method):
    monkeypatch.setenv("GRAIN_MP_START_METHOD", method)
    offset = 100
    ds = MapDataset.range(20).map(lambda x: x + offset).to_iter_dataset()
    ds = ds.filter(lambda x: x % 3 != 0).mp_prefetch(
        _options(2),  # the init fn runs in each worker
        worker_init_fn=lambda index, count: (tmp_path / f"{index}-of-{count}").touch(),
    )
    got = list(ds)  # filtered per worker: round robin is not the one-process order
    assert sorted(got) == [x + 100 for x in range(20) if (x + 100) % 3 != 0]
    assert got == list(ds)  # and the same in every run
    assert sorted(path.name for path in tmp_path.iterdir()) == ["0-of-2", "1-of-2"]
    assert _no_children_left()


def test_a_start_method_that_does_not_exist_is_named(monkeypatch):
    monkeypatch.setenv("GRAIN_MP_START_METHOD", "vfork")
    with pytest.raises(ValueError, match=r"GRAIN_MP_START_METHOD='vfork'.*forkserver"):
        MapDataset.range(4).to_iter_dataset().mp_prefetch(_options(2))


def test_spawn_runs_a_picklable_pipeline(monkeypatch):
    monkeypatch.setenv("GRAIN_MP_START_METHOD", "spawn")
    # Spawned workers import what they unpickle: the functions must live in modules.
    ds = MapDataset.range(30).seed(7).shuffle().map(functools.partial(operator.mul, 2))
    ds = ds.to_iter_dataset()
    assert list(ds.mp_prefetch(_options(2))) == list(ds)
    assert _no_children_left()


def test_interpreter_exit_mid_iteration_is_silent_and_leaves_no_worker(tmp_path):
    script = textwrap.dedent(
        """
        import time
        import numpy as np
        from grain_dataset import MapDataset
        from grain_mp import MultiprocessingOptions

        def slow(x):
            time.sleep(0.01)
            return x

        def big(x):
            return np.full(50_000, x % 256, np.uint8)

        ds = MapDataset.range(10_000).to_iter_dataset().map(slow).map(big)
        it = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
        next(it)
        import multiprocessing, os
        print(os.getpid(), " ".join(str(p.pid) for p in multiprocessing.active_children()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    parent, *pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
    assert _our_segments(owner=parent) == []


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: reaped by init soon.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["above", "inside"])
def test_dataset_options_min_shm_size_sends_smaller_arrays_by_copy(where):
    from grain_dataset import DatasetOptions, WithOptionsIterDataset

    options = DatasetOptions(min_shm_size=1 << 20)
    inner = MapDataset.range(8).map(_image).to_iter_dataset()
    if where == "inside":
        inner = WithOptionsIterDataset(inner, options)
    ds = inner.mp_prefetch(_options(2))
    if where == "above":
        ds = WithOptionsIterDataset(ds, options)
    it = iter(ds)
    held = [next(it) for _ in range(4)]  # 12 KB images: copied, so no segment is held
    assert _our_segments() == []
    assert [int(image[0, 0, 0]) for image in held] == [0, 1, 2, 3]
    it.close()
