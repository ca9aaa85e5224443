"""Shared memory without room: a clear error, a pickled fallback, and nothing left behind.

Shared memory segments are files (in /dev/shm), so a file-size limit
(RLIMIT_FSIZE) refuses them just as a full /dev/shm does, and unlike filling a
tmpfs it can be set for one process. Each test sets it in a process of its own
(a worker, or a forked child) with SIGXFSZ ignored, as Python does at start, so
that the write fails with EFBIG ("File too large") instead of killing the process.
"""

import multiprocessing
import os
import resource
import signal
import warnings

import numpy as np
import pytest

from grain_dataset import MapDataset
from grain_mp import MultiprocessingOptions, SharedMemoryArray
from grain_mp._segment_pool import SegmentPool
from grain_mp._segment_reader import SegmentReader
from grain_mp._sweep import parse_segment_name, segment_names
from grain_mp._transport import MIN_SEGMENT_BYTES

pytestmark = pytest.mark.timeout(60)

LIMIT = MIN_SEGMENT_BYTES // 2  # below the smallest segment: every segment is refused
NO_ROOM = "Not enough shared memory for a 1048576-byte segment"


def _limit_file_size(*_):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))


def _lift_file_size_limit():
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))


def _created_here():
    return [name for name in segment_names() if parse_segment_name(name)[1] == os.getpid()]


def _in_a_child(target):
    """Runs `target()` in a forked child; returns what it returned, or raises what it raised."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def main():
        try:
            send.send(("ok", target()))
        except BaseException as error:
            send.send(("error", error))

    process = ctx.Process(target=main, daemon=True)
    process.start()
    send.close()
    try:
        assert receive.poll(30), "the child did not answer"
        kind, value = receive.recv()
    finally:
        process.join(10)
    if kind == "error":
        raise value
    return value


def _element(i=0):
    return {"image": np.full(100_000, i, np.uint8), "id": i}


def _encode_without_room():
    _limit_file_size()
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader(release=pool.reclaim)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        payloads = [pool.encode(_element(i)) for i in range(3)]
        left = _created_here()
        decoded = [reader.decode(payload) for payload in payloads]
        _lift_file_size_limit()
        again = pool.encode(_element(3))
        decoded.append(reader.decode(again))
    reader.close()
    pool.close()
    return {
        "segments": [payload.segment for payload in payloads],
        "left": left,
        "ids": [element["id"] for element in decoded],
        "images": [int(element["image"][0]) for element in decoded],
        "warnings": [(w.category.__name__, str(w.message)) for w in caught],
        "again": again.segment is not None,
        "after_close": _created_here(),
    }


def test_a_pool_without_room_pickles_elements_and_says_so_once():
    result = _in_a_child(_encode_without_room)
    assert result["segments"] == [None, None, None]  # pickled whole
    assert result["left"] == []  # the half-made segments were unlinked
    assert result["ids"] == result["images"] == [0, 1, 2, 3]
    [(category, message)] = result["warnings"]
    assert category == "RuntimeWarning"
    assert "travel pickled through the pipe instead" in message
    assert f"[Errno 27] {NO_ROOM}" in message
    assert f"larger than {LIMIT} bytes" in message
    assert "RLIMIT_FSIZE" in message
    assert result["again"], "with room again, shared memory is used again"
    assert result["after_close"] == []


def _create_an_array_without_room():
    _limit_file_size()
    try:
        SharedMemoryArray((MIN_SEGMENT_BYTES,), np.uint8)
    except OSError as error:
        return error.errno, str(error), _created_here()
    return None


def test_a_shared_memory_array_without_room_says_how_much_and_how_to_fix_it():
    result = _in_a_child(_create_an_array_without_room)
    assert result is not None, "the segment was created despite the limit"
    errno_, message, left = result
    assert errno_ == 27
    assert message.startswith(f"[Errno 27] {NO_ROOM} 'grain_")
    assert f"may not write files larger than {LIMIT} bytes" in message
    assert "Raise the limit" in message
    assert left == []


def _ours():
    me = os.getpid()
    return {name for name in segment_names() if parse_segment_name(name)[0] == me}


def test_mp_prefetch_workers_without_room_deliver_every_element_and_warn_once():
    before = _ours()
    ds = MapDataset.range(12).map(_element).to_iter_dataset()
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    ds = ds.mp_prefetch(options, worker_init_fn=_limit_file_size)
    with pytest.warns(RuntimeWarning, match=NO_ROOM) as caught:
        elements = list(ds)
    assert [e["id"] for e in elements] == list(range(12))
    assert [int(e["image"][0]) for e in elements] == list(range(12))
    assert len([w for w in caught if NO_ROOM in str(w.message)]) == 1
    assert str(caught[0].message).startswith("grain workers: Shared memory could not take")
    assert _ours() - before == set()


def _stack_without_room():
    from grain_dataset import stack
    from grain_dataset.extension import set_batch_allocator

    _limit_file_size()
    pool = SegmentPool(owner_pid=os.getpid())
    reader = SegmentReader(release=pool.reclaim)
    set_batch_allocator(pool.empty)
    images = [np.full(100_000, i, np.uint8) for i in range(8)]  # 800 KB batches
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = stack(images)  # numpy's memory: no segment could be made
        in_numpy = batch.base is None
        payload = pool.encode(batch)  # and the transport pickles it, saying so once
        decoded = reader.decode(payload)
    set_batch_allocator(None)
    reader.close()
    pool.close()
    return {
        "in_numpy": in_numpy,
        "pickled": payload.segment is None and not payload.own,
        "firsts": [int(row[0]) for row in decoded],
        "warnings": [str(w.message) for w in caught],
        "after_close": _created_here(),
    }


def test_batches_without_room_are_stacked_in_numpy_memory_and_said_once():
    result = _in_a_child(_stack_without_room)
    assert result["in_numpy"]
    assert result["pickled"]
    assert result["firsts"] == list(range(8))
    [message] = result["warnings"]  # the transport's, not one per allocation
    assert "travel pickled through the pipe instead" in message
    assert result["after_close"] == []
