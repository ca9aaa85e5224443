"""What every benchmark that `compare.py` runs under both implementations shares.

Imported by the benchmark scripts from their own directory (a script's
directory is first on sys.path), so it works in the throwaway upstream venv too.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterable
from typing import TextIO


def implementation() -> str:
    """Which `grain` this is: ours has the `grain_dataset` layer, upstream has `grain._src`."""
    if importlib.util.find_spec("grain_dataset") is not None:
        return "ours"
    if importlib.util.find_spec("grain._src") is not None:
        return "upstream"
    return "unknown"


def grain_version() -> str:
    # The distribution behind `import grain`: ours is `grainline`, upstream's is `grain`.
    distribution = "grainline" if implementation() == "ours" else "grain"
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def parse_case_sizes(text: str, cases: Iterable[str]) -> dict[str, int]:
    """``--case-size CASE=N[,CASE=N]`` as a dict; an unknown case or a bad N exits."""
    known = list(cases)
    sizes = {}
    for item in filter(None, text.split(",")):
        name, _, size = item.partition("=")
        if name not in known or not size.isdigit():
            raise SystemExit(f"--case-size: expected CASE=N with CASE in {known}: {item!r}")
        sizes[name] = int(size)
    return sizes


def checked_cases(
    parser: argparse.ArgumentParser, args: argparse.Namespace, cases: Iterable[str]
) -> list[str]:
    """The ``--cases`` names, after checking them and ``--repeats``/``--size`` (exits if bad)."""
    known = list(cases)
    names = [name for name in args.cases.split(",") if name]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        parser.error(f"--cases: unknown {unknown}; choose from {known}")
    if args.repeats < 1 or args.size < 1:
        parser.error("--repeats and --size must be positive")
    return names


def json_stdout() -> TextIO:
    """Keep the real stdout for JSON lines and point fd 1 (and so print) at stderr."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return out
