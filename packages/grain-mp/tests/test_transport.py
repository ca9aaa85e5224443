"""Transport of elements from worker processes through reused shared memory segments.

What must hold: any PyTree comes back equal, leaf types, dtypes, shapes and
layouts included, with large plain arrays moved through one segment per element
and everything else pickled in full; segments are reused (bounded names over
many transfers) and a stale payload is refused rather than misread; across fork
and spawn workers nothing is left in /dev/shm after a clean shutdown, after a
worker is SIGKILLed (parent cleanup), or after the whole process group is
SIGKILLed (the next sweep); and no process prints a warning.
"""

import collections
import functools
import gc
import json
import multiprocessing
import operator
import os
import pickle
import queue
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from grain_mp._segment_pool import SegmentPool
from grain_mp._segment_reader import SegmentReader
from grain_mp._sweep import (
    parse_segment_name,
    segment_exists,
)
from grain_mp._transport import MIN_SEGMENT_BYTES, Payload

Pair = collections.namedtuple("Pair", "left right")


pytestmark = pytest.mark.usefixtures("no_leaked_segments")


@pytest.fixture
def local():
    """A pool and a reader in this process, the reader releasing straight to the pool."""
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader(release=pool.reclaim)
    yield pool, reader
    reader.close()
    pool.close()


def assert_same(got, want, path="element"):
    """Equal values, and equal types, dtypes, shapes and memory order, all the way down."""
    assert type(got) is type(want), path
    if isinstance(want, dict):
        assert list(got) == list(want), path
        for key in want:
            assert_same(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), path
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype, path
        assert got.shape == want.shape, path
        if want.dtype.hasobject:
            assert got.tolist() == want.tolist(), path
        else:
            np.testing.assert_array_equal(got, want, err_msg=path)
        if want.flags.f_contiguous and not want.flags.c_contiguous:
            assert got.flags.f_contiguous, path
        assert got.flags.writeable, path
    elif isinstance(want, np.generic):
        assert got.dtype == want.dtype, path
        assert got == want, path
    else:
        assert got == want, path


def mixed_tree():
    return {
        "image": np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3),
        "small": np.arange(3, dtype=np.int32),
        "text": "h\u00e9llo",
        "blob": b"\x00" * 10_000 + b"end",  # long bytes stay whole in the pickle
        "none": None,
        "flag": True,
        "nested": {
            "pair": Pair(np.ones((50, 50), np.float16), [np.zeros(0, np.float32), 1.5]),
            "tuple": (
                np.arange(10_000, dtype=np.int64)[::3],  # not contiguous
                np.eye(80, dtype=bool).T,  # Fortran order
            ),
        },
        "scalar": np.float32(2.5),
        "huge_int": 2**100,
        "when": np.arange(1000).astype("datetime64[s]"),
        "complex": np.full(600, 1 + 2j),
        "big_endian": np.arange(2000, dtype=">i4"),
        "objects": np.array(["a", None, 3], dtype=object),
        "strings": np.array(["abc"] * 2000),
        "masked": np.ma.array(np.arange(1000.0), mask=np.arange(1000) % 2 == 0),
        "scalar_array": np.array(7, np.int8),
    }


def test_a_mixed_tree_round_trips(local):
    pool, reader = local
    tree = mixed_tree()
    payload = pool.encode(tree)
    # image, the float16 pair, the strided int64, the bool eye, datetimes, complex, >i4.
    assert len(payload.leaves) == 7
    assert all(offset % 64 == 0 for offset, *_ in payload.leaves)
    got = reader.decode(payload)
    assert_same(got, tree)
    assert type(got["masked"]) is np.ma.MaskedArray
    np.testing.assert_array_equal(got["masked"].mask, tree["masked"].mask)
    assert got["image"].base is None  # a fresh array, not a view of the segment


def test_everything_plain_goes_through_the_segment_with_min_bytes_zero():
    pool = SegmentPool(owner_pid=os.getpid(), min_bytes=0)
    reader = SegmentReader(release=pool.reclaim)
    tree = mixed_tree()
    payload = pool.encode(tree)
    # Also small, the 0-size float32 and the 0-d int8.
    assert len(payload.leaves) == 10
    assert_same(reader.decode(payload), tree)
    reader.close()
    pool.close()


def test_the_same_array_twice_is_stored_once_and_stays_one_object(local):
    pool, reader = local
    array = np.arange(10_000.0)
    payload = pool.encode([array, {"again": array}])
    assert len(payload.leaves) == 1
    got = reader.decode(payload)
    assert got[0] is got[1]["again"]


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize(
    "element",
    [
        np.arange(10_000, dtype=np.int64).reshape(100, 100),
        np.eye(80, dtype=np.float32).T,  # Fortran order
        np.arange(10_000, dtype=np.int64)[::3],  # not contiguous
        {"image": np.ones((64, 64, 3), np.uint8) * 7, "mask": np.zeros(5000, bool)},
    ],
    ids=["array", "fortran", "strided", "flat_dict"],
)
def test_one_array_or_a_flat_dict_of_arrays_round_trips_without_the_pickler(local, element, copy):
    pool, reader = local
    for _ in range(3):  # the dict's skeleton is cached after the first element
        payload = pool.encode(element)
        assert len(payload.leaves) == (len(element) if isinstance(element, dict) else 1)
        got = reader.decode(payload, copy=copy)
        assert_same(got, element)
        del got
        gc.collect()
    reader.take_released()


@pytest.mark.parametrize(
    "element",
    [
        {"big": np.arange(10_000.0), "small": np.arange(3)},  # a leaf pickled inline
        {"big": np.arange(10_000.0), "label": 3},
        {1: np.arange(10_000.0)},  # a key that is not a str
        {},
        np.array(["abc"] * 2000),  # not a plain dtype
        np.ma.array(np.arange(1000.0)),  # a subclass
    ],
    ids=["small_leaf", "int_leaf", "int_key", "empty", "strings", "masked"],
)
def test_other_elements_take_the_pickler_and_still_round_trip(local, element):
    pool, reader = local
    assert_same(reader.decode(pool.encode(element)), element)


def test_elements_without_large_arrays_need_no_segment(local):
    pool, reader = local
    element = {"ids": np.arange(10), "text": "x" * 100_000}
    payload = pool.encode(element)
    assert payload.segment is None
    assert pool.names == ()
    assert_same(reader.decode(payload), element)
    assert reader.take_released() == []


def test_payloads_are_small(local):
    pool, reader = local
    payload = pool.encode({"image": np.zeros((1000, 1000), np.uint8), "label": 3})
    assert type(payload) is Payload
    assert len(pickle.dumps(payload)) < 500
    reader.decode(pickle.loads(pickle.dumps(payload)))


def test_segments_come_in_power_of_two_classes(local):
    pool, reader = local
    sizes = {}
    for nbytes in (150_000, 3_000_000):
        payload = pool.encode(np.zeros(nbytes, np.uint8))
        sizes[nbytes] = os.stat(f"/dev/shm/{payload.segment}").st_size
        reader.decode(payload)
    assert sizes == {150_000: MIN_SEGMENT_BYTES, 3_000_000: 4 << 20}


def test_a_thousand_transfers_reuse_a_few_segments(local):
    pool, reader = local
    names = set()
    for i in range(1000):
        size = 2_000_000 if i % 100 == 99 else 150_000
        payload = pool.encode({"x": np.full(size, i % 256, np.uint8), "i": i})
        names.add(payload.segment)
        got = reader.decode(payload)
        assert got["i"] == i
        assert got["x"][-1] == i % 256
    assert len(names) == 2  # one per size class: every segment was back before the next
    assert set(pool.names) == names
    assert pool.lent == 0


def test_a_stale_payload_is_refused_and_double_release_is_named():
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader()  # names come back through take_released
    first = pool.encode(np.zeros(10_000))
    reader.decode(first)
    assert reader.take_released() == [first.segment]
    pool.reclaim(first.segment)
    with pytest.raises(ValueError, match="released twice"):
        pool.reclaim(first.segment)
    second = pool.encode(np.ones(10_000))
    assert second.segment == first.segment
    assert second.generation == first.generation + 1
    with pytest.raises(RuntimeError, match="lent again before this payload was decoded"):
        reader.decode(first)
    np.testing.assert_array_equal(reader.decode(second), np.ones(10_000))
    reader.close()
    pool.close()


def test_a_skeleton_alone_does_not_unpickle(local):
    pool, _ = local
    payload = pool.encode([np.zeros(10_000)])
    with pytest.raises(pickle.UnpicklingError, match=r"SegmentReader\.decode"):
        pickle.loads(payload.skeleton)
    pool.reclaim(payload.segment)


def test_zero_copy_views_hold_the_segment_until_they_die():
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader()
    payload = pool.encode({"a": np.arange(10_000.0), "b": np.ones((100, 100), np.int32).T})
    got = reader.decode(payload, copy=False)
    assert got["b"].flags.f_contiguous
    assert got["b"].sum() == 10_000
    got["a"][0] = -1.0  # writable
    part = got["a"][5:10]
    del got
    gc.collect()
    assert reader.take_released() == []  # `part` still views the segment
    np.testing.assert_array_equal(part, np.arange(5.0, 10.0))
    del part
    gc.collect()
    assert reader.take_released() == [payload.segment]
    reader.close()
    pool.close()


class _InterruptedError(Exception):
    """What the test's signal handler raises, as Python's raises KeyboardInterrupt."""


def _raise_interrupted(*_):
    raise _InterruptedError


def test_a_signal_as_the_last_view_dies_is_raised_in_the_consumer():
    # A signal's Python handler runs at the next bytecode that checks for signals.
    # When the consumer drops an element just after Ctrl-C, a lease callback
    # written in Python would be that place: KeyboardInterrupt would be printed as
    # ignored there and the iteration would go on (mp_prefetch's Ctrl-C test hung
    # or saw no KeyboardInterrupt on a loaded free-threaded run).
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader()
    payload = pool.encode(np.arange(10_000.0))
    views = [reader.decode(payload, copy=False)]
    # C only, from the signal to the drop: SIGPROF comes after 1 ms of CPU time, in
    # the sum (a few times longer), and no bytecode of ours runs before the drop.
    arm = functools.partial(signal.setitimer, signal.ITIMER_PROF, 0.001)
    busy = functools.partial(sum, range(5_000_000))
    previous = signal.signal(signal.SIGPROF, _raise_interrupted)
    try:
        with pytest.raises(_InterruptedError):
            list(map(operator.call, [arm, busy, views.clear]))
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
    assert views == []
    assert reader.take_released() == [payload.segment]  # and the name was not lost
    reader.close()
    pool.close()


@pytest.mark.parametrize("channel", ["queue", "pipe"])
def test_the_pool_takes_names_back_from_a_channel(channel):
    if channel == "queue":
        returns = queue.Queue()
        receive, release = returns, returns.put
    else:
        receive, sender = multiprocessing.Pipe(duplex=False)
        release = sender.send
    pool = SegmentPool(owner_pid=os.getpid(), returns=receive)
    reader = SegmentReader()
    names = set()
    for i in range(50):
        payload = pool.encode(np.full(20_000, i, np.int16))
        names.add(payload.segment)
        assert reader.decode(payload)[0] == i
        release(reader.take_released())  # a list of names at a time
    assert len(names) == 1
    reader.close()
    pool.close()


def test_close_unlinks_free_segments_and_leaves_lent_ones_to_the_parent():
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader(release=pool.reclaim)
    returned = pool.encode(np.zeros(10_000))
    lent = pool.encode(np.ones(10_000))
    assert lent.segment != returned.segment
    reader.decode(returned)
    pool.close()
    pool.close()
    assert not segment_exists(returned.segment)
    assert segment_exists(lent.segment)  # its owner, alive, may still decode it
    np.testing.assert_array_equal(reader.decode(lent), np.ones(10_000))
    reader.close()
    assert not segment_exists(lent.segment)
    with pytest.raises(ValueError, match="closed"):
        pool.encode(np.zeros(10_000))
    with pytest.raises(ValueError, match="closed"):
        reader.decode(lent)


@pytest.mark.timeout(60)
def test_a_pool_whose_owner_died_unlinks_its_lent_segments_too():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pool = SegmentPool(owner_pid=dead.pid)
    payload = pool.encode(np.zeros(10_000))
    assert segment_exists(payload.segment)
    pool.close()
    assert not segment_exists(payload.segment)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="must be a Queue"):
        SegmentPool(owner_pid=os.getpid(), returns=[])
    with pytest.raises(ValueError, match="positive process id"):
        SegmentPool(owner_pid=0)


# ----------------------------------------------------------------------- processes

# Exec'd in fork and spawn workers alike (a test module is not importable there),
# and here to know what to expect.
ELEMENTS = """
import numpy as np

def element(i):
    return {
        "image": np.full(150_000, i % 251, np.uint8),
        "label": i,
        "name": f"element {i}",
        "parts": (np.arange(2000 + i % 5 * 1000, dtype=np.float32), None, [np.int64(i)]),
    }
"""
NAMESPACE: dict = {}
exec(ELEMENTS, NAMESPACE)
element = NAMESPACE["element"]

# Sends `count` elements, at most `ahead` of them not yet released (as mp_prefetch's
# credits do), then None; cleans up in `finally`, as workers must.
WORKER = """
from grain_mp._segment_pool import SegmentPool
exec(ELEMENTS)
pool = SegmentPool(owner_pid=owner, returns=returns)
try:
    for i in range(count):
        while pool.lent >= ahead:
            pool.reclaim(returns.get())
        data.put(pool.encode(element(i)))
    data.put(None)
finally:
    pool.close()
"""

# Sends three elements and encodes a fourth it never sends, then waits to be killed.
DOOMED_WORKER = """
import time
from grain_mp._segment_pool import SegmentPool
exec(ELEMENTS)
pool = SegmentPool(owner_pid=owner)
for i in range(3):
    data.put(pool.encode(element(i)))
pool.encode(element(3))
data.put(pool.names)
time.sleep(120)
"""


def start_worker(context, code, **env):
    env.setdefault("owner", os.getpid())
    env["ELEMENTS"] = ELEMENTS
    process = context.Process(target=exec, args=(code, env), daemon=True)
    process.start()
    return process


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_transfer_and_clean_up(method):
    context = multiprocessing.get_context(method)
    data, returns = context.Queue(), context.Queue()
    count = 300
    worker = start_worker(context, WORKER, data=data, returns=returns, count=count, ahead=4)
    reader = SegmentReader(release=returns.put)
    names = set()
    for i in range(count):
        payload = data.get(timeout=30)
        names.add(payload.segment)
        assert_same(reader.decode(payload), element(i))
    assert data.get(timeout=30) is None
    worker.join(30)
    assert worker.exitcode == 0
    assert len(names) <= 5  # bounded by the elements in flight, not by the count
    assert {parse_segment_name(name) for name in names} == {(os.getpid(), worker.pid)}
    reader.close(creator_pids=[worker.pid])
    assert not any(map(segment_exists, names))
    returns.close()
    returns.join_thread()


@pytest.mark.timeout(60)
def test_a_killed_workers_segments_are_removed_by_the_parent():
    context = multiprocessing.get_context("fork")
    data = context.Queue()
    worker = start_worker(context, DOOMED_WORKER, data=data)
    reader = SegmentReader()
    payloads = [data.get(timeout=30) for _ in range(3)]
    assert_same(reader.decode(payloads[0]), element(0))
    worker_names = data.get(timeout=30)
    assert len(worker_names) == 4  # three lent, one encoded but never sent
    worker.kill()
    worker.join(30)
    assert worker.exitcode == -signal.SIGKILL
    assert all(map(segment_exists, worker_names))  # SIGKILL cleaned nothing

    reader.close(creator_pids=[worker.pid])

    assert not any(map(segment_exists, worker_names))


GROUP = """
import json, multiprocessing, os, sys, time
from grain_mp._segment_reader import SegmentReader
context = multiprocessing.get_context("fork")
data, returns = context.Queue(), context.Queue()
worker = context.Process(target=exec, daemon=True, args=(WORKER, dict(
    ELEMENTS=ELEMENTS, owner=os.getpid(), data=data, returns=returns, count=COUNT, ahead=3)))
worker.start()
reader = SegmentReader(release=returns.put)
payloads = []
for i in range(COUNT):  # decoding releases, which lets the worker go on
    payloads.append(data.get(timeout=30))
    if i < DECODE:
        reader.decode(payloads[-1])
assert data.get(timeout=30) is None
worker.join(30)
assert worker.exitcode == 0
print(json.dumps(sorted({p.segment for p in payloads})), flush=True)
if sys.argv[1] == "wait":
    time.sleep(120)
for payload in payloads[DECODE:]:  # the worker is gone, its lent segments are not
    reader.decode(payload)
reader.close(creator_pids=[worker.pid])
"""


def run_group(mode: str, count: int, decode: int) -> subprocess.Popen:
    code = "\n".join(
        [
            f"WORKER = {WORKER!r}",
            f"ELEMENTS = {ELEMENTS!r}",
            f"COUNT = {count}",
            f"DECODE = {decode}",
            textwrap.dedent(GROUP),
        ]
    )
    return subprocess.Popen(
        [sys.executable, "-W", "error", "-c", code, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _kill_a_group():
    """The names of the three segments a SIGKILLed group left."""
    # The worker ends with three segments lent (never decoded), then the parent
    # hangs: SIGKILL of the whole group leaves them, with no tracker to help.
    group = run_group("wait", count=3, decode=0)
    try:
        names = json.loads(group.stdout.readline())
        assert len(names) == 3
        assert all(map(segment_exists, names))
        os.killpg(group.pid, signal.SIGKILL)
        group.wait()
        return names
    finally:
        if group.poll() is None:
            os.killpg(group.pid, signal.SIGKILL)
            group.wait()
        group.stdout.close()
        group.stderr.close()


@pytest.mark.timeout(60)
def test_a_killed_process_groups_segments_go_at_the_next_sweep(own_sweep):
    names, removed = own_sweep(_kill_a_group)
    assert removed >= 3
    assert not any(map(segment_exists, names))


@pytest.mark.timeout(60)
def test_a_clean_run_leaves_nothing_and_prints_nothing():
    # The worker ends before its last elements are decoded: they must survive it.
    group = run_group("exit", count=40, decode=37)  # 3 = the worker's `ahead`
    output, errors = group.communicate(timeout=30)
    assert group.returncode == 0, errors
    assert errors == ""  # no resource tracker warnings
    names = json.loads(output)
    assert names
    assert not any(map(segment_exists, names))


def test_min_bytes_can_be_raised_so_mid_sized_arrays_are_copied(local):
    pool, reader = local
    element = {"a": np.arange(2_000.0)}  # 16 KB: above the default threshold
    shared = pool.encode(element)
    assert shared.segment is not None
    assert_same(reader.decode(shared), element)  # a copy: the segment goes back
    pool.min_bytes = 1 << 20
    assert pool.min_bytes == 1 << 20
    payload = pool.encode(element)
    assert payload.segment is None
    assert_same(reader.decode(payload), element)
