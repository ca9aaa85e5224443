"""SharedMemoryDataSource / InMemoryDataSource: one copy in /dev/shm, read by workers.

What must hold: every allowed value comes back equal and of the same built-in type;
reads from fork, spawn and forkserver workers and from unrelated processes see the
same data through the one segment (a pickle carries only the name); and no segment
outlives its owner: not after close(), garbage collection, a normal exit without
close(), nor a SIGKILL; while no other process (fork child, unpickled copy,
unrelated reader) ever removes the owner's segment.
"""

import gc
import json
import math
import multiprocessing
import operator
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
import uuid
from multiprocessing import shared_memory

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_sources import _shared_memory
from grain_sources._protocol import RandomAccessDataSource
from grain_sources._shared_memory import (
    MAX_ITEM_BYTES,
    InMemoryDataSource,
    SharedMemoryDataSource,
)

SHM = "/dev/shm"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

EDGE_VALUES = [
    0,
    -1,
    7,
    INT64_MIN,
    INT64_MAX,
    0.0,
    -0.0,
    1.5,
    -2.25e-308,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    "",
    "plain",
    "h\u00e9llo w\u00f6rld \u4e16\u754c \U0001f600",
    "lone surrogate \ud800",
    "nul\x00inside",
    b"",
    b"\x00",
    b"\xff\xfe raw \x00 bytes",
]


def same(a, b) -> bool:
    """Equal and of the same type; floats compared bit for bit (nan, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def assert_same_list(got, expected):
    assert len(got) == len(expected)
    bad = [(i, g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if not same(g, e)]
    assert not bad, f"(index, got, expected) mismatches: {bad[:5]}"


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(SHM, name))


def wait_until_gone(name: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while exists(name) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not exists(name)


def mapped_in_this_process(name: str) -> bool:
    with open("/proc/self/maps") as maps:
        return any(name in line for line in maps)


@pytest.fixture
def no_new_segments(monkeypatch):
    """Fails the test if a segment created in this process is still in /dev/shm after it.

    Only this process's own segments are followed (other test runs may share /dev/shm);
    tests of segments made by subprocesses check those by name.
    """
    created = []

    class Recording(shared_memory.SharedMemory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            created.append(self.name)

    monkeypatch.setattr(shared_memory, "SharedMemory", Recording)
    yield created
    gc.collect()
    left = [name for name in created if exists(name)]
    assert not left, f"segments left in {SHM}: {left}"


# --------------------------------------------------------------------------- values


def test_the_guide_example(no_new_segments):
    src = InMemoryDataSource(range(5))
    assert InMemoryDataSource is SharedMemoryDataSource
    assert repr(src).startswith(f"SharedMemoryDataSource(len=5, name='{src.name}', bytes=")
    # print() uses the name the guide creates it by (one class, two names, as in Grain).
    assert str(src) == repr(src).replace("SharedMemoryDataSource", "InMemoryDataSource", 1)
    assert src[0] == 0
    assert_same_list(list(src), [0, 1, 2, 3, 4])
    assert isinstance(src, RandomAccessDataSource)
    assert exists(src.name)
    src.close()
    assert not exists(src.name)


def test_edge_values_round_trip(no_new_segments):
    with SharedMemoryDataSource(EDGE_VALUES) as src:
        assert len(src) == len(EDGE_VALUES)
        assert_same_list([src[i] for i in range(len(src))], EDGE_VALUES)
        assert_same_list(src.__getitems__(range(len(src))), EDGE_VALUES)
        assert_same_list(list(src), EDGE_VALUES)
        assert_same_list([src[-i] for i in range(1, len(src) + 1)], EDGE_VALUES[::-1])


# Each list has one type, so it takes the vectorized path; the mixed tests take the other.
UNIFORM = {
    "int": [0, -5, INT64_MIN, INT64_MAX, 12345678901],
    "float": [0.0, -0.0, math.pi, float("nan"), float("inf"), -1e300],
    "bool": [True, False, False, True],
    "none": [None, None, None],
    "str": ["", "a", "\u00e9\u4e16", "\ud800", "x" * 1000],
    "bytes": [b"", b"\x00", b"abc" * 100],
    "empty": [],
}


@pytest.mark.parametrize("kind", sorted(UNIFORM))
def test_uniform_lists_round_trip(kind, no_new_segments):
    values = UNIFORM[kind]
    with SharedMemoryDataSource(values) as src:
        assert len(src) == len(values)
        assert_same_list(list(src), values)
        assert_same_list([src[i] for i in range(len(values))], values)
        assert_same_list(src.__getitems__(list(range(len(values)))[::-1]), values[::-1])


@pytest.mark.parametrize(
    "values",
    [
        range(0),
        range(7),
        range(10, -10, -3),
        range(INT64_MAX - 3, INT64_MAX + 1),
        range(INT64_MIN, INT64_MIN + 5, 2),
        # Steps whose products overflow int64 although every value fits.
        range(INT64_MIN, INT64_MAX, 2**63 - 1),
        range(INT64_MIN, INT64_MAX, 2**64 - 1),
    ],
    ids=repr,
)
def test_ranges_round_trip(values, no_new_segments):
    with SharedMemoryDataSource(values) as src:
        assert_same_list(list(src), list(values))


def test_iteration_crosses_chunk_boundaries(no_new_segments):
    values = [i if i % 3 else str(i) for i in range(2500)]
    with SharedMemoryDataSource(iter(values)) as src:  # a one-shot iterable
        assert_same_list(list(src), values)


def test_numpy_inputs_become_builtin_values(no_new_segments):
    cases = [
        (np.arange(4, dtype=np.int32), [0, 1, 2, 3]),
        (np.array([0, 2**64 - 1 - 2**63], dtype=np.uint64), [0, INT64_MAX]),
        (np.array([0.5, -1.0], dtype=np.float32), [0.5, -1.0]),
        (np.array([True, False]), [True, False]),
        (np.array(["ab", "c"]), ["ab", "c"]),
        ([np.int64(-3), np.float64(2.5), np.bool_(False), np.str_("s"), np.bytes_(b"b")],
         [-3, 2.5, False, "s", b"b"]),
    ]  # fmt: skip
    for given_values, expected in cases:
        with SharedMemoryDataSource(given_values) as src:
            assert_same_list(list(src), expected)


def test_subclasses_come_back_as_builtin_types(no_new_segments):
    class MyInt(int):
        pass

    class MyStr(str):
        def __str__(self):
            return "not me"

    with SharedMemoryDataSource([MyInt(4), MyStr("mine")]) as src:
        assert_same_list(list(src), [4, "mine"])


STORABLE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN, INT64_MAX),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(),
)


@settings(max_examples=40, deadline=None)
@given(
    values=st.one_of(st.lists(STORABLE, max_size=40), st.lists(st.integers(-9, 9), max_size=40)),
    data=st.data(),
)
def test_property_round_trip_and_batched_reads(values, data):
    with SharedMemoryDataSource(values) as src:
        assert_same_list(list(src), values)
        if values:
            n = len(values)
            indices = data.draw(st.lists(st.integers(-n, n - 1), max_size=60))
            assert_same_list(src.__getitems__(indices), [src[i] for i in indices])
            expected = [values[i] for i in indices]
            assert_same_list(src.__getitems__(np.array(indices, np.int64)), expected)
    assert not exists(src.name)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("values", "index", "type_name"),
    [
        ([1, {"a": 1}], 1, "dict"),
        (["x", None, [1]], 2, "list"),
        ([np.zeros(3)], 0, "ndarray"),
        ([0.5, 1j], 1, "complex"),
        ([b"a", bytearray(b"b")], 1, "bytearray"),
        (np.zeros((2, 2)), 0, "ndarray"),
        ([np.datetime64("2020-01-01")], 0, "datetime64"),
    ],
    ids=["dict", "list", "array-element", "complex", "bytearray", "2d-array", "datetime64"],
)
def test_unsupported_types_are_named(values, index, type_name, no_new_segments):
    with pytest.raises(TypeError, match=rf"Element {index} has type {type_name}\b") as info:
        SharedMemoryDataSource(values)
    message = str(info.value)
    assert "int, float, bool, str, bytes and None" in message
    assert "ArrayRecord" in message


@pytest.mark.parametrize(
    ("values", "index"),
    [
        ([0, 2**63], 1),  # the vectorized int path falls back to name the index
        ([1, 2, -(2**63) - 1], 2),
        (["a", 2**100], 1),
        (range(INT64_MAX - 1, INT64_MAX + 2), 2),
        (np.array([1, 2**63], dtype=np.uint64), 1),
    ],
    ids=["uniform", "uniform-negative", "mixed", "range", "uint64"],
)
def test_ints_outside_int64_are_named(values, index, no_new_segments):
    with pytest.raises(OverflowError, match=rf"Element {index} is the int .* int64"):
        SharedMemoryDataSource(values)


@pytest.mark.parametrize(
    ("values", "index", "kind"),
    [
        (["ok", "x" * MAX_ITEM_BYTES], 1, "str"),
        ([1, "\u00e9" * (MAX_ITEM_BYTES // 2)], 1, "str"),  # counted in UTF-8 bytes
        ([b"y" * MAX_ITEM_BYTES], 0, "bytes"),
        ([None, b"y" * MAX_ITEM_BYTES], 1, "bytes"),
    ],
    ids=["str", "utf8-length", "bytes", "mixed-bytes"],
)
def test_oversized_values_are_named(values, index, kind, no_new_segments):
    with pytest.raises(ValueError, match=rf"Element {index} is a {kind} of {MAX_ITEM_BYTES} bytes"):
        SharedMemoryDataSource(values)


def test_values_just_under_the_limit_are_stored(no_new_segments):
    big = "z" * (MAX_ITEM_BYTES - 1)
    with SharedMemoryDataSource([big]) as src:
        assert src[0] == big


def test_index_errors(no_new_segments):
    with SharedMemoryDataSource(["a", 1, None, 2.0, b"b"]) as src:
        for bad in (5, -6, 2**70):
            with pytest.raises(IndexError, match=rf"Index {bad} is out of range .* length 5"):
                src[bad]
            with pytest.raises(IndexError, match=rf"Index {bad} is out of range .* length 5"):
                src.__getitems__([0, bad])
        with pytest.raises(IndexError, match="Index 9 is out of range"):
            src.__getitems__(np.array([1, 9], dtype=np.uint64))
        for bad in ("1", 1.0, slice(0, 2), None):
            with pytest.raises(TypeError, match="indices must be integers"):
                src[bad]
        for bad in ([0.5], [[0, 1]], ["a"], [True, False]):
            with pytest.raises(TypeError, match="flat sequence of integers"):
                src.__getitems__(bad)
        assert src[np.int64(-1)] == b"b"
        assert src.__getitems__([]) == []
        assert src.__getitems__(np.array([4, 0], dtype=np.uint8)) == [b"b", "a"]
        assert src.__getitems__(x for x in (1, -1)) == [1, b"b"]
    with SharedMemoryDataSource([]) as empty:
        assert len(empty) == 0
        assert list(empty) == []
        with pytest.raises(IndexError, match="length 0"):
            empty[0]


# --------------------------------------------------------------------------- ownership


def test_close_unlinks_unmaps_and_stops_reads(no_new_segments):
    src = SharedMemoryDataSource([1, "two", 3.0])
    name = src.name
    assert exists(name)
    assert mapped_in_this_process(name)
    src.close()
    assert not exists(name)
    assert not mapped_in_this_process(name)
    assert "closed" in repr(src)
    for read in (lambda: src[0], lambda: src.__getitems__([0]), lambda: list(src)):
        with pytest.raises(ValueError, match="is closed"):
            read()
    with pytest.raises(ValueError, match="Cannot pickle"):
        pickle.dumps(src)
    src.close()  # idempotent
    assert len(src) == 3


def test_leaving_the_with_block_unlinks(no_new_segments):
    with SharedMemoryDataSource(range(3)) as src:
        name = src.name
    assert not exists(name)
    with pytest.raises(ValueError, match="is closed"):
        src[0]


def test_garbage_collection_unlinks(no_new_segments):
    src = SharedMemoryDataSource([b"x"] * 10)
    name = src.name
    del src
    gc.collect()
    assert not exists(name)
    assert not mapped_in_this_process(name)


def test_bad_values_fail_before_any_segment_exists(no_new_segments):
    with pytest.raises(TypeError):
        SharedMemoryDataSource([1, 2, object()])
    assert no_new_segments == []


def test_failure_after_the_segment_exists_unlinks_it(no_new_segments, monkeypatch):
    def fail(name):
        raise OSError(f"cannot map {name}")

    monkeypatch.setattr(_shared_memory, "_map_read_only", fail)
    with pytest.raises(OSError, match="cannot map"):
        SharedMemoryDataSource([1, 2])
    gc.collect()
    assert len(no_new_segments) == 1
    assert not exists(no_new_segments[0])


def test_explicit_name(no_new_segments):
    name = f"grain_test_{uuid.uuid4().hex[:12]}"
    with SharedMemoryDataSource([1, 2], name=name) as src:
        assert src.name == name
        assert exists(name)
        with pytest.raises(FileExistsError, match=rf"named '{name}' already exists.*name=None"):
            SharedMemoryDataSource([3], name=name)
        assert src[1] == 2  # the failed attempt left the first segment alone
    assert not exists(name)


def test_pickled_copy_in_the_same_process_does_not_own(no_new_segments):
    src = SharedMemoryDataSource(EDGE_VALUES)
    copy = pickle.loads(pickle.dumps(src))
    assert len(copy) == len(src)
    assert copy.name == src.name
    assert_same_list(list(copy), EDGE_VALUES)
    copy.close()
    assert exists(src.name)
    assert_same_list(list(src), EDGE_VALUES)
    with pytest.raises(ValueError, match="is closed"):
        copy[0]
    src.close()
    assert not exists(src.name)


def test_attached_copy_keeps_reading_after_the_owner_closes(no_new_segments):
    src = SharedMemoryDataSource(["a", 2, None])
    reading = pickle.loads(pickle.dumps(src))
    late = pickle.loads(pickle.dumps(src))
    assert reading[0] == "a"  # maps the segment now
    src.close()
    assert not exists(src.name)
    assert reading.__getitems__([2, 1, 0]) == [None, 2, "a"]
    with pytest.raises(FileNotFoundError, match=rf"'{src.name}' no longer exists.*was closed"):
        late[0]
    reading.close()


def test_pickle_carries_only_the_name(no_new_segments):
    with SharedMemoryDataSource([bytes(1_000_000)] * 10) as src:
        assert len(pickle.dumps(src)) < 1024


# --------------------------------------------------------------------------- processes

MIXED = [i if i % 4 else f"s{i}" for i in range(200)] + [None, True, 2.5, b"\x00b"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_worker_processes_read_everything(method, no_new_segments):
    context = multiprocessing.get_context(method)
    src = SharedMemoryDataSource(MIXED)
    chunks = [list(range(start, len(MIXED), 7)) for start in range(7)]
    with context.Pool(2) as pool:
        batches = pool.map(src.__getitems__, chunks)
        singles = pool.starmap(operator.getitem, [(src, i) for i in range(-5, 5)])
        pool.close()
        pool.join()
    for chunk, batch in zip(chunks, batches, strict=True):
        assert_same_list(batch, [MIXED[i] for i in chunk])
    assert_same_list(singles, [MIXED[i] for i in range(-5, 5)])
    # The workers' unpickled copies did not take the segment with them.
    assert exists(src.name)
    assert_same_list(list(src), MIXED)
    src.close()
    assert not exists(src.name)


@pytest.mark.timeout(60)
def test_five_fork_workers_as_in_the_guide(no_new_segments):
    src = InMemoryDataSource(range(5))
    with multiprocessing.get_context("fork").Pool(5) as pool:
        assert pool.starmap(operator.getitem, [(src, i) for i in range(5)]) == [0, 1, 2, 3, 4]
        pool.close()
        pool.join()
    src.close()


@pytest.mark.timeout(60)
def test_fork_child_closing_its_inherited_copy_does_not_unlink(no_new_segments):
    src = SharedMemoryDataSource(MIXED)

    def child():
        # The inherited object still believes it is the owner's; only the pid says not.
        assert_same_list(list(src), MIXED)
        src.close()
        gc.collect()

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(30)
    assert process.exitcode == 0
    assert exists(src.name)
    assert_same_list(list(src), MIXED)
    src.close()
    assert not exists(src.name)


def run_python(code: str, stdin: bytes = b"", timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


# Reads a pickled source from stdin in a process unrelated to the owner, and reports
# how its private (anonymous) and shared-memory resident sizes moved while reading.
READER = """
import json, pickle, sys

def resident():
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("RssAnon", "RssShmem")}

src = pickle.loads(sys.stdin.buffer.read())
before = resident()
sizes = [len(src[i]) for i in range(len(src))]
after = resident()
with open("/proc/self/maps") as maps:
    mapped = [line.split()[-1] for line in maps if src.name in line]
print(json.dumps({"sizes": sizes, "before": before, "after": after, "mapped": mapped}))
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="free-threaded CPython keeps freed memory resident (mimalloc, delayed frees): "
    "ten transient 1 MB bytes grow RssAnon by ~6 MB there (1 MB with the GIL), so RssAnon "
    "cannot tell a mapping from copies",
)
def test_unrelated_reader_maps_the_segment_without_a_copy_and_leaves_it(no_new_segments):
    size, count = 1_000_000, 10
    src = SharedMemoryDataSource([bytes([i]) * size for i in range(count)])
    done = run_python(READER, stdin=pickle.dumps(src))
    assert done.returncode == 0, done.stderr.decode()
    # A reader that registered the segment with its own resource tracker would have had
    # it unlinked (with a warning on stderr) when it exited.
    assert done.stderr == b""
    assert exists(src.name)
    report = json.loads(done.stdout)
    assert report["sizes"] == [size] * count
    assert report["mapped"] == [f"{SHM}/{src.name}"]
    grew = {key: report["after"][key] - report["before"][key] for key in report["after"]}
    # The 10 MB were read through the shared mapping, not copied into private memory.
    assert grew["RssShmem"] >= 0.9 * size * count, grew
    assert grew["RssAnon"] < 0.4 * size * count, grew
    assert src[count - 1] == bytes([count - 1]) * size
    src.close()
    assert not exists(src.name)


OWNER = """
import sys
from grain_sources._shared_memory import SharedMemoryDataSource
src = SharedMemoryDataSource(["kept", 1, 2.0] * 1000)
print(src.name, flush=True)
if sys.argv[1:] == ["wait"]:
    sys.stdin.read()
"""


@pytest.mark.timeout(60)
def test_owner_exiting_without_close_unlinks():
    done = run_python(OWNER)
    assert done.returncode == 0, done.stderr.decode()
    name = done.stdout.decode().strip()
    assert name.startswith("psm_")
    assert not exists(name)
    # Unlinked by the owner itself: the resource tracker found nothing left to clean.
    assert done.stderr == b""


@pytest.mark.timeout(60)
def test_killed_owner_is_cleaned_by_the_resource_tracker():
    with subprocess.Popen(
        [sys.executable, "-c", OWNER, "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as owner:
        name = owner.stdout.readline().decode().strip()
        assert exists(name)
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        assert owner.returncode == -signal.SIGKILL
        assert wait_until_gone(name), f"{name} still in {SHM} after the owner was killed"
        # The tracker (which shares these pipes) reports the leak it cleaned, then exits.
        owner.communicate(timeout=30)


# --------------------------------------------------------------------------- by name


def test_a_source_by_name_reads_another_sources_segment_without_owning_it(no_new_segments):
    name = f"grain_test_{uuid.uuid4().hex[:12]}"
    owner = InMemoryDataSource([1, "b", 3.0], name=name)
    reader = InMemoryDataSource(name=name)
    assert len(reader) == 3
    assert list(reader) == [1, "b", 3.0]
    reader.close()
    assert exists(name), "a source attached by name unlinked the owner's segment"
    assert owner[1] == "b"
    with pytest.raises(FileExistsError):
        InMemoryDataSource([4], name=name)
    owner.close()
    assert not exists(name)


def test_neither_elements_nor_name_is_refused_and_a_missing_name_is_named():
    with pytest.raises(ValueError, match=r"`elements`.*`name`"):
        InMemoryDataSource()
    with pytest.raises(FileNotFoundError, match="grain_test_missing"):
        InMemoryDataSource(name="grain_test_missing")
    assert len(InMemoryDataSource([])) == 0


def test_grains_list_methods_count_index_and_unlink(no_new_segments):
    src = InMemoryDataSource(["a", "b", "a"])
    assert src.count("a") == 2
    assert src.count("z") == 0
    assert src.index("b") == 1
    with pytest.raises(ValueError, match="not in"):
        src.index("z")
    name = src.name
    src.unlink()
    assert not exists(name)
    assert src[2] == "a", "a mapped segment stays readable after unlink"
    src.unlink()  # idempotent
    src.close()


def test_unlink_of_a_segment_attached_by_name(no_new_segments):
    name = f"grain_test_{uuid.uuid4().hex[:12]}"
    owner = InMemoryDataSource([1, 2], name=name)
    reader = InMemoryDataSource(name=name)
    reader.unlink()
    assert not exists(name)
    assert list(owner) == [1, 2]
    owner.close()
    reader.close()


def test_shm_gives_the_name_to_attach_by_as_in_grain(no_new_segments):
    owner = InMemoryDataSource([1, 2, 3])
    assert owner.shm.name == owner.name
    assert owner.shm.size > 0
    again = InMemoryDataSource(name=owner.shm.name)
    assert list(again) == [1, 2, 3]
    again.close()
    owner.close()
