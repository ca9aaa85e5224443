"""One JSON file per process holding an iterator's state: its name, its text, its checks.

Why a module of its own: the file layout is shared by two writers that must
agree byte for byte, `DatasetIterator.save/load` here (which may not import jax
or orbax) and the Orbax `CheckpointHandler` in grain_jax. Keeping the naming
and the checks in one place means a checkpoint written by one is read by the
other.

Layout: a checkpoint directory holds ``process_<i>-of-<n>.json`` for each of
the n processes that saved it (the process index i and count n come from
jax when it runs multi-host; otherwise 0 and 1). The file is JSON:

    {"grain_py_state_format": 1, "state": <the iterator's state>,
     "grain_fingerprint": "range(0:100:1) > shuffle(#1a2b3c4d) > to_iter"}

where the state is a `DatasetIterator` state (a dict, in Grain's shapes) or a
DataLoader state (its JSON bytes, parsed), and the fingerprint names the
pipeline that saved it (`grain_dataset._runtime._fingerprint`; absent for iterators that
do not know their dataset). Reading the file hands the fingerprint to
`set_state` with the state, which refuses a checkpoint of another pipeline.
Files of earlier versions (the fingerprint inside the state) read the same.

The marker is what tells our checkpoints from those of Google's Grain, which
use the same file names and put the bare state in them. Where the pipeline
has no stage whose order differs from Grain's (no shuffle, seed or mixture:
`_same_order_as_grain`), such a file restores: the state means the same
element in both. Otherwise it is refused with a ValueError that says why (the
same seed gives a different element order there, so it would resume at
another element).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
from collections.abc import Awaitable, Coroutine, Generator, Iterable
from typing import Any, Protocol

from grain_dataset._common._contract import IteratorTraits, StageTraits
from grain_dataset._runtime import _fingerprint

_FILE_PATTERN = re.compile(r"process_(\d+)-of-(\d+)\.json")

FORMAT_KEY = "grain_py_state_format"
FORMAT_VERSION = 1


def process_index_and_count() -> tuple[int, int]:
    """(jax.process_index(), jax.process_count()) if jax is already imported, else (0, 1).

    jax is never imported here: a program that has not imported it cannot be
    running multi-host JAX.
    """
    jax = sys.modules.get("jax")
    if jax is None:
        return 0, 1
    return int(jax.process_index()), int(jax.process_count())


class Checkpointable(Protocol):
    """What a state file is written from and read into: an iterator with a state
    (a DatasetIterator, the DataLoader's, Grain's CheckpointableIterator)."""

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


class PathOfALibrary(Protocol):
    """A directory path object of another library (etils' epath.Path, for cloud
    storage): the methods the state files use, which it is kept for."""

    def __truediv__(self, name: str) -> Any: ...

    def exists(self) -> bool: ...

    def read_text(self) -> str: ...

    def write_text(self, text: str) -> Any: ...

    def iterdir(self) -> Iterable[Any]: ...


class AwaitingCreation(Protocol):
    """Orbax's PathAwaitingCreation: a directory that another task is creating."""

    async def await_creation(self) -> Any: ...


Directory = str | os.PathLike[str] | PathOfALibrary
"""Where state files go: a path, or a path object of another library."""


def state_file_name(process_index: int, process_count: int) -> str:
    """The file name of process `process_index` out of `process_count`."""
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"`process_index` must be in [0, process_count) = [0, {process_count}), "
            f"got {process_index}."
        )
    return f"process_{process_index}-of-{process_count}.json"


def as_path(directory: Any) -> Any:
    """`directory` as a path object: a pathlib.Path, or an etils epath.Path as given.

    Objects that already behave like a path (``/``, ``exists``, ``read_text``,
    ``write_text``, ``iterdir``) are kept, so cloud paths keep working.
    """
    needed = ("__truediv__", "exists", "read_text", "write_text", "iterdir")
    if all(hasattr(directory, name) for name in needed):
        return directory
    if isinstance(directory, str | os.PathLike):
        return pathlib.Path(directory)
    raise TypeError(
        f"`directory` must be a path (str, os.PathLike or epath.Path), got "
        f"{type(directory).__name__}."
    )


def state_to_text(state: object, owner: Checkpointable) -> str:
    """The file text of `state` as `owner.get_state()` returned it (a dict, or JSON bytes/str)."""
    if isinstance(state, bytes | bytearray | str):
        try:
            state = json.loads(state)
        except ValueError as error:
            raise TypeError(
                f"the state of {type(owner).__name__} is bytes or str but not JSON ({error}): "
                "get_state() must return a dict of ints, strings, lists and dicts, or JSON bytes."
            ) from None
    envelope: dict[str, Any] = {FORMAT_KEY: FORMAT_VERSION, "state": state}
    pipeline = _fingerprint.of_iterator(owner)
    if pipeline is not None and isinstance(state, dict):
        envelope[_fingerprint.KEY] = pipeline
    try:
        return json.dumps(envelope, indent=4)
    except TypeError as error:
        raise TypeError(
            f"the state of {type(owner).__name__} is not JSON-serializable ({error}): "
            "get_state() must return a dict of ints, strings, lists and dicts, or JSON bytes."
        ) from None


def _foreign(path: Any, saved: Any) -> ValueError:
    looks_like = (
        "a DataLoader checkpoint of Google's Grain"
        if isinstance(saved, dict) and "last_seen_indices" in saved
        else "a checkpoint of Google's Grain (or of this library before the marker existed)"
    )
    return ValueError(
        f"the iterator state in {path} has no {FORMAT_KEY!r} marker: it looks like "
        f"{looks_like}. It cannot be resumed here: the same seed gives a different element "
        "order in Grain than in this library, so it would continue at another element. Start "
        "the data pipeline afresh. (If you know this library wrote the file, for this same "
        "pipeline, pass json.loads(its text) to iterator.set_state() yourself.)"
    )


def text_to_state(text: str, owner: Any, path: Any) -> Any:
    """The state in file text `text`, in the form `owner.get_state()` uses (bytes, str, dict).

    Raises:
      ValueError: `text` is not JSON, lacks our format marker (a checkpoint of
        Google's Grain), or was written by a newer format version.
    """
    try:
        saved = json.loads(text)
    except ValueError as error:
        raise ValueError(f"the iterator state in {path} is not valid JSON: {error}.") from None
    if not isinstance(saved, dict) or FORMAT_KEY not in saved:
        if isinstance(saved, dict) and _same_order_as_grain(owner):
            # A bare state of Google's Grain, for a pipeline whose order is Grain's.
            return saved
        raise _foreign(path, saved)
    version = saved[FORMAT_KEY]
    if version != FORMAT_VERSION or "state" not in saved:
        raise ValueError(
            f"the iterator state in {path} has format {version!r}, which this version of "
            f"the library does not read (it reads {FORMAT_VERSION}): it was written by "
            "another version. Restore it with the version that saved it."
        )
    state = saved["state"]
    pipeline = saved.get(_fingerprint.KEY)
    if isinstance(state, dict) and _fingerprint.KEY not in state:
        if pipeline is not None:
            state = {**state, _fingerprint.KEY: pipeline}
        elif _fingerprint.of_iterator(owner) is not None:
            _fingerprint.warn_unverified(owner)
    current = owner.get_state()
    if isinstance(current, bytes | bytearray):
        return json.dumps(state, indent=4).encode("utf-8")
    if isinstance(current, str):
        return json.dumps(state, indent=4)
    return state


def _same_order_as_grain(owner: Any) -> bool:
    """Whether `owner`'s pipeline yields Grain's elements in Grain's order at every state."""
    dataset = _fingerprint.remembered_dataset(owner)
    if dataset is None:
        return False
    seen: set[int] = set()
    pending = [dataset]
    while pending:
        stage = pending.pop()
        if id(stage) in seen:
            continue
        seen.add(id(stage))
        if isinstance(stage, StageTraits):
            if not stage._order_as_grain:
                return False
            pending.extend(stage._parents)
    return True


def _saved_process_counts(directory: Any) -> set[int]:
    counts = set()
    if directory.exists():
        for child in directory.iterdir():
            match = _FILE_PATTERN.fullmatch(child.name)
            if match:
                counts.add(int(match.group(2)))
    return counts


def state_file(directory: Any, process_index: int, process_count: int) -> Any:
    """The path of this process's existing state file in `directory`.

    Raises:
      ValueError: the checkpoint was written by another number of processes.
      FileNotFoundError: `directory` holds no state file for this process.
    """
    directory = as_path(directory)
    path = directory / state_file_name(process_index, process_count)
    if path.exists():
        return path
    counts = sorted(_saved_process_counts(directory) - {process_count})
    if counts:
        written = " or ".join(str(count) for count in counts)
        raise ValueError(
            f"cannot restore the iterator from {directory}: the checkpoint was written by "
            f"{written} processes, this run has {process_count} (no {path.name}). Restore "
            "with the process count it was saved with, or start the data pipeline afresh."
        )
    raise FileNotFoundError(
        f"no iterator state {path.name} in {directory}: it is not a checkpoint of a data "
        "iterator (or it was not saved by this process)."
    )


def _all_process_states(directory: Any, owner: Any) -> tuple[Any, list[Any]]:
    """(the directory, the states of all processes that saved it, in process order).

    For iterators that restore on another process count from all old shards'
    states (`IteratorTraits._restores_from_all_shards`): the checkpoint must hold
    the files of one process count, all of them.
    """
    directory = as_path(directory)
    counts = sorted(_saved_process_counts(directory))
    if len(counts) != 1:
        raise (FileNotFoundError if not counts else ValueError)(
            f"cannot restore {type(owner).__name__} from {directory}: it holds "
            + ("no iterator state files" if not counts else f"states of {counts} processes")
            + "; restoring on another process count reads the files of all processes of one "
            "checkpoint."
        )
    states = []
    for index in range(counts[0]):
        path = directory / state_file_name(index, counts[0])
        if not path.exists():
            raise FileNotFoundError(
                f"cannot restore {type(owner).__name__} from {directory} on another process "
                f"count: {path.name} is missing, and every old process's state is needed."
            )
        states.append(text_to_state(path.read_text(), owner, path))
    return directory, states


def write_state(directory: Directory, text: str, process: tuple[int, int]) -> Any:
    """Writes `text` (from `state_to_text`) as the state file of `process`; returns its path."""
    path = as_path(directory) / state_file_name(*process)
    path.write_text(text)
    return path


def read_state_into(directory: Directory, owner: Checkpointable, process: tuple[int, int]) -> Any:
    """Reads the state file of `process` from `directory` and sets it on `owner`.

    Returns the file's path. A state that `owner.set_state` refuses (the
    checkpoint of a pipeline of another shape) raises a ValueError naming the
    file and what did not fit.
    """
    if (
        isinstance(owner, IteratorTraits)
        and owner._restores_from_all_shards
        and not (as_path(directory) / state_file_name(*process)).exists()
    ):
        path, state = _all_process_states(directory, owner)
    else:
        path = state_file(directory, *process)
        state = text_to_state(path.read_text(), owner, path)
    try:
        owner.set_state(state)
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(
            f"the iterator state in {path} does not fit this {type(owner).__name__}: "
            f"{error} The checkpoint was saved from another pipeline; restore it into the "
            "pipeline that saved it."
        ) from error
    return path


class _Finished:
    """An awaitable that is already complete.

    Orbax's two-phase protocol awaits `save()` (the blocking part) and then
    awaits what it returned (the background part). Our state is written in the
    first phase, so the second has nothing left to do; unlike a coroutine
    object, this one may also be dropped without a "never awaited" warning.
    """

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # A generator function: the await finishes at once, with None.


def save_coroutine(
    owner: Checkpointable, directory: Directory | AwaitingCreation
) -> Coroutine[Any, Any, Awaitable[None]]:
    """Takes `owner`'s state now and returns the coroutine that writes it into `directory`."""
    text = state_to_text(owner.get_state(), owner)
    process = process_index_and_count()

    async def save() -> Awaitable[None]:
        path = directory
        if hasattr(path, "await_creation"):
            path = await path.await_creation()
        path = as_path(path)
        if not path.exists():
            path.mkdir(parents=True, exist_ok=True)
        write_state(path, text, process)
        return _Finished()

    return save()


def load_coroutine(
    owner: Checkpointable, directory: Directory
) -> Coroutine[Any, Any, Awaitable[None]]:
    """Returns the coroutine that reads this process's state from `directory` into `owner`."""

    async def load() -> Awaitable[None]:
        read_state_into(directory, owner, process_index_and_count())
        return _Finished()

    return load()
