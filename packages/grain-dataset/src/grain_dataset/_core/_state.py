"""Checks for iterator states, so a wrong state fails loudly instead of resuming elsewhere."""

from __future__ import annotations

from typing import Any

from grain_dataset._common._errors import OutOfRangeError


def check_state(
    state: Any,
    stage: str,
    fields: tuple[str, ...],
    flags: tuple[str, ...] = (),
    nested: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Returns `state` after checking it is a dict with exactly `fields`.

    The fields in `flags` must be bools; those in `nested` (and "parent",
    "parents") hold parents' states, which the parents check; the others must
    be ints >= 0.
    """
    if not isinstance(state, dict):
        raise TypeError(
            f"the state of {stage} must be a dict from get_state(), got {type(state).__name__}."
        )
    if set(state) != set(fields):
        missing = sorted(set(fields) - set(state))
        extra = sorted(set(state) - set(fields))
        raise ValueError(
            f"this state does not belong to {stage}: expected the keys {sorted(fields)}"
            + (f", missing {missing}" if missing else "")
            + (f", unexpected {extra}" if extra else "")
            + ". Restore a state saved from the same pipeline, unmodified (a state saved by "
            "Google's Grain does not restore here: its element orders differ)."
        )
    for field in fields:
        if field in ("parent", "parents") or field in nested:
            continue
        value = state[field]
        if field in flags:
            if not isinstance(value, bool):
                raise ValueError(
                    f"state[{field!r}] of {stage} must be a bool, got {value!r}; "
                    "the state is corrupt or from another pipeline."
                )
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            error = OutOfRangeError if isinstance(value, int) and value < 0 else ValueError
            # Grain's wording for a negative position, which clients match.
            grain = (
                f"Checkpoint `next_index` {value} is out of range. "
                if field == "next_index" and error is OutOfRangeError
                else ""
            )
            raise error(
                f"{grain}state[{field!r}] of {stage} must be an integer >= 0, got {value!r}; "
                "the state is corrupt or from another pipeline."
            )
    return state


def check_parents_state(state: dict[str, Any], stage: str, count: int) -> list[Any]:
    """Returns state["parents"] after checking it lists one state per parent."""
    parents = state["parents"]
    if not isinstance(parents, list | tuple) or len(parents) != count:
        raise ValueError(
            f"state['parents'] of {stage} must list {count} parent states, got {parents!r}; "
            "the state is from a pipeline with a different number of components."
        )
    return list(parents)


def renamed_keys(state: Any, old_to_new: dict[str, str]) -> Any:
    """`state` with the keys an earlier version wrote renamed to the current (Grain's) ones.

    Checkpoints of versions before the state shapes followed Grain's use other
    key names for the same positions; a dict holding exactly the old names (and
    none of the new) is renamed, anything else is returned unchanged for the
    stage's own check to judge.
    """
    if not isinstance(state, dict) or not set(old_to_new) <= set(state):
        return state
    if set(old_to_new.values()) & set(state):
        return state
    return {old_to_new.get(key, key): value for key, value in state.items()}
