"""The DataLoader's checkpoint format: Grain's keys with Grain's meaning, and ours beside them.

::

    {"version": 2,                                  # Grain's keys ...
     "last_seen_indices": {"0": 17, "1": 14},
     "last_worker_index": 0,
     "worker_count": 2,
     "sampler": "IndexSampler(num_records=..., seed=0)",
     "data_source": "RangeDataSource(start=0, stop=100, step=1)",
     "format": 3,                                   # ... and this library's
     "pipeline": {"next_index": 6},
     "fingerprint": "SamplerSourceMapDataset(len=200) > batch(3,False) > to_iter",
     "data_source_len": 100, "shard_options": null}

Grain's keys, as Grain means them (clients such as AirIO read and edit them):
`worker_count` is the loader's; `last_seen_indices[str(w)]` is the last sampler
index that worker w read among the outputs consumed so far (worker "0" alone
with no workers), and ``last_worker_index + 1`` is the worker whose output comes
next; before any output worker w's entry is ``shard_index + (w - n) *
shard_count`` (n = max(worker_count, 1)), one round before its first index, and
`last_worker_index` is -1. A sampler index is ``shard_index + step *
shard_count``: the loader's shard, else the sampler's own (as Grain's loader
counts them), so an unsharded loader's indices are its steps.

This library's workers read *units* of positions round robin (unit u is
``steps_per_unit`` consecutive steps: a batch formed in the workers, a chunk,
else one step; `grain_mp._operations`): unit u goes to worker ``u % n``. So
after u units, worker w's entry is the last step of its last unit before u, and
``last_worker_index`` is ``u % n - 1``. The position is therefore u, whatever
wrote the keys: `set_state` reads it back from them, and an edited
`last_seen_indices` (AirIO sets ``["0"] = k`` to skip k + 1 records) moves the
loader there, where the edit names the end of a unit and agrees across workers.

Ours, beside them: `pipeline` is the state of the loader's Dataset pipeline
(`grain_mp._loader_pipeline`) without its fingerprint; it says what the keys
cannot (a batch formed in this process after a filter, a flat map's outputs
half handed on). Its position is the keys' one unless a client edited the
keys; then, where the pipeline holds nothing beyond the position (no stage runs
in this process), the keys win, else the state is refused. `fingerprint`,
`data_source_len` and `shard_options` (with `sampler` and `data_source`, our
masked descriptions) make a state of another pipeline, sampler, source or shard
refused instead of silently read; `format` marks the layout (3).

The state does not depend on worker_count beyond Grain's keys: a state saved
with W workers restores with V, because this loader's outputs are the same for
every worker count (docs/data_loader.md).

Older states still restore: format 2 (``{"version": 2, "next_step",
"worker_count", "pipeline" (with "grain_fingerprint"), identity...}``) and
version 1 (``{"version": 1, "next_step", "skip", "replay", "worker_count",
identity...}``: "start the parent side afresh at step `next_step`, `skip`
elements into it, and drop its first `replay` outputs").

A state that Google's Grain wrote (Grain's keys only) restores where Grain's
order is this loader's: no shuffle or random map (Grain's seeded order is its
own), no sharding, no operation that runs in this process, and, from a Grain
loader with two or more workers, one step per unit and no filter (Grain's
workers batch their own records). Elsewhere it is refused, saying why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from grain_dataset.extension import OutOfRangeError

FORMAT = 3
GRAIN_VERSION = 2
IDENTITY_KEYS = ("sampler", "data_source", "data_source_len", "shard_options")
GRAIN_KEYS = frozenset(
    {"version", "last_seen_indices", "last_worker_index", "worker_count", "sampler", "data_source"}
)
_STATE_KEYS = GRAIN_KEYS | {"format", "pipeline", "fingerprint", "data_source_len", "shard_options"}
# The integer fields of the older formats (version 2 adds the pipeline's state).
_OLD_POSITION_KEYS = {
    1: ("next_step", "skip", "replay", "worker_count"),
    2: ("next_step", "worker_count"),
}
_OLD_STATE_KEYS = {
    1: frozenset({"version", *_OLD_POSITION_KEYS[1], *IDENTITY_KEYS}),
    2: frozenset({"version", "pipeline", *_OLD_POSITION_KEYS[2], *IDENTITY_KEYS}),
}
# The key of the pipeline's fingerprint in a Dataset iterator's state (format 2 kept it there).
FINGERPRINT_KEY = "grain_fingerprint"
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


def _describe_like_grain(obj: Any) -> str:
    """The `data_source` of a state: Grain's (the type of a built-in container), else ours."""
    if isinstance(obj, list | tuple | dict | np.ndarray):
        return str(type(obj))  # the length is `data_source_len`
    return describe_for_checkpoint(obj)


def loader_identity(
    sampler: Any, data_source: Any, num_records: int, shard: Any, grain_form: bool = True
) -> dict[str, Any]:
    """What a state records of its loader, compared on restore (format 3; formats 1 and 2
    described a built-in container as ``list(len=n)``: `grain_form` False)."""
    describe = _describe_like_grain if grain_form else describe_for_checkpoint
    return {
        "sampler": describe_for_checkpoint(sampler),
        "data_source": describe(data_source),
        "data_source_len": num_records,
        "shard_options": None if shard is None else repr(shard),
    }


def grain_descriptions(obj: Any) -> set[str]:
    """How Grain's DataLoader may have described `obj` in a state, and how we do."""
    forms = {describe_for_checkpoint(obj)}
    if isinstance(obj, list | tuple | dict | np.ndarray):
        forms.add(str(type(obj)))
    else:
        with contextlib.suppress(Exception):  # a broken repr only means one form fewer
            forms.add(repr(obj))
    return forms


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a loader's positions read as Grain's keys (see the module docstring).

    Attributes:
      steps_per_unit: the steps one unit spans.
      length: the loader's steps (`INFINITE` when the sampler never ends).
      shard_index, shard_count: a step's sampler index is
        ``shard_index + step * shard_count``.
    """

    steps_per_unit: int
    length: int
    shard_index: int = 0
    shard_count: int = 1

    def index(self, step: int) -> int:
        return self.shard_index + step * self.shard_count

    def grain_keys(self, units: int, worker_count: int) -> tuple[dict[str, int], int]:
        """(`last_seen_indices`, `last_worker_index`) after `units` units with that many workers."""
        workers = max(worker_count, 1)
        spu = self.steps_per_unit
        seen = {}
        for worker in range(workers):  # one entry per worker, as Grain writes them
            last_unit = units - 1 - (units - 1 - worker) % workers
            if last_unit < 0:
                step = worker - workers  # Grain's fresh entry: a round before its first
            else:
                step = min(last_unit * spu + spu - 1, self.length - 1)
            seen[str(worker)] = self.index(step)
        return seen, units % workers - 1

    def units_of(self, state: dict[str, Any]) -> int:
        """The units consumed according to `state`'s Grain keys; ValueError if they name none."""
        workers = state["worker_count"]
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"state['worker_count'] must be an int >= 0, got {workers!r}.")
        seen = state["last_seen_indices"]
        count = max(workers, 1)
        # The length first: a corrupt worker_count must not build a huge set.
        if (
            not isinstance(seen, dict)
            or len(seen) != count
            or {str(key) for key in seen} != {str(w) for w in range(count)}
        ):
            raise ValueError(
                "state['last_seen_indices'] must map each worker '0' ... "
                f"'{count - 1}' (worker_count={workers}) to the last sampler index it read, "
                f"got {seen!r:.300}."
            )
        last = state["last_worker_index"]
        values = {str(key): value for key, value in seen.items()}
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (last, *values.values())):
            raise ValueError(
                "state['last_seen_indices'] values and state['last_worker_index'] must be "
                f"ints, got {seen!r:.300} and {last!r}."
            )
        # The worker that read the largest index read the last unit consumed.
        largest = max(values.values())
        step = (largest - self.shard_index) // self.shard_count
        if step >= self.length:
            raise OutOfRangeError(
                f"state['last_seen_indices'] names sampler index {largest}, past the end of "
                f"this DataLoader ({self.length} steps): the state belongs to another "
                "DataLoader."
            )
        units = 0 if step < 0 else step // self.steps_per_unit + 1
        expected = self.grain_keys(units, workers)
        if (values, last) != expected:
            raise ValueError(
                f"state['last_seen_indices'] {seen!r:.300} with last_worker_index {last} is "
                f"no position of this DataLoader: after {units} of its units (batches, or "
                f"steps when it batches nowhere) read by {workers} workers they are "
                f"{expected[0]!r:.300} and {expected[1]}. An edited state must name the last "
                "index of an output (for every worker), as get_state() writes it."
            )
        return units


@dataclasses.dataclass(frozen=True)
class SavedPosition:
    """Where a state says to resume.

    Attributes:
      next_step: the first step not consumed (a version-1 state's, or the keys').
      pipeline: the pipeline's state (formats 2 and 3), None to start the
        pipeline afresh at `next_step` (version 1, Grain's states, keys edited
        past a stateless pipeline).
      skip, replay: a version-1 state's elements into the unit and outputs to drop.
      units: the units the Grain keys say were consumed (format 3 and Grain's).
      grain: whether Google's Grain wrote the state (Grain's keys only).
    """

    next_step: int
    pipeline: dict[str, Any] | None = None
    skip: int = 0
    replay: int = 0
    units: int | None = None
    grain: bool = False


def encode_state(
    units: int,
    pipeline: dict[str, Any],
    worker_count: int,
    layout: Layout,
    identity: dict[str, Any],
    fingerprint: str,
) -> bytes:
    """The state bytes of a position (see the module docstring)."""
    seen, last = layout.grain_keys(units, worker_count)
    state = {
        "version": GRAIN_VERSION,
        "last_seen_indices": seen,
        "last_worker_index": last,
        "worker_count": worker_count,
        "sampler": identity["sampler"],
        "data_source": identity["data_source"],
        "format": FORMAT,
        "pipeline": {k: v for k, v in pipeline.items() if k != FINGERPRINT_KEY},
        "fingerprint": fingerprint,
        "data_source_len": identity["data_source_len"],
        "shard_options": identity["shard_options"],
    }
    return json.dumps(state, indent=4).encode()


def _as_dict(state: Any) -> dict[str, Any]:
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
    return state


def _check_identity(state: dict[str, Any], identity: dict[str, Any], keys: Any) -> None:
    for key in keys:
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


def decode_state(
    state: Any,
    identity: dict[str, Any],
    fingerprint: str,
    layout: Layout,
    validate: bool,
    sources: tuple[set[str], set[str]] = (set(), set()),
    check_grain: Callable[[dict[str, Any]], None] | None = None,
    old_identity: dict[str, Any] | None = None,
) -> SavedPosition:
    """Where a state from `get_state` (any format, or Grain's) resumes, after checking it.

    With `validate`, the state's identity must equal `identity` (this loader's);
    a Grain state's sampler and data source must be among `sources` (the
    descriptions `grain_descriptions` gives of this loader's), and
    `check_grain` (if given) raises where Grain's order is not the loader's;
    formats 1 and 2 are compared with `old_identity` (default `identity`).
    """
    state = _as_dict(state)
    if "last_seen_indices" in state and "format" not in state:
        return _decode_grain(state, layout, validate, sources, check_grain)
    if "format" in state:
        return _decode_format_3(state, identity, fingerprint, layout, validate)
    return _decode_old(state, identity if old_identity is None else old_identity, validate)


def _decode_format_3(
    state: dict[str, Any],
    identity: dict[str, Any],
    fingerprint: str,
    layout: Layout,
    validate: bool,
) -> SavedPosition:
    if state["format"] != FORMAT:
        raise ValueError(
            f"DataLoader state format {state['format']!r} is not supported; this version "
            f"reads format {FORMAT}, the formats before it and Grain's states."
        )
    if set(state) != _STATE_KEYS:
        raise ValueError(
            f"this is not a DataLoader state: expected the keys {sorted(_STATE_KEYS)}, got "
            f"{sorted(state)}. Pass what `get_state()` returned (Grain's keys may be edited)."
        )
    if type(state["version"]) is not int or state["version"] != GRAIN_VERSION:
        raise ValueError(
            f"state['version'] must be {GRAIN_VERSION} (Grain's DataLoader state version, which "
            f"format {FORMAT} keeps), got {state['version']!r}: the state is corrupt."
        )
    if validate:
        _check_identity(state, identity, IDENTITY_KEYS)
    if state["fingerprint"] != fingerprint:
        raise ValueError(
            "this state was saved from a DataLoader with other operations or data: its "
            f"pipeline fingerprint is {state['fingerprint']!r}, this DataLoader's is "
            f"{fingerprint!r}. Its positions would denote other elements here; restore it "
            "into the DataLoader it was saved from."
        )
    pipeline = state["pipeline"]
    if not isinstance(pipeline, dict):
        raise ValueError(f"state['pipeline'] must be a dict, got {pipeline!r:.300}.")
    units = layout.units_of(state)
    step = min(units * layout.steps_per_unit, layout.length)
    return SavedPosition(step, pipeline, units=units)


def _decode_grain(
    state: dict[str, Any],
    layout: Layout,
    validate: bool,
    sources: tuple[set[str], set[str]],
    check_grain: Callable[[dict[str, Any]], None] | None,
) -> SavedPosition:
    if not set(state) >= GRAIN_KEYS:
        raise ValueError(
            "this looks like a DataLoader state of Google's Grain but lacks "
            f"{sorted(GRAIN_KEYS - set(state))}: pass what `get_state()` returned."
        )
    if validate:
        for key, forms in zip(("sampler", "data_source"), sources, strict=True):
            if state[key] not in forms:
                raise ValueError(
                    f"this state (written by Google's Grain) was saved by a DataLoader whose "
                    f"{key} is {state[key]!r}, but this DataLoader's is {sorted(forms)!r:.400}. "
                    "A checkpoint only restores with the sampler and data source it was saved "
                    "with (pass validate_state=False to DataLoaderIterator to skip this check)."
                )
    if check_grain is not None:
        check_grain(state)
    units = layout.units_of(state)
    step = min(units * layout.steps_per_unit, layout.length)
    return SavedPosition(step, None, units=units, grain=True)


def _decode_old(state: dict[str, Any], identity: dict[str, Any], validate: bool) -> SavedPosition:
    """Formats 1 and 2, written before the state took Grain's keys."""
    version = state.get("version")
    if type(version) is not int or version not in _OLD_STATE_KEYS:
        if not {"sampler", "next_step"} <= set(state):
            version = 2  # not ours at all: the keys say so below
        else:
            raise ValueError(
                f"DataLoader state version {version!r} is not supported; this version "
                f"reads format {FORMAT}, versions {sorted(_OLD_STATE_KEYS)} and Grain's states."
            )
    if set(state) != _OLD_STATE_KEYS[version]:
        raise ValueError(
            f"this is not a DataLoader state: expected Grain's keys {sorted(GRAIN_KEYS)} "
            f"and ours, got {sorted(state)}. Pass what `get_state()` returned."
        )
    if validate:
        _check_identity(state, identity, IDENTITY_KEYS)
    for key in _OLD_POSITION_KEYS[version]:
        value = state[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"state[{key!r}] must be an integer >= 0, got {value!r}.")
    if version == 1:
        return SavedPosition(state["next_step"], None, state["skip"], state["replay"])
    pipeline = state["pipeline"]
    if not isinstance(pipeline, dict) or not isinstance(pipeline.get(FINGERPRINT_KEY), str):
        raise ValueError(
            "state['pipeline'] must be the pipeline's state, a dict with its "
            f"{FINGERPRINT_KEY!r} (every version-2 state has one), got {pipeline!r:.300}."
        )
    return SavedPosition(state["next_step"], pipeline)
