"""SharedMemoryArray's Grain interop: from_shared_memory, enable_async_del, close_shm_async.

Facts from Grain 0.2.18 (black box): ``from_shared_memory(shm, shape, dtype)`` is
a classmethod giving an array over a ``SharedMemory``'s pages, kept as
``array.shm``; dropping the array closes `shm` but leaves the segment unless
``unlink_on_del()`` was called; ``enable_async_del(num_threads=1,
max_outstanding_requests=50)`` and ``close_shm_async(shm, unlink)`` are
classmethods that close/unlink in background threads. Every test checks that
/dev/shm holds no segment of its own afterwards.
"""

import gc
import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing import shared_memory

import numpy as np
import pytest

from grain_mp import SharedMemoryArray
from grain_mp._sweep import segment_exists


def _gone(name, timeout=5.0):
    deadline = time.monotonic() + timeout
    while segment_exists(name) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not segment_exists(name)


@pytest.fixture
def shm():
    segment = shared_memory.SharedMemory(create=True, size=64)
    name = segment.name
    yield segment
    gc.collect()
    if segment_exists(name):  # the test left it: remove, then fail
        shared_memory.SharedMemory(name=name).unlink()
        pytest.fail(f"segment {name} was left in /dev/shm")


@pytest.fixture
def async_del():
    SharedMemoryArray.enable_async_del(num_threads=2, max_outstanding_requests=3)
    yield
    SharedMemoryArray._disable_async_del()


def test_an_array_over_a_shared_memory_sees_and_changes_its_pages(shm):
    array = SharedMemoryArray.from_shared_memory(shm, (2, 4), np.int32)
    assert isinstance(array, SharedMemoryArray)
    assert (array.shape, array.dtype) == ((2, 4), np.dtype(np.int32))
    assert array.shm is shm
    assert array.metadata.name == shm.name
    array[:] = 3
    assert np.frombuffer(shm.buf, np.int32, 8).tolist() == [3] * 8
    shm.buf[:4] = np.int32(7).tobytes()
    assert array[0, 0] == 7
    attached = SharedMemoryArray.from_metadata(array.metadata)
    assert attached.sum() == 7 + 7 * 3
    del attached
    array.unlink_on_del()


def test_dropping_the_array_closes_shm_and_unlinks_only_when_asked(shm):
    name = shm.name
    array = SharedMemoryArray.from_shared_memory(shm, (8,), np.uint8)
    view = array[2:]
    del array
    gc.collect()
    assert shm.buf is not None  # a view keeps the array, and so shm, open
    del view
    gc.collect()
    assert shm.buf is None  # closed, as Grain does
    assert segment_exists(name)  # but not unlinked
    taker = SharedMemoryArray.from_shared_memory(shared_memory.SharedMemory(name=name), 8, "u1")
    taker.unlink_on_del()
    del taker
    gc.collect()
    assert not segment_exists(name)


def test_unlink_goes_through_the_shared_memory(shm):
    array = SharedMemoryArray.from_shared_memory(shm, 16, np.float32)
    array.unlink()
    assert not segment_exists(shm.name)
    array[:] = 1.0  # the pages stay mapped
    assert float(array.sum()) == 16.0


def test_bad_arguments_are_named(shm):
    with pytest.raises(ValueError, match=r"holds 64 bytes.*smaller shape"):
        SharedMemoryArray.from_shared_memory(shm, (100,), np.float64)
    with pytest.raises(TypeError, match="SharedMemory"):
        SharedMemoryArray.from_shared_memory(shm.name, (2,), np.int8)
    with pytest.raises(TypeError, match="holds Python objects"):
        SharedMemoryArray.from_shared_memory(shm, (2,), object)
    with pytest.raises(ValueError, match="num_threads"):
        SharedMemoryArray.enable_async_del(num_threads=0)
    with pytest.raises(ValueError, match="max_outstanding_requests"):
        SharedMemoryArray.enable_async_del(max_outstanding_requests=-1)
    with pytest.raises(TypeError, match="SharedMemory"):
        SharedMemoryArray.close_shm_async(shm.name, True)
    with pytest.raises(TypeError, match="unlink"):
        SharedMemoryArray.close_shm_async(shm, "yes")
    shm.unlink()


def test_close_shm_async_without_enabling_closes_at_once(shm):
    SharedMemoryArray.close_shm_async(shm, False)
    assert shm.buf is None
    assert segment_exists(shm.name)
    SharedMemoryArray.close_shm_async(shm, True)  # closing twice is fine
    assert not segment_exists(shm.name)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("async_del")
def test_async_del_removes_owned_arrays_in_the_background():
    names = []
    for _ in range(20):  # more than max_outstanding_requests: collection waits for room
        array = SharedMemoryArray((256,), np.uint8)
        names.append(array.metadata.name)
        del array
    gc.collect()
    assert all(_gone(name) for name in names)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("async_del")
def test_async_del_closes_and_unlinks_shared_memories(shm):
    array = SharedMemoryArray.from_shared_memory(shm, 64, np.uint8)
    array.unlink_on_del()
    del array
    gc.collect()
    assert _gone(shm.name)
    other = shared_memory.SharedMemory(create=True, size=8)
    SharedMemoryArray.close_shm_async(other, True)
    assert _gone(other.name)
    deadline = time.monotonic() + 5
    while other.buf is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert other.buf is None


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("async_del")
def test_async_del_hands_the_removal_to_its_threads():
    def deleters():
        return [t for t in threading.enumerate() if t.name.startswith("grain-shm-del")]

    assert deleters() == []  # the pool starts its threads on the first removal
    array = SharedMemoryArray(8)
    name = array.metadata.name
    del array
    gc.collect()
    assert deleters()
    assert _gone(name)


@pytest.mark.timeout(60)
def test_async_del_at_exit_and_in_forked_children_leaves_nothing():
    code = """
        import gc, os, sys
        import numpy as np
        from grain_mp._shm_array import SharedMemoryArray
        SharedMemoryArray.enable_async_del()
        kept = SharedMemoryArray((4,), np.uint8)       # owned until exit
        pid = os.fork()
        if pid == 0:
            made = SharedMemoryArray((4,), np.uint8)   # the child's own: removed in the child
            print(made.metadata.name, flush=True)
            del made
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        print(kept.metadata.name, flush=True)
    """
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    names = result.stdout.split()
    assert len(names) == 2
    assert not any(segment_exists(name) for name in names)
