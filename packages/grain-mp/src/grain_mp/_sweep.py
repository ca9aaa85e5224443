"""Names, raw primitives and sweeping for the POSIX shared memory segments grain creates.

Naming. Every segment grain_mp creates is called::

    grain_<pid namespace>_<owner pid>_<creator pid>_<run token>_<counter>

e.g. ``grain_effffffc_4711_4720_9c1e22ab_3`` (always under 64 characters).

- *owner pid* is the process whose death makes the segment garbage: the creator
  itself for a `SharedMemoryArray`, the consuming parent for the segments a worker
  lends it (a worker may legitimately end before its parent has read its last
  elements, so the creator's death alone does not make them garbage).
- *creator pid* is the process that created it, so that a parent can remove every
  segment of a worker that died (`remove_segments`), sent to it or not.
- *pid namespace* (the inode of ``/proc/self/ns/pid``, in hex) makes pids
  comparable: containers started with ``--ipc=host`` share ``/dev/shm`` but not pids,
  and a live process of another container must not look dead.
- *run token* (random hex, drawn anew in each process, forked children included)
  and *counter* make the name unique even when pids are reused.

Segments are created and attached with ``_posixshmem.shm_open`` + ``mmap``,
bypassing `multiprocessing.shared_memory` and its resource tracker on purpose:
the tracker unlinks what a process registered when *that* process's tracker
exits, which for a segment lent to a parent is too early (fork without a running
tracker) or noisy ("leaked shared_memory objects" warnings); and the tracker dies
with the process group anyway, so it cannot help when everything is SIGKILLed.
Cleanup is therefore explicit (see `grain_mp._shm_array` and
`grain_mp._transport` for who unlinks what), with `sweep_dead_segments` as the
safety net: it removes every segment whose owner process is gone. Pipelines call
it when they start, so leftovers of a SIGKILLed process group never outlive the
next start.

Example::

    name = new_segment_name()            # 'grain_effffffc_4711_4711_9c1e22ab_0'
    mapping = create_segment(name, 1024)  # read-write mmap, pages reserved
    ...
    unlink_segment(name)
    sweep_dead_segments()                 # 0 when nothing was left behind
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import re
import secrets
import threading

__all__ = [
    "SHM_DIR",
    "attach_segment",
    "create_segment",
    "create_unique_segment",
    "new_segment_name",
    "parse_segment_name",
    "process_alive",
    "remove_segments",
    "segment_exists",
    "segment_names",
    "sweep_dead_segments",
    "unlink_segment",
]

SHM_DIR = "/dev/shm"
"""Where Linux shows POSIX shared memory segments (``shm_open("/x")`` is ``/dev/shm/x``)."""

_PREFIX = "grain_"
_NAME = re.compile(r"grain_([0-9a-f]+)_(\d+)_(\d+)_([0-9a-f]+)_(\d+)")
# Collisions are practically impossible (random token), but a leftover of a
# previous process with the same pid and token would make O_EXCL fail: retry.
_CREATE_ATTEMPTS = 8


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # not Linux, or /proc is not mounted: all processes look alike
        return 0


class _Naming:
    """This process's token and counter; a forked child draws its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.pid = os.getpid()
        self.namespace = _pid_namespace()
        self.token = secrets.token_hex(4)
        self.counter = itertools.count()


_naming = _Naming()
# A child forked by any means (multiprocessing or os.fork) must not continue its
# parent's sequence: same token + counter would name two different segments alike.
os.register_at_fork(after_in_child=_naming.reset)


def new_segment_name(owner_pid: int | None = None) -> str:
    """A fresh segment name, owned by `owner_pid` (default: this process).

    Example::

        new_segment_name()                 # 'grain_effffffc_4711_4711_9c1e22ab_0'
        new_segment_name(os.getppid())     # a worker's segment its parent owns
    """
    naming = _naming
    owner = naming.pid if owner_pid is None else int(owner_pid)
    if owner <= 0:
        raise ValueError(f"owner_pid must be a positive process id, got {owner_pid!r}.")
    with naming.lock:
        count = next(naming.counter)
    return f"{_PREFIX}{naming.namespace:x}_{owner}_{naming.pid}_{naming.token}_{count}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(owner pid, creator pid)`` of a grain segment of this pid namespace, else None.

    Example::

        parse_segment_name(new_segment_name(1234))  # (1234, os.getpid())
        parse_segment_name("psm_abc")               # None
    """
    match = _NAME.fullmatch(name.lstrip("/"))
    if match is None or int(match.group(1), 16) != _naming.namespace:
        return None
    return int(match.group(2)), int(match.group(3))


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (in this pid namespace).

    A process of another user counts as alive (signalling it is merely not allowed).
    A zombie counts as dead: it will never touch its segments again, and in
    containers whose init does not reap, zombies would otherwise pin them forever.

    Example::

        process_alive(os.getpid())  # True
    """
    if pid <= 0:  # 0 and negatives address process groups in kill(2)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state letter follows the command name, which is in parentheses
            # and may itself contain ") ".
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def segment_names() -> list[str]:
    """The names of grain segments of this pid namespace now in `SHM_DIR`.

    Example::

        [name for name in segment_names() if parse_segment_name(name)[1] == worker_pid]
    """
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:  # no /dev/shm (not Linux): nothing to list
        return []
    return [name for name in entries if parse_segment_name(name) is not None]


def segment_exists(name: str) -> bool:
    """Whether a segment called `name` exists (checked in `SHM_DIR`)."""
    return os.path.exists(os.path.join(SHM_DIR, name))


def unlink_segment(name: str) -> bool:
    """Removes the name `name`; True if this call removed it, False if it was gone.

    Mappings of the segment stay valid until they are dropped; only new attaches fail.

    Example::

        unlink_segment(name)  # True
        unlink_segment(name)  # False: already gone
    """
    import _posixshmem  # POSIX only, like the segments themselves

    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        return False
    return True


def sweep_dead_segments() -> int:
    """Removes every grain segment whose owner process is gone; returns how many.

    Segments of live owners are never touched, nor those of another pid namespace
    or another user's (which this process may not remove). Call it when a pipeline
    starts, so that what a SIGKILLed process group left in /dev/shm is reclaimed.

    Example::

        removed = sweep_dead_segments()
    """
    alive: dict[int, bool] = {}
    removed = 0
    for name in segment_names():
        parsed = parse_segment_name(name)
        if parsed is None:
            continue
        owner = parsed[0]
        if owner not in alive:
            alive[owner] = process_alive(owner)
        if alive[owner]:
            continue
        try:
            removed += unlink_segment(name)
        except PermissionError:
            continue  # another user's segment: theirs to remove
    return removed


def remove_segments(creator_pid: int, owner_pid: int | None = None) -> int:
    """Removes every segment `creator_pid` created for `owner_pid` (default: this process).

    The parent calls this after a worker has exited, however it ended (even by
    SIGKILL): it reclaims the segments the worker had made, including those it
    never got to send. Call it only once the creator has stopped, since it may
    still be using them otherwise. Returns the number removed.

    Example::

        worker.join()
        remove_segments(worker.pid)
    """
    owner = os.getpid() if owner_pid is None else owner_pid
    removed = 0
    for name in segment_names():
        if parse_segment_name(name) == (owner, creator_pid):
            removed += unlink_segment(name)
    return removed


def create_segment(name: str, size: int) -> mmap.mmap:
    """Creates segment `name` of `size` bytes (at least 1) and maps it read-write.

    The pages are reserved up front: writing to a mapping whose tmpfs is full
    kills the process with SIGBUS, whereas reserving fails here with an error that
    says what to do. The segment is not registered with any resource tracker; the
    caller owns it and must unlink it (or leave it to `sweep_dead_segments`).

    Example::

        mapping = create_segment(new_segment_name(), 1 << 20)
    """
    import _posixshmem

    size = max(int(size), 1)  # mmap cannot map 0 bytes
    fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        _reserve(fd, size)
        return mmap.mmap(fd, size)
    except BaseException as error:
        # Half made (sized, or partly reserved): its name must not outlive the failure.
        unlink_segment(name)
        if isinstance(error, OSError):
            raise _no_room(error, size, name) from None
        raise
    finally:
        os.close(fd)  # the mapping keeps the segment alive on its own


def _reserve(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        # The filesystem cannot reserve: go on unreserved, like multiprocessing does.


def _no_room(error: OSError, size: int, name: str) -> OSError:
    """`error` of creating a segment, told as what was needed and how to make room."""
    needed = f"Not enough shared memory for a {size}-byte segment {name!r}: "
    if error.errno in (errno.ENOSPC, errno.ENOMEM):
        return OSError(
            error.errno,
            f"{needed}{SHM_DIR} is full. Enlarge it (e.g. docker run --shm-size=8g), "
            f"use fewer workers or smaller prefetch buffers, or remove stale "
            f"segments with grain_mp.sweep_dead_segments().",
        )
    if error.errno == errno.EFBIG:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit == resource.RLIM_INFINITY:
            return error  # not the limit: nothing we can say better
        return OSError(
            error.errno,
            f"{needed}this process may not write files larger than {limit} bytes (its "
            f"file-size limit, RLIMIT_FSIZE: `ulimit -f`), and a segment is a file. Raise "
            f"the limit (`ulimit -f unlimited`, or resource.setrlimit(resource.RLIMIT_FSIZE, "
            f"...) in the process), or make the elements smaller.",
        )
    return error


def create_unique_segment(size: int, owner_pid: int | None = None) -> tuple[str, mmap.mmap]:
    """A new segment under a fresh name (see `new_segment_name`): ``(name, mapping)``.

    Example::

        name, mapping = create_unique_segment(4096, owner_pid=parent_pid)
    """
    for _ in range(_CREATE_ATTEMPTS):
        name = new_segment_name(owner_pid)
        try:
            return name, create_segment(name, size)
        except FileExistsError:
            continue
    raise FileExistsError(
        f"Could not find a free shared memory name after {_CREATE_ATTEMPTS} attempts "
        f"(last: {name!r}). Remove stale segments with "
        f"grain_mp.sweep_dead_segments()."
    )


def attach_segment(name: str, *, writable: bool = True) -> mmap.mmap:
    """Maps the existing segment `name` without registering it with any tracker.

    Attaching with `multiprocessing.shared_memory.SharedMemory(name=...)` on Python
    < 3.13 registers the segment with this process's resource tracker, which would
    unlink it when this process exits, under its owner's feet.

    Example::

        mapping = attach_segment(name, writable=False)

    Raises:
        FileNotFoundError: no segment has that name (any more).
    """
    import _posixshmem

    flags = os.O_RDWR if writable else os.O_RDONLY
    fd = _posixshmem.shm_open("/" + name, flags, 0o600)
    try:
        size = os.fstat(fd).st_size
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(fd, size, prot=prot)
    finally:
        os.close(fd)
