"""The state of a round robin over N readers, shared by mp_prefetch and multithread_prefetch.

``{"next_worker": w, "parents": [state of reader i, ...]}`` (and
``"sequential_slice": 1`` when the readers read contiguous slices): whose turn
is next, and where each reader's own pipeline is. Both prefetchers write and
check it the same way, so a state of one restores the other.
"""

from __future__ import annotations

from typing import Any

from grain_dataset._state import check_state


def round_robin_state(next_worker: int, states: list[Any], sequential: bool) -> dict[str, Any]:
    """The state of a round robin at reader `next_worker` with its readers at `states`."""
    state: dict[str, Any] = {"next_worker": next_worker, "parents": list(states)}
    if sequential:
        state["sequential_slice"] = 1
    return state


def check_round_robin_state(
    state: Any, stage: str, count: int, state_type: type, sequential: bool, reader: str
) -> tuple[int, list[Any]]:
    """(next_worker, the readers' states) of `state`; raises naming what does not fit.

    `reader` names a reader in messages ("worker" or "thread").
    """
    keys: tuple[str, ...] = ("next_worker", "parents")
    if sequential:
        keys += ("sequential_slice",)
    check_state(state, stage, keys)
    parents = state["parents"]
    if not isinstance(parents, list) or len(parents) != count:
        raise ValueError(
            f"state {state!r} does not fit {stage}: it needs one entry per {reader} "
            f"({count}); a checkpoint taken with another number of {reader}s cannot be "
            "restored here."
        )
    if state["next_worker"] >= count:
        raise ValueError(f"state['next_worker'] of {stage} must be < {count}.")
    for index, entry in enumerate(parents):
        if type(entry) is not state_type:
            raise TypeError(
                f"state['parents'][{index}] of {stage} must be the state of {reader} "
                f"{index}'s pipeline, a {state_type.__name__} from get_state(), "
                f"got {type(entry).__name__}; the state is corrupt or from another pipeline."
            )
    return state["next_worker"], list(parents)
