"""Pickling a SharedMemoryArray shares it by reference, as Grain does.

What must hold: the unpickled array (in this process or a child) maps the same
pages, so writes through either are seen through the other; a view pickles as
that view (its place in the segment, not the first bytes); the unpickled array
owns nothing, so the creator still unlinks exactly once and nothing is left in
/dev/shm; a segment already gone says so; arrays not in a segment (arithmetic
results) still pickle as plain values; and our worker transport delivers a
SharedMemoryArray element as a plain copy, since the worker's array may be gone
before the consumer reads it.
"""

import gc
import multiprocessing
import pickle

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_mp import MultiprocessingOptions, SharedMemoryArray
from grain_mp._sweep import segment_exists

pytestmark = pytest.mark.usefixtures("no_leaked_segments")


@pytest.mark.parametrize("protocol", [2, pickle.DEFAULT_PROTOCOL, 5])
def test_an_unpickled_array_views_the_same_segment(protocol):
    array = SharedMemoryArray((2, 3), np.int32)
    array[:] = np.arange(6).reshape(2, 3)
    data = pickle.dumps(array, protocol=protocol)
    assert len(data) < 600  # a reference, not the values
    loaded = pickle.loads(data)
    assert type(loaded) is SharedMemoryArray
    assert loaded.metadata == array.metadata
    loaded[0, 0] = 42
    assert array[0, 0] == 42
    array[1, 2] = -1
    assert loaded[1, 2] == -1


def test_views_pickle_as_the_same_view():
    array = SharedMemoryArray((4, 6), np.int16)
    array[:] = np.arange(24).reshape(4, 6)
    views = [
        array[2],
        array[1:3, ::2],
        array.T,
        array[::-1, ::-3],
        array.view(np.uint8)[1, 3:9],
    ]
    for view in views:
        loaded = pickle.loads(pickle.dumps(view))
        assert type(loaded) is SharedMemoryArray
        np.testing.assert_array_equal(loaded, view)
        assert loaded.dtype == view.dtype
        loaded[...] = 0  # through the same pages
        np.testing.assert_array_equal(view, np.zeros_like(view))
        array[:] = np.arange(24).reshape(4, 6)
        with pytest.raises(ValueError, match="view or a computed result"):
            loaded.unlink()  # a view owns nothing, unpickled or not


def test_read_only_stays_read_only_and_results_pickle_by_value():
    array = SharedMemoryArray(3, np.float32)
    array[:] = [1, 2, 3]
    array.flags.writeable = False
    loaded = pickle.loads(pickle.dumps(array))
    assert not loaded.flags.writeable
    result = pickle.loads(pickle.dumps(array * 2))
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, [2, 4, 6])
    empty = SharedMemoryArray((0, 3))
    assert type(pickle.loads(pickle.dumps(empty))) is np.ndarray


def test_the_creator_still_unlinks_once_and_unpickled_arrays_never_do():
    array = SharedMemoryArray(8, np.uint8)
    name = array.metadata.name
    loaded = pickle.loads(pickle.dumps(array))
    view = pickle.loads(pickle.dumps(array[2:5]))
    del loaded, view
    gc.collect()
    assert segment_exists(name)  # dropping what was unpickled removes nothing
    data = pickle.dumps(array)
    del array
    gc.collect()
    assert not segment_exists(name)  # the creator unlinked it
    with pytest.raises(FileNotFoundError, match="no longer exists"):
        pickle.loads(data)


def test_an_unpickled_array_can_take_ownership():
    array = SharedMemoryArray(4)
    name = array.metadata.name
    array.close()  # hand off
    loaded = pickle.loads(pickle.dumps(array))
    loaded.unlink_on_del()
    del array
    gc.collect()
    assert segment_exists(name)
    del loaded
    gc.collect()
    assert not segment_exists(name)


# Run by exec in fork and spawn children alike (a test module is not importable there).
CHILD = """
import pickle
received = pickle.loads(data)
received[1] = value
done.put((type(received).__name__, float(received[0])))
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_process_writes_through_its_unpickled_array(method):
    context = multiprocessing.get_context(method)
    array = SharedMemoryArray(3)
    array[:] = [7, 0, 0]
    done = context.Queue()
    child = context.Process(
        target=exec, args=(CHILD, {"data": pickle.dumps(array), "value": 5.0, "done": done})
    )
    child.start()
    kind, first = done.get(timeout=45)
    child.join(30)
    assert child.exitcode == 0
    assert (kind, first) == ("SharedMemoryArray", 7.0)
    assert array[1] == 5.0
    # The child's exit removed nothing: the segment is still ours to unlink.
    assert segment_exists(array.metadata.name)


def _as_shared(x):
    array = SharedMemoryArray((512,), np.int64)  # 4 KiB: goes through a transport segment
    array[:] = x
    return {"array": array, "small": array[:2]}


@pytest.mark.timeout(120)
def test_worker_elements_that_are_shared_memory_arrays_arrive_as_copies():
    ds = MapDataset.range(6).map(_as_shared).to_iter_dataset()
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2))
    with iter(ds) as it:
        elements = list(it)
    assert [int(e["array"][0]) for e in elements] == list(range(6))
    for element in elements:
        assert type(element["array"]) is np.ndarray
        assert type(element["small"]) is np.ndarray
        np.testing.assert_array_equal(element["small"], element["array"][:2])
