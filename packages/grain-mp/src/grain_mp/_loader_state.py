"""The DataLoader's checkpoint format: small JSON bytes, checked on restore.

::

    {"version": 2, "next_step": 48, "worker_count": 2,
     "pipeline": {"next_index": 6, "grain_fingerprint": "SamplerSourceMapDataset(...) > ..."},
     "sampler": "IndexSampler(num_records=..., seed=0)",
     "data_source": "SharedMemoryDataSource(len=100, name='<segment>', bytes=...)",
     "data_source_len": 100, "shard_options": null}

`pipeline` is the state of the loader's Dataset pipeline (`get_state()` of its
iterator, see `grain_mp._loader_pipeline`); `next_step` is where its reading of
the sampler's steps stands (the steps before it are consumed), for people and
for the range check; `worker_count` is informational: a state restores with
any. The description fields (the *identity*) are compared on restore, so that
a state of another sampler, data source or sharding is refused instead of
silently read.

Version 1, written before the loader ran on the Dataset engine, is still read:
``{"version": 1, "next_step", "skip", "replay", "worker_count", identity...}``
means "start the parent side of the pipeline afresh at step `next_step`,
`skip` elements into it, and drop its first `replay` outputs".

Google's Grain writes a different state (``{"version": 2, "last_seen_indices":
{...}, "last_worker_index": ..., ...}``): per-worker record indices of *its*
sampler, whose shuffle differs from this library's, so that no position here
corresponds to it. Such a state is recognized and refused with that explanation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

import numpy as np

STATE_VERSION = 2
IDENTITY_KEYS = ("sampler", "data_source", "data_source_len", "shard_options")
# The integer fields of each version (version 2 adds the pipeline's state).
_POSITION_KEYS = {
    1: ("next_step", "skip", "replay", "worker_count"),
    2: ("next_step", "worker_count"),
}
_STATE_KEYS = {
    1: frozenset({"version", *_POSITION_KEYS[1], *IDENTITY_KEYS}),
    2: frozenset({"version", "pipeline", *_POSITION_KEYS[2], *IDENTITY_KEYS}),
}
# What only a state of Google's Grain (0.2.x, state version 2) has.
_GRAIN_KEYS = frozenset({"last_seen_indices", "last_worker_index"})
# The key of the pipeline's fingerprint in a Dataset iterator's state (docs/checkpointing.md).
_FINGERPRINT = "grain_fingerprint"
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


@dataclasses.dataclass(frozen=True)
class SavedPosition:
    """Where a state says to resume: `pipeline` (version 2), or version 1's fields."""

    next_step: int
    pipeline: dict[str, Any] | None = None
    skip: int = 0
    replay: int = 0


def encode_state(step: int, pipeline: dict[str, Any], worker_count: int, identity: dict) -> bytes:
    """The state bytes of a position (see the module docstring)."""
    state = {
        "version": STATE_VERSION,
        "next_step": step,
        "worker_count": worker_count,
        "pipeline": pipeline,
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


def decode_state(state: Any, identity: dict[str, Any], validate: bool) -> SavedPosition:
    """Where a state from `get_state` (either version) resumes, after checking it.

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
    version = state.get("version")
    if type(version) is not int or version not in _STATE_KEYS:
        if not {"sampler", "next_step"} <= set(state):
            version = STATE_VERSION  # not ours at all: the keys say so below
        else:
            raise ValueError(
                f"DataLoader state version {version!r} is not supported; this version "
                f"reads versions {sorted(_STATE_KEYS)}."
            )
    if set(state) != _STATE_KEYS[version]:
        raise ValueError(
            f"this is not a DataLoader state: expected the keys {sorted(_STATE_KEYS[version])}, "
            f"got {sorted(state)}. Pass what `get_state()` returned, unmodified."
        )
    for key in IDENTITY_KEYS if validate else ():
        if state[key] != identity[key]:
            # Grain's wording for a changed sampler, which clients match.
            grain = (
                "Sampler in checkpoint does not match dataloader sampler.\n"
                f"sampler in checkpoint: {state[key]}\nsampler in dataloader: {identity[key]}\n"
                "Grain uses `repr(sampler)` to validate the sampler, so you may need to "
                "implement a custom `__repr__`.\n"
                if key == "sampler"
                else ""
            )
            raise ValueError(
                f"{grain}This state was saved by a DataLoader whose {key} is {state[key]!r}, but "
                f"this DataLoader's {key} is {identity[key]!r}. A checkpoint only "
                "restores with the sampler, data source and shard options it was saved "
                "with (compared by their string representations; pass "
                "validate_state=False to DataLoaderIterator to skip this check)."
            )
    for key in _POSITION_KEYS[version]:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"state[{key!r}] must be an integer >= 0, got {value!r}.")
    if version == 1:
        return SavedPosition(state["next_step"], None, state["skip"], state["replay"])
    pipeline = state["pipeline"]
    if not isinstance(pipeline, dict) or not isinstance(pipeline.get(_FINGERPRINT), str):
        raise ValueError(
            "state['pipeline'] must be the pipeline's state, a dict with its "
            f"{_FINGERPRINT!r} (every version-2 state has one), got {pipeline!r:.300}."
        )
    return SavedPosition(state["next_step"], state["pipeline"])
