"""SharedMemoryArray: a numpy array over a shared memory segment, with explicit ownership.

What must hold: attached arrays (other processes included) see and change the
same pages; exactly the owning object unlinks, when garbage collected or at exit,
and nobody else implicitly (attached arrays, views, unpickled arrays, forked
children); `close()` hands ownership over, `unlink_on_del()` takes it; no
resource tracker is involved, so no process exit removes a segment it only used.
"""

import copy
import gc
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from grain_mp._shm_array import SharedMemoryArray, SharedMemoryArrayMetadata
from grain_mp._sweep import parse_segment_name, segment_exists

pytestmark = pytest.mark.usefixtures("no_leaked_segments")


def test_the_docstring_example():
    array = SharedMemoryArray((2, 3), dtype=np.int32)
    array[:] = 7
    other = SharedMemoryArray.from_metadata(array.metadata)
    other[0, 0] = 1
    assert array[0, 0] == 1
    assert isinstance(array, np.ndarray)
    assert array.shape == (2, 3)
    assert array.dtype == np.int32
    name = array.metadata.name
    array.unlink()
    assert not segment_exists(name)
    assert other.sum() == 36  # mappings outlive the name


def test_metadata_is_small_picklable_and_normalized():
    array = SharedMemoryArray([4, np.int64(5)], "f2")
    meta = array.metadata
    assert meta == SharedMemoryArrayMetadata(meta.name, (4, 5), np.float16)
    assert meta.shape == (4, 5)
    assert meta.dtype == np.dtype(np.float16)
    assert meta.nbytes == 40
    assert pickle.loads(pickle.dumps(meta)) == meta
    assert len(pickle.dumps(meta)) < 300
    with pytest.raises(AttributeError):
        meta.name = "other"  # frozen


def test_an_int_shape_and_the_default_dtype():
    array = SharedMemoryArray(3)
    assert array.shape == (3,)
    assert array.dtype == np.float64


def test_zero_size_arrays():
    array = SharedMemoryArray((0, 3), np.uint8)
    attached = SharedMemoryArray.from_metadata(array.metadata)
    assert attached.shape == (0, 3)


def test_the_owner_unlinks_when_collected_but_views_keep_it():
    array = SharedMemoryArray(10)
    array[:] = np.arange(10)
    name = array.metadata.name
    view = array[2:5]
    del array
    gc.collect()
    assert segment_exists(name)  # the view keeps its owner alive
    np.testing.assert_array_equal(view, [2, 3, 4])
    with pytest.raises(ValueError, match="is a view or a computed result"):
        view.metadata  # noqa: B018
    del view
    gc.collect()
    assert not segment_exists(name)


def test_attached_arrays_unlink_only_after_unlink_on_del():
    array = SharedMemoryArray(4)
    meta = array.metadata
    attached = SharedMemoryArray.from_metadata(meta)
    del attached
    gc.collect()
    assert segment_exists(meta.name)
    array.close()  # hand over: the creator no longer unlinks
    del array
    gc.collect()
    assert segment_exists(meta.name)
    taker = SharedMemoryArray.from_metadata(meta)
    taker.unlink_on_del()
    del taker
    gc.collect()
    assert not segment_exists(meta.name)


def test_unlink_is_idempotent_and_attaching_afterwards_says_why():
    array = SharedMemoryArray(4)
    meta = array.metadata
    array.unlink()
    array.unlink()
    array[:] = 1  # still usable
    with pytest.raises(FileNotFoundError, match=r"no longer exists.*close\(\) after sending"):
        SharedMemoryArray.from_metadata(meta)


def test_arithmetic_results_and_copies_are_plain_arrays():
    # (Pickling shares by reference instead: test_shm_array_pickle.py.)
    array = SharedMemoryArray(3, np.int64)
    array[:] = [1, 2, 3]
    plus = array + 1
    with pytest.raises(ValueError, match="view or a computed result"):
        plus.unlink()
    loaded = pickle.loads(pickle.dumps(plus, protocol=5))
    assert type(loaded) is np.ndarray
    np.testing.assert_array_equal(loaded, [2, 3, 4])
    copied = copy.deepcopy(array)
    assert type(copied) is np.ndarray
    assert type(copy.copy(array)) is np.ndarray
    copied[0] = 9
    assert array[0] == 1
    array += 1  # in place: still the owning array
    assert array.metadata.nbytes == 24
    np.testing.assert_array_equal(array, [2, 3, 4])


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="holds Python objects"):
        SharedMemoryArray(3, object)
    with pytest.raises(ValueError, match="non-negative dimensions"):
        SharedMemoryArray((2, -1))
    with pytest.raises(TypeError, match="takes a SharedMemoryArrayMetadata"):
        SharedMemoryArray.from_metadata({"name": "x"})
    small = SharedMemoryArray(2, np.uint8)
    lie = SharedMemoryArrayMetadata(small.metadata.name, (1000,), np.float64)
    with pytest.raises(ValueError, match=r"holds \d+ bytes, fewer than the 8000"):
        SharedMemoryArray.from_metadata(lie)


@pytest.mark.timeout(60)
def test_a_forked_child_dropping_the_owner_does_not_unlink():
    array = SharedMemoryArray(8)
    name = array.metadata.name
    pid = os.fork()
    if pid == 0:  # the child runs the inherited finalizer, which must not unlink
        del array
        gc.collect()
        os._exit(0 if segment_exists(name) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert segment_exists(name)


# Run by exec in fork and spawn children alike (a test module is not importable there).
CHILD = """
import numpy as np
from grain_mp._shm_array import SharedMemoryArray
seen = SharedMemoryArray.from_metadata(meta)
seen[0] += 1
made = SharedMemoryArray((3,), np.int16, owner_pid=parent_pid)
made[:] = [4, 5, 6]
out.put((float(seen.sum()), made.metadata))
made.close()  # hand it to the parent
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_arrays_cross_processes_both_ways(method):
    context = multiprocessing.get_context(method)
    array = SharedMemoryArray(5)
    array[:] = 1
    out = context.Queue()
    child = context.Process(
        target=exec, args=(CHILD, {"meta": array.metadata, "out": out, "parent_pid": os.getpid()})
    )
    child.start()
    total, made_meta = out.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert total == 6.0
    assert array[0] == 2  # the child wrote into the same pages
    # The child has exited, and neither its exit nor its close() removed anything.
    assert segment_exists(array.metadata.name)
    assert parse_segment_name(made_meta.name) == (os.getpid(), child.pid)
    received = SharedMemoryArray.from_metadata(made_meta)
    np.testing.assert_array_equal(received, [4, 5, 6])
    received.unlink_on_del()
    del received
    gc.collect()
    assert not segment_exists(made_meta.name)


@pytest.mark.timeout(60)
def test_interpreter_exit_unlinks_what_the_process_still_owns():
    code = """
        import numpy as np
        from grain_mp._shm_array import SharedMemoryArray
        kept = SharedMemoryArray((4, 4), np.uint8)          # owned until exit
        handed = SharedMemoryArray(4, owner_pid=1)
        handed.close()                                      # handed off: stays
        print(kept.metadata.name, handed.metadata.name)
    """
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    kept, handed = result.stdout.split()
    assert not segment_exists(kept)
    try:
        assert segment_exists(handed)
    finally:
        os.unlink(f"/dev/shm/{handed}")
