"""A compact fingerprint of what gives an iterator state's positions their meaning.

A state is a few integer positions; the same ``{"next_index": 10}`` means a
different element in a pipeline with another shuffle seed, another source
length or one stage more or less. The fingerprint says which pipeline a state
belongs to:

    "range(0:100:1) > shuffle(#1a2b3c4d) > batch(32,False) > to_iter"

Where it travels. `get_state()` returns the stages' positions alone, in
Grain's shapes (``{"next_index": 10}``), so that code written against Grain
that reads or compares states works unchanged. The fingerprint goes into the
checkpoint *file* instead: the envelope of `grain_dataset._runtime._state_file` (which
`iterator.save` and grain-jax's Orbax handler write) holds it beside the state,
and reading the file hands it to `set_state`, which compares it and raises a
ValueError naming the first stage that differs. A state passed to `set_state`
by hand is checked by its shape only (every stage checks its own keys), as in
Grain. States of earlier versions carry the fingerprint in the dict under
"grain_fingerprint": it is checked the same way and removed.

The fingerprint lists, source first (in postfix order: a stage with k >= 2
parents follows them and says ``/k``), only the stages that decide which
element a position denotes, with the parameters that do: source lengths,
seeds of shuffles, slices, repeats, MapDataset batch sizes, mixture weights,
packing lengths. Stages that change elements but not positions (map,
random_map, filter, IterDataset.batch, rebatch, prefetching, options) leave no
trace, so changing a map function, or the batch size of an IterDataset.batch,
resumes at the same element by design.

Deliberate changes this module handles (docs/checkpointing.md):
  * `IterDataset.mix`: its token ``mix[h0:h1:...]`` stands for the whole
    mixture and lists a hash of each component (`component_hash`); two mix
    tokens always match, and the hashes saved in the checkpoint reach the mix's
    `set_state` (`saved_components`), which matches old component states to
    new components (new weights, components added, removed or reordered).
  * A MapDataset.batch directly under `to_iter_dataset` with a new batch size:
    the position is converted to the same element when the new size divides it
    (`_convert_batch`).
  * mp_prefetch added or removed, or its worker count changed: its token
    (``round_robin``, shared with multithread_prefetch) compares as absent,
    since over a positional pipeline its state is the plain pipeline's
    (grain_dataset._iter_stages._positional); a per-worker state of it is refused by the
    shape checks of the stages it does not fit.
Anything else, or `force_restore(iterator)`, is the user's call.

A fingerprint longer than `_MAX_TEXT` characters is stored as one 8-hex-digit
hash per stage (mix tokens excepted: their component hashes are needed): still
one token per stage, so a mismatch still names the stage of this pipeline that
differs.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from grain_dataset._runtime._carried import carried, carried_if_any

if TYPE_CHECKING:
    from grain_dataset._common._contract import IteratorTraits, StageTraits

KEY = "grain_fingerprint"
_SEPARATOR = " > "
_MAX_TEXT = 512
_MIX = "mix"
# In a dataset's __dict__ (datasets are immutable): its tokens and its fingerprint text.
_CACHE = "_grain_fingerprint_tokens"
_TEXT = "_grain_fingerprint_text"

logger = logging.getLogger("grain")


class UnverifiedStateWarning(UserWarning):
    """A state restored without a pipeline fingerprint (a checkpoint of an older version)."""


def token(name: str, *params: Any) -> str:
    """A stage's token: ``name(p1,p2)``, the parameters that decide its positions."""
    if not params:
        return name
    text = ",".join(_param(value) for value in params)
    return f"{name}({text})"


def seed_param(seed: int | None) -> str:
    """A stage seed as a token parameter: 8 hex digits of its hash (seeds are 64-bit)."""
    return "none" if seed is None else "#" + _hash(str(seed))


def _param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple) and len(value) > 4:
        return "#" + _hash(repr(value))
    if isinstance(value, list | tuple):
        return ":".join(_param(item) for item in value)
    return str(value).replace(_SEPARATOR, " ").replace(" ", "")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _tokens_and_stages(dataset: Any) -> list[tuple[str, Any]]:
    """(token, stage) for each stage that leaves one, in postfix order from the sources."""
    out: list[tuple[str, Any]] = []
    stack: list[tuple[Any, bool]] = [(dataset, False)]
    while stack:  # iterative: pipelines can be thousands of stages long
        stage, expanded = stack.pop()
        children = _children(stage)
        if expanded:
            text = _stage_token(stage, len(children))
            if text is not None:
                out.append((text, stage))
            continue
        stack.append((stage, True))
        stack.extend((child, False) for child in reversed(children))
    return out


def _children(stage: StageTraits) -> tuple[Any, ...]:
    return tuple(stage._fingerprint_parents())


def _stage_token(stage: StageTraits, arity: int) -> str | None:
    try:
        text = stage._fingerprint_token()
    except Exception:  # a user's stage must not break checkpointing
        text = type(stage).__name__
    if text is None:
        if arity == 1:
            return None
        text = type(stage).__name__
    return text if arity < 2 else f"{text}/{arity}"


def tokens(dataset: Any) -> list[str]:
    """The fingerprint tokens of `dataset`, source first (cached on the dataset)."""
    cached = dataset.__dict__.get(_CACHE)
    if cached is None:
        cached = [text for text, _ in _tokens_and_stages(dataset)]
        dataset.__dict__[_CACHE] = cached
    return cached


def fingerprint(dataset: StageTraits) -> str:
    """The fingerprint text of `dataset` (see the module docstring; cached on the dataset)."""
    text = dataset.__dict__.get(_TEXT)
    if text is None:
        parts = tokens(dataset)
        text = _SEPARATOR.join(parts)
        if len(text) > _MAX_TEXT:
            text = _SEPARATOR.join(part if _is_mix(part) else "#" + _hash(part) for part in parts)
        dataset.__dict__[_TEXT] = text
    return text


def component_hash(dataset: Any) -> str:
    """A short hash of a mixture component's fingerprint: equal for equal components."""
    return _hash(_SEPARATOR.join(tokens(dataset)))


def remember_dataset(iterator: IteratorTraits, dataset: StageTraits, *, stamp: bool = True) -> None:
    """Records the dataset `iterator` reads, for the fingerprint of its checkpoints.

    With `stamp` (the default, for iterators of other packages that keep the
    fingerprint in their own state, like ElasticIterator's), `get_state()`
    also adds it to dict states under "grain_fingerprint". ``iter(dataset)``
    passes False: its states have Grain's shapes, and the fingerprint travels
    in the checkpoint file (the module docstring).
    """
    fields = carried(iterator)
    fields.dataset = dataset
    fields.stamps = stamp


def of_iterator(iterator: Any) -> str | None:
    """The fingerprint of the pipeline `iterator` reads, None if it does not know its dataset.

    For the checkpoint file's envelope (`grain_dataset._runtime._state_file`).
    """
    dataset = remembered_dataset(iterator)
    return None if dataset is None else fingerprint(dataset)


def remembered_dataset(iterator: Any) -> Any:
    """The dataset `remember_dataset` recorded for `iterator`, None if none."""
    fields = carried_if_any(iterator)
    return None if fields is None else fields.dataset


def unstamped(iterator: Any) -> Any:
    """Returns `iterator`, whose states from now on carry no pipeline fingerprint.

    For iterators that a library component drives on the user's behalf (the
    pipeline inside a worker process, the datasets an interleave opens): their
    states travel inside the state of the iterator the user holds, whose own
    fingerprint covers them.
    """
    fields = carried_if_any(iterator)
    if fields is not None:
        fields.dataset = None
        fields.stamps = False
    return iterator


def without_fingerprint(state: Any) -> Any:
    """`state` without a pipeline fingerprint: the stages' positions alone.

    `get_state()` of an ``iter(dataset)`` iterator returns no fingerprint; states
    of earlier versions of this library carried one under "grain_fingerprint".
    For looking at or comparing positions; restoring such a state checks its
    shape only.
    """
    if type(state) is dict and KEY in state:
        return {key: value for key, value in state.items() if key != KEY}
    return state


def force_restore(iterator: Any) -> Any:
    """Lets `iterator`'s next ``set_state`` accept a state of a different pipeline.

    The fingerprint check is skipped once (the differences are logged as a
    warning on the "grain" logger); the state must still have the shape this
    pipeline's stages expect. Use it when you changed the pipeline on purpose
    and know where the saved positions land in the new one. Returns `iterator`,
    so it can wrap the iterator handed to Orbax::

        mngr.restore(step, args=grain.checkpoint.CheckpointRestore(
            grain.experimental.force_restore(iterator)))
    """
    if not hasattr(iterator, "set_state"):
        raise TypeError(
            f"force_restore takes a data iterator with set_state(), got {type(iterator).__name__}."
        )
    carried(iterator).forced = True
    return iterator


def stamp(iterator: Any, state: Any) -> Any:
    """`state` with the fingerprint of `iterator`'s pipeline added (dict states only)."""
    fields = carried_if_any(iterator)
    if fields is None or fields.dataset is None or type(state) is not dict or KEY in state:
        return state
    dataset = fields.dataset
    if not fields.stamps:
        return state
    stamped = dict(state)
    stamped[KEY] = fingerprint(dataset)
    return stamped


Mixes = dict[int, "list[str] | None"]
# While a checked state is being restored: for each IterDataset.mix listed in the
# fingerprint (by id of the mix dataset), the component hashes the checkpoint saved
# (None: a fingerprint of an earlier version, whose mix token has none).
_MIXES: contextvars.ContextVar[Mixes | None] = contextvars.ContextVar("grain_mixes", default=None)


def mix_token(hashes: list[str]) -> str:
    """The fingerprint token of an IterDataset.mix of components with these hashes."""
    return f"{_MIX}[{':'.join(hashes)}]"


def _is_mix(text: str) -> bool:
    return text == _MIX or text.startswith(_MIX + "[") or text == "#" + _hash(_MIX)


def _mix_hashes(text: str) -> list[str] | None:
    if not (text.startswith(_MIX + "[") and text.endswith("]")):
        return None
    inner = text[len(_MIX) + 1 : -1]
    return inner.split(":") if inner else []


@contextlib.contextmanager
def restoring(mixes: Mixes | None) -> Iterator[None]:
    """Makes `mixes` (from `verify`) visible to the mixes' set_state while it runs."""
    token = _MIXES.set(mixes)
    try:
        yield
    finally:
        _MIXES.reset(token)


def saved_components(dataset: Any) -> tuple[bool, list[str] | None]:
    """(whether a checked fingerprint covers this mix, the component hashes it saved).

    (False, None) when the state being restored came without a fingerprint (a
    state passed to set_state by hand, as with Grain), or the mix is inside a
    component of another mix (that component's hash covers it).
    """
    mixes = _MIXES.get()
    if mixes is None or id(dataset) not in mixes:
        return False, None
    return True, mixes[id(dataset)]


def _saved_mixes(saved_tokens: list[str], current: list[tuple[str, Any]]) -> Mixes:
    """For each mix of this pipeline, the hashes of the mix at its place in the checkpoint."""
    stages = [stage for text, stage in current if _is_mix(text)]
    saved = [text for text in saved_tokens if _is_mix(text)]
    if len(stages) != len(saved):
        return {}
    return {id(stage): _mix_hashes(text) for stage, text in zip(stages, saved, strict=True)}


def verify(iterator: Any, state: Any) -> tuple[Any, bool, Mixes | None]:
    """(`state` as `iterator`'s stages take it, whether to warn, the saved mixes).

    A dict `state` may carry the fingerprint under `KEY` (the checkpoint file
    puts it there, from its envelope; earlier versions' states hold it
    themselves); without it, only the stages' shape checks apply, and only an
    iterator that stamps its states (`remember_dataset`) warns that it was
    unverified. The saved mixes go to `restoring`.

    Raises:
      ValueError: the state's fingerprint is not this pipeline's.
    """
    if type(state) is not dict:
        return state, False, None
    fields = carried_if_any(iterator)
    dataset: Any = None
    forced = stamps = False
    if fields is not None:
        dataset, forced, stamps = fields.dataset, fields.forced, fields.stamps
        fields.forced = False
    if KEY not in state:
        return state, dataset is not None and stamps and not forced, None
    saved = state[KEY]
    state = {key: value for key, value in state.items() if key != KEY}
    if dataset is None:
        return state, False, None
    if not isinstance(saved, str):
        raise ValueError(
            f"state[{KEY!r}] must be the string get_state() wrote, got {saved!r}; the state "
            "is corrupt."
        )
    current = _tokens_and_stages(dataset)
    saved_tokens = saved.split(_SEPARATOR)
    mixes = _saved_mixes(saved_tokens, current)
    if saved == fingerprint(dataset):  # the common case, from the cached tokens
        return state, False, mixes
    current_tokens = [text for text, _ in current]
    difference = _first_difference(saved_tokens, current_tokens)
    if difference is None or _same_without_prefetching(saved_tokens, current_tokens):
        return state, False, mixes
    if forced:
        logger.warning("restoring a state of a different pipeline (forced): %s", difference)
        return state, False, mixes
    converted = _convert_batch(saved_tokens, current, state)
    if converted is not None:
        return converted, False, mixes
    raise ValueError(
        f"this state was saved from a different pipeline: {difference}. Its positions would "
        "denote other elements here, so it would silently continue somewhere else. Restore it "
        "into the pipeline it was saved from (same sources, seeds, shuffles, slices and "
        "MapDataset batch sizes); changing map functions, IterDataset.batch sizes and "
        "IterDataset.mix weights or components is allowed (see docs/checkpointing.md). If you "
        "changed the pipeline on purpose, restore into "
        "grain.experimental.force_restore(iterator), which skips this check once."
    )


def warn_unverified(iterator: Any) -> None:
    warnings.warn(
        f"restored a state without a pipeline fingerprint into {type(iterator).__name__}: it "
        "was saved by an older version, so nothing checked that it comes from this pipeline "
        "(same sources, seeds and shuffles). Save a new checkpoint to get one.",
        UnverifiedStateWarning,
        stacklevel=4,
    )


def _matches(saved: str, current: str) -> bool:
    if _is_mix(saved) and _is_mix(current):
        return True  # the mix matches its components itself (`saved_components`)
    return saved == current or saved == "#" + _hash(current)


# mp_prefetch (and multithread_prefetch): over a positional pipeline its state is the
# plain pipeline's, so it may come and go; a per-worker state is refused by the shapes.
_PREFETCHING = {"round_robin", "#" + _hash("round_robin")}


def _same_without_prefetching(saved: list[str], current: list[str]) -> bool:
    def kept(tokens: list[str]) -> list[str]:
        return [token for token in tokens if token not in _PREFETCHING]

    return _first_difference(kept(saved), kept(current)) is None


def _first_difference(saved: list[str], current: list[str]) -> str | None:
    for position, (old, new) in enumerate(zip(saved, current, strict=False)):
        if not _matches(old, new):
            return (
                f"stage {position + 1} counting from the source is {new!r} here but "
                f"{old!r} in the checkpoint (checkpoint: {_SEPARATOR.join(saved)!r}; this "
                f"pipeline: {_SEPARATOR.join(current)!r})"
            )
    if len(saved) != len(current):
        return (
            f"the checkpoint's pipeline has {len(saved)} position-changing stages, this one "
            f"{len(current)} (checkpoint: {_SEPARATOR.join(saved)!r}; this pipeline: "
            f"{_SEPARATOR.join(current)!r})"
        )
    return None


def _convert_batch(
    saved: list[str], current: list[tuple[str, Any]], state: dict[str, Any]
) -> dict[str, Any] | None:
    """The state at the same element after a MapDataset.batch size change, if exact.

    Only for ``... batch(b) [element-wise stages] > to_iter`` at the end of the
    pipeline, whose state is ``{"next_index": k}``: batch k of size b starts at
    element k*b of its epoch, which is batch k*b/b' of size b' when b' divides it.
    """
    names = [text for text, _ in current]
    if len(saved) != len(names) or len(names) < 2 or names[-1] != "to_iter":
        return None
    differing = [i for i, (a, b) in enumerate(zip(saved, names, strict=True)) if not _matches(a, b)]
    if differing != [len(names) - 2] or set(state) != {"next_index"}:
        return None
    old, (new, stage) = saved[-2], current[-2]
    parsed = _batch_params(old)
    if parsed is None or not new.startswith("batch("):
        return None
    old_size, old_drop = parsed
    new_size = stage._batch_size
    position = state["next_index"]
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        return None  # the stage's own check names the problem
    from grain_dataset._core._stage import is_infinite

    n = stage._parent_length
    if is_infinite(n):
        epoch, first = 0, position * old_size
        new_length = 0
    else:
        old_length = n // old_size if old_drop else -(-n // old_size)
        if not old_length:
            return None
        epoch, within = divmod(position, old_length)
        first = within * old_size
        new_length = len(stage)
    if first % new_size:
        raise ValueError(
            f"this state was saved with MapDataset.batch({old_size}) and this pipeline batches "
            f"by {new_size}: the next element is element {first} of its epoch, which does not "
            f"start a batch of {new_size}, so no position here resumes exactly there. Use a "
            f"batch size that divides {first}, or batch after to_iter_dataset "
            "(IterDataset.batch), whose batch size can change freely, or restore with "
            "grain.experimental.force_restore(iterator)."
        )
    index = first // new_size
    if not is_infinite(n) and index >= new_length:
        epoch, index = epoch + 1, 0  # the new remainder would be dropped anyway
    logger.info(
        "resuming MapDataset.batch(%d) state at next_index %d with batch size %d: next_index %d",
        old_size,
        position,
        new_size,
        epoch * new_length + index,
    )
    return {"next_index": epoch * new_length + index}


def _batch_params(text: str) -> tuple[int, bool] | None:
    if not (text.startswith("batch(") and text.endswith(")")):
        return None
    size, _, drop = text[len("batch(") : -1].partition(",")
    if not size.isdigit() or drop not in ("True", "False"):
        return None
    return int(size), drop == "True"
