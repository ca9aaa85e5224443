"""The DataLoader's checkpoint format: small JSON bytes, checked on restore.

::

    {"version": 1, "next_step": 48, "skip": 0, "replay": 0, "worker_count": 2,
     "sampler": "IndexSampler(num_records=..., seed=0)",
     "data_source": "SharedMemoryDataSource(len=100, name='<segment>', bytes=...)",
     "data_source_len": 100, "shard_options": null}

`next_step` is where reading resumes (the loader steps before it are consumed),
`skip` how many elements of that resumption point were already returned, and
`replay` how many outputs to recompute and drop (see `grain_mp._tail`). The
description fields (the *identity*) are compared on restore, so that a state of
another sampler, data source or sharding is refused instead of silently read.

Google's Grain writes a different state (``{"version": 2, "last_seen_indices":
{...}, "last_worker_index": ..., ...}``): per-worker record indices of *its*
sampler, whose shuffle differs from this library's, so that no position here
corresponds to it. Such a state is recognized and refused with that explanation.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import numpy as np

STATE_VERSION = 1
IDENTITY_KEYS = ("sampler", "data_source", "data_source_len", "shard_options")
_POSITION_KEYS = ("next_step", "skip", "replay", "worker_count")
_STATE_KEYS = frozenset({"version", *_POSITION_KEYS, *IDENTITY_KEYS})
# What only a state of Google's Grain (0.2.x, state version 2) has.
_GRAIN_KEYS = frozenset({"last_seen_indices", "last_worker_index"})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SEGMENT = re.compile(r"'psm_[0-9a-fA-F]+'")
_MAX_DESCRIPTION = 1000


def describe_for_checkpoint(obj: Any) -> str:
    """A description of `obj` that is equal for equal objects across processes and runs.

    Built-in containers are described by type and length (their repr is the
    whole data); memory addresses and generated shared-memory segment names are
    masked; a very long repr is cut and completed with its hash.

    Example::

        describe_for_checkpoint(list(range(10**6)))  # 'list(len=1000000)'
    """
    if isinstance(obj, list | tuple | dict | np.ndarray):
        return f"{type(obj).__name__}(len={len(obj)})"
    try:
        text = repr(obj)
    except Exception:  # a user's broken repr must not break checkpointing
        text = f"{type(obj).__module__}.{type(obj).__qualname__}"
    text = _SEGMENT.sub("'<segment>'", _ADDRESS.sub(" at 0x...", text))
    if len(text) > _MAX_DESCRIPTION:
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        text = f"{text[:200]}... ({len(text)} characters, sha256 {digest})"
    return text


def encode_state(step: int, skip: int, replay: int, worker_count: int, identity: dict) -> bytes:
    """The state bytes of a position (see the module docstring)."""
    state = {
        "version": STATE_VERSION,
        "next_step": step,
        "skip": skip,
        "replay": replay,
        "worker_count": worker_count,
        **identity,
    }
    return json.dumps(state, indent=4).encode()


def _refuse_grain_state(state: dict[str, Any]) -> None:
    raise ValueError(
        "this is a DataLoader state written by Google's Grain (state version "
        f"{state.get('version')!r}, with 'last_seen_indices' "
        f"{state.get('last_seen_indices')!r}), not by this library. It cannot be resumed "
        "here: the two libraries produce the elements in different orders (their samplers "
        "shuffle differently, and Grain's state counts positions per worker), so no "
        "position here continues that run. Start this DataLoader from the beginning, or "
        "resume from a checkpoint this library wrote."
    )


def decode_state(state: Any, identity: dict[str, Any], validate: bool) -> tuple[int, int, int]:
    """``(next_step, skip, replay)`` of a state from `get_state`, after checking it.

    With `validate`, the state's identity must equal `identity` (this loader's).
    """
    if isinstance(state, bytes | bytearray | str):
        try:
            state = json.loads(state)
        except ValueError as error:
            raise ValueError(
                f"this is not a DataLoader state (invalid JSON: {error}); pass what "
                "`get_state()` returned."
            ) from None
    if not isinstance(state, dict):
        raise TypeError(
            "a DataLoader state must be the bytes `get_state()` returned (or its JSON "
            f"decoded to a dict), got {type(state).__name__}."
        )
    if _GRAIN_KEYS & set(state):
        _refuse_grain_state(state)
    if set(state) != _STATE_KEYS:
        raise ValueError(
            f"this is not a DataLoader state: expected the keys {sorted(_STATE_KEYS)}, "
            f"got {sorted(state)}. Pass what `get_state()` returned, unmodified."
        )
    if type(state["version"]) is not int or state["version"] != STATE_VERSION:
        raise ValueError(
            f"DataLoader state version {state['version']!r} is not supported; this "
            f"version reads version {STATE_VERSION}."
        )
    for key in IDENTITY_KEYS if validate else ():
        if state[key] != identity[key]:
            raise ValueError(
                f"this state was saved by a DataLoader whose {key} is {state[key]!r}, but "
                f"this DataLoader's {key} is {identity[key]!r}. A checkpoint only "
                "restores with the sampler, data source and shard options it was saved "
                "with (compared by their string representations; pass "
                "validate_state=False to DataLoaderIterator to skip this check)."
            )
    for key in _POSITION_KEYS:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"state[{key!r}] must be an integer >= 0, got {value!r}.")
    return state["next_step"], state["skip"], state["replay"]
