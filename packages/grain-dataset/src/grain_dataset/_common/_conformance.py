"""`assert_equal_output_after_checkpoint`: the checkpoint contract, checked for any dataset.

One run records every element and the state before it. Then, for every step k,
a fresh iterator restored to state k must produce exactly elements k, k+1, ...
to the end; the same iterator restored backwards must too. States must
survive a JSON round trip and keep one shape (keys, nesting and types) for the
whole run, as checkpointing frameworks expect.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def _shape(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _shape(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [_shape(value) for value in state]
    return type(state).__name__


def _differs(a: Any, b: Any, path: str = "element") -> str | None:
    """A description of the first difference between a and b, or None if equal."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return f"{path}: {a!r} != {b!r}"
        for key in a:
            found = _differs(a[key], b[key], f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _differs(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if (
            a.dtype != b.dtype
            or a.shape != b.shape
            or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
        ):
            return f"{path}: {a!r} != {b!r}"
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {a!r} != {b!r}"
    return None


def _run(iterator: Any, limit: int) -> tuple[list[Any], list[Any], bool]:
    """Up to `limit` elements, the states before each and after the last, and whether it ended."""
    elements, states = [], [iterator.get_state()]
    for _ in range(limit):
        try:
            elements.append(next(iterator))
        except StopIteration:
            return elements, states, True
        states.append(iterator.get_state())
    return elements, states, False


def _check_end(iterator: Any, ended: bool, step: int, how: str) -> None:
    if not ended:
        return
    try:
        extra = next(iterator)
    except StopIteration:
        return
    raise AssertionError(
        f"after restoring the state of step {step} into {how}, the iterator went on past "
        f"the end of the original run with {extra!r}."
    )


def _compare(expected: Sequence[Any], actual: Sequence[Any], step: int, how: str) -> None:
    if len(actual) != len(expected):
        raise AssertionError(
            f"after restoring the state of step {step} into {how}, the iterator produced "
            f"{len(actual)} elements, expected {len(expected)}."
        )
    for offset, (want, got) in enumerate(zip(expected, actual, strict=True)):
        found = _differs(want, got)
        if found:
            raise AssertionError(
                f"after restoring the state of step {step} into {how}, element "
                f"{step + offset} differs: {found}"
            )


def assert_equal_output_after_checkpoint(
    ds: Iterable[Any], *, max_steps: int = 200, steps: Iterable[int] | None = None
) -> None:
    """Asserts that every state of `ds`'s iterator restores exactly.

    Args:
      ds: a MapDataset or IterDataset (anything whose iterator has
        get_state/set_state).
      max_steps: the run is cut after this many elements.
      steps: which steps to restore at; by default every step 0..n, where n is
        the number of elements produced (n is the end of the run).

    Raises AssertionError naming the first step and element that differ.
    """
    iterator = iter(ds)
    elements, states, ended = _run(iterator, max_steps)
    first_shape = _shape(states[0])
    for step, state in enumerate(states):
        try:
            text = json.dumps(state)
        except TypeError as error:
            raise AssertionError(
                f"the state of step {step} is not JSON-serializable: {error}"
            ) from None
        if _shape(state) != first_shape:
            raise AssertionError(
                f"the state of step {step} has the shape {_shape(state)}, but step 0 had "
                f"{first_shape}; states must keep one shape."
            )
        states[step] = json.loads(text)
    chosen = list(range(len(states)) if steps is None else steps)
    for step in chosen:
        if not 0 <= step < len(states):
            raise ValueError(f"`steps` must be in [0, {len(states) - 1}], got {step}.")
        fresh = iter(ds)
        _check_restore(fresh, states[step], elements, step, ended, "a fresh iterator")
        _close(fresh)
    # Restoring backwards into the iterator that produced the run.
    for step in sorted(set(chosen), reverse=True)[:3]:
        _check_restore(iterator, states[step], elements, step, ended, "the original iterator")
    _close(iterator)


def _check_restore(
    iterator: Any, state: Any, elements: list[Any], step: int, ended: bool, how: str
) -> None:
    """Restores `state` of `step` into `iterator` and compares the rest of the run."""
    iterator.set_state(state)
    rest = _run(iterator, len(elements) - step)[0]
    _compare(elements[step:], rest, step, how)
    _check_end(iterator, ended, step, how)


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close:
        close()
