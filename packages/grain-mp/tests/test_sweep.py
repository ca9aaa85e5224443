"""Segment names and the sweep of segments whose owner died.

What must hold: names are short, unique (also across fork) and say their owner and
creator; the sweep removes every segment of a SIGKILLed process group, so no
resource tracker is needed, and never touches a live process's segments; a
parent can remove whatever one (dead) worker made for it.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from grain_mp import _sweep
from grain_mp._sweep import (
    attach_segment,
    create_segment,
    create_unique_segment,
    new_segment_name,
    parse_segment_name,
    process_alive,
    remove_segments,
    segment_exists,
    unlink_segment,
)

pytestmark = pytest.mark.usefixtures("no_leaked_segments")


def start_python(code: str) -> subprocess.Popen:
    """A Python process in its own session (so its whole group can be SIGKILLed)."""
    return subprocess.Popen(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_names_are_short_unique_and_name_owner_and_creator():
    names = [new_segment_name() for _ in range(100)] + [new_segment_name(owner_pid=1)]
    assert len(set(names)) == len(names)
    assert all(name.startswith("grain_") and len(name) < 64 for name in names)
    assert parse_segment_name(names[0]) == (os.getpid(), os.getpid())
    assert parse_segment_name(names[-1]) == (1, os.getpid())
    assert parse_segment_name("/" + names[0]) == (os.getpid(), os.getpid())


@pytest.mark.parametrize(
    "name",
    [
        "psm_1234",
        "grain_1_2_3",
        "grain_effffffc_12_34_abc",
        "grain_effffffc_x_34_abc_1",
        "grain_effffffc_12_34_abc_1_extra",
        # Another pid namespace (another container sharing /dev/shm): never ours.
        f"grain_{_sweep._naming.namespace + 1:x}_12_34_abc_1",
    ],
)
def test_foreign_names_do_not_parse(name):
    assert parse_segment_name(name) is None


def test_owner_pid_must_be_positive():
    with pytest.raises(ValueError, match="owner_pid must be a positive"):
        new_segment_name(owner_pid=0)


@pytest.mark.timeout(60)
def test_a_forked_child_draws_its_own_token():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one name and leave without cleanup hooks
        os.write(write_end, new_segment_name().encode())
        os._exit(0)
    os.close(write_end)
    child_name = os.read(read_end, 200).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    mine = new_segment_name()
    assert parse_segment_name(child_name) == (pid, pid)
    assert child_name.split("_")[4] != mine.split("_")[4]  # the run tokens


@pytest.mark.timeout(60)
def test_process_alive():
    assert process_alive(os.getpid())
    assert not process_alive(0)  # kill(0, ...) would address our own process group
    assert not process_alive(-1)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while True:  # exited but not reaped: a zombie, which counts as dead
        with open(f"/proc/{zombie.pid}/stat", "rb") as stat:
            if stat.read().rpartition(b")")[2].split()[0] == b"Z":
                break
        time.sleep(0.01)
    assert not process_alive(zombie.pid)
    zombie.wait()
    assert not process_alive(zombie.pid)


def test_create_attach_unlink():
    name = new_segment_name()
    mapping = create_segment(name, 100)
    assert segment_exists(name)
    mapping[:5] = b"hello"
    other = attach_segment(name, writable=False)
    assert other[:5] == b"hello"
    with pytest.raises(FileExistsError):
        create_segment(name, 100)
    assert unlink_segment(name)
    assert not unlink_segment(name)  # already gone: not an error
    assert other[:5] == b"hello"  # mappings outlive the name
    mapping.close()
    other.close()
    with pytest.raises(FileNotFoundError):
        attach_segment(name)


def test_zero_bytes_still_make_a_mappable_segment():
    name, mapping = create_unique_segment(0)
    assert len(mapping) == 1
    mapping.close()
    assert unlink_segment(name)


def test_a_full_shm_says_what_to_do(monkeypatch):
    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    name = new_segment_name()
    with pytest.raises(OSError, match=r"/dev/shm is full\. Enlarge it"):
        create_segment(name, 1 << 20)
    assert not segment_exists(name)  # nothing half-made is left


PRODUCER = """
    import json, os, sys, time
    import numpy as np
    from grain_mp._shm_array import SharedMemoryArray
    from grain_mp._sweep import create_unique_segment
    from grain_mp._segment_pool import SegmentPool

    arrays = [SharedMemoryArray((10, 10), np.float32) for _ in range(2)]
    raw_name, raw_mapping = create_unique_segment(4096)
    pool = SegmentPool(owner_pid=os.getpid())
    payload = pool.encode(np.zeros(100_000, np.uint8))  # lent, never decoded
    names = [a.metadata.name for a in arrays] + [raw_name, payload.segment]
    print(json.dumps(names), flush=True)
    sys.stdin.readline()  # until told to go (or killed)
    pool.close()  # the payload stays lent: its owner (this process) unlinks it
    from grain_mp._sweep import unlink_segment
    unlink_segment(raw_name)
    unlink_segment(payload.segment)
"""


def _close(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    process.stdout.close()
    process.stderr.close()
    process.stdin.close()


def _kill_a_producer():
    """Starts a producer and SIGKILLs it: the names of the segments it made."""
    doomed = start_python(PRODUCER)
    try:
        names = json.loads(doomed.stdout.readline())
        assert all(map(segment_exists, names))
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        return names
    finally:
        _close(doomed)


@pytest.mark.timeout(60)
def test_sweep_removes_a_killed_groups_segments_and_spares_the_living(own_sweep):
    living = start_python(PRODUCER)
    mine, my_mapping = create_unique_segment(10)
    try:
        living_names = json.loads(living.stdout.readline())
        assert all(map(segment_exists, living_names))
        doomed_names, removed = own_sweep(_kill_a_producer)

        assert removed >= len(doomed_names)
        assert not any(map(segment_exists, doomed_names))
        assert all(map(segment_exists, living_names))
        assert segment_exists(mine)
        # The living producer cleans up after itself on a normal exit.
        _, errors = living.communicate("go\n", timeout=30)
        assert living.returncode == 0, errors
        assert errors == ""  # no resource tracker complaints, no warnings
        assert not any(map(segment_exists, living_names))
    finally:
        _close(living)
        my_mapping.close()
        unlink_segment(mine)


@pytest.mark.timeout(60)
def test_remove_segments_takes_only_that_creators_segments_for_this_owner():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a "worker": makes two segments for its parent, then dies uncleanly
        names = [create_unique_segment(64, owner_pid=os.getppid())[0] for _ in range(2)]
        os.write(write_end, json.dumps(names).encode())
        os._exit(0)
    os.close(write_end)
    child_names = json.loads(os.read(read_end, 1000))
    os.close(read_end)
    os.waitpid(pid, 0)
    mine, mapping = create_unique_segment(64)
    assert all(map(segment_exists, child_names))
    assert {parse_segment_name(name) for name in child_names} == {(os.getpid(), pid)}

    assert remove_segments(pid) == 2

    assert not any(map(segment_exists, child_names))
    assert segment_exists(mine)
    # The owner (this process) is alive: a sweep would not have removed them.
    mapping.close()
    unlink_segment(mine)
