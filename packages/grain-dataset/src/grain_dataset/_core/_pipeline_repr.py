"""`str(ds)`: the chain of stages from the source to the output, one line each.

A stage with several parents (a mix, a zip) lists each parent's chain indented
under a numbered branch, then continues with itself:

    MixedMapDataset(weights=[0.7, 0.3])
      branch 0:
        RangeMapDataset(start=0, stop=10, step=1)
        ShuffleMapDataset(seed=...)
      branch 1:
        RangeMapDataset(start=10, stop=20, step=1)
    MapMapDataset(fn)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _one_line(stage: Any) -> str:
    try:
        text = repr(stage)
    except Exception as error:  # a user's stage must not break the description
        text = f"{type(stage).__name__}(<repr failed: {type(error).__name__}>)"
    return " ".join(text.split())


def chain_lines(dataset: Any, indent: str = "") -> list[str]:
    """The lines describing `dataset`'s pipeline, source first."""
    lines: list[str] = []
    stage = dataset
    chain = []
    # Walk up the single-parent chain iteratively: pipelines can be long.
    while True:
        chain.append(stage)
        parents: Sequence[Any] = getattr(stage, "_parents", ())
        if len(parents) != 1:
            break
        stage = parents[0]
    top = chain[-1]
    parents = getattr(top, "_parents", ())
    if len(parents) > 1:
        for number, parent in enumerate(parents):
            lines.append(f"{indent}  branch {number}:")
            lines.extend(chain_lines(parent, indent + "    "))
    lines.extend(f"{indent}{_one_line(stage)}" for stage in reversed(chain))
    return lines


def describe(dataset: Any) -> str:
    """The pipeline of `dataset` as text, one stage per line from source to output."""
    return "\n".join(chain_lines(dataset))
