"""Turns what users pass as `paths` (a file, a list, a glob, ``name@N``) into files.

A sharded name ``data@4`` means ``data-00000-of-00004`` ... ``data-00003-of-00004``,
the names `write_array_record` and TFDS give shards. Globs are sorted so that a
pattern always means the same file order, hence the same global indices.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import Any

from grain_sources._checks import DirectoryNotFileError, NoSuchFileError, WrongTypeError

PathLike = str | os.PathLike[str]
_SHARDED = re.compile(r"^(?P<base>.+)@(?P<count>\d+)$")
_GLOB_CHARS = frozenset("*?[")


def shard_name(base: PathLike, index: int, count: int) -> str:
    """The file name of shard `index` of `count` (``base-00001-of-00004``)."""
    return f"{os.fspath(base)}-{index:05d}-of-{count:05d}"


def expand(paths: Any, argument: str = "paths") -> list[str]:
    """Returns the files `paths` names, in order; raises if any names nothing."""
    if isinstance(paths, str | os.PathLike):
        items: Sequence[Any] = [paths]
    elif isinstance(paths, bytes):
        raise WrongTypeError(f"`{argument}` must be a str path, not bytes: decode it first.")
    else:
        try:
            items = list(paths)
        except TypeError:
            raise WrongTypeError(
                "Unsupported path format was used. Path format must be a Sequence, String, "
                "pathlib.Path or FileInstruction. "
                f"`{argument}` must be a path, a glob pattern or a list of them, "
                f"got {type(paths).__name__}."
            ) from None
    if not items:
        raise ValueError(
            "Paths sequence can not be of 0 length. "
            f"`{argument}` is empty: pass at least one file or pattern."
        )
    files: list[str] = []
    for item in items:
        if not isinstance(item, str | os.PathLike):
            raise WrongTypeError(
                "All elements in a path sequence must be of type: String, pathlib.Path, or "
                f"FileInstruction. Each entry of `{argument}` must be a path (str or os.PathLike), "
                f"got {type(item).__name__} {item!r}."
            )
        files.extend(_expand_one(os.fspath(item)))
    return files


def _expand_one(pattern: str) -> list[str]:
    if os.path.isdir(pattern):
        raise DirectoryNotFileError(
            f"{pattern!r} is a directory, not a file: pass its files, e.g. a glob "
            f"like {os.path.join(pattern, '*.array_record')!r}."
        )
    if os.path.exists(pattern):
        return [pattern]
    sharded = _SHARDED.match(pattern)
    if sharded:
        count = int(sharded["count"])
        if count == 0:
            raise ValueError(f"the sharded pattern {pattern!r} names 0 shards: use name@N, N >= 1.")
        names = [shard_name(sharded["base"], i, count) for i in range(count)]
        missing = [name for name in names if not os.path.isfile(name)]
        if missing:
            raise NoSuchFileError(
                f"the sharded pattern {pattern!r} needs {count} files named "
                f"{shard_name(sharded['base'], 0, count)!r} ...; missing: {missing[:3]}."
            )
        return names
    if _GLOB_CHARS & set(pattern):
        matches = sorted(path for path in glob.glob(pattern) if not os.path.isdir(path))
        if not matches:
            raise NoSuchFileError(f"no file matches the pattern {pattern!r}.")
        return matches
    raise NoSuchFileError(
        f"open() failed: No such file or directory; opening {pattern}. "
        f"{pattern!r} does not exist: pass an existing file or a glob."
    )


def expand_urls(paths: list[Any], store: Any) -> list[str]:
    """`expand` for URLs: globs are listed through `store`, ``name@N`` names its shards.

    Existence is checked when each object is opened (one size request), not here.
    """
    files: list[str] = []
    for item in paths:
        if not isinstance(item, str | os.PathLike):
            raise WrongTypeError(
                f"`paths` must hold URL strings, got {type(item).__name__} {item!r}."
            )
        pattern = os.fspath(item)
        sharded = _SHARDED.match(pattern)
        if sharded:
            count = int(sharded["count"])
            if count < 1:
                raise ValueError(f"the sharded pattern {pattern!r} names 0 shards: use name@N.")
            files.extend(shard_name(sharded["base"], i, count) for i in range(count))
        elif _GLOB_CHARS & set(pattern.split("://", 1)[-1]):
            matches = store.glob(pattern)
            if not matches:
                raise NoSuchFileError(f"no object matches the pattern {pattern!r}.")
            files.extend(matches)
        else:
            files.append(pattern)
    if not files:
        raise ValueError("`paths` is empty: pass at least one URL.")
    return files
