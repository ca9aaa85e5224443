"""Concat-then-split packing: one token stream cut into fixed-length examples.

The model (as Grain documents it for `grain.experimental.ConcatThenSplitIterDataset`,
and as upstream 0.2.18 produces it): elements are appended, in the parent's
order, to the example being built as long as all their features fit whole.
The first element that does not fit in some feature is split: every feature
takes what still fits (possibly nothing, possibly all of it), the example is
emitted, and the rest of the element opens the next example. An element
longer than several examples is split several times. The last example, when
the parent ends, is padded with 0. Elements with no tokens at all are
skipped. (Grain's optimization of passing already full-length elements
through first is not made: examples follow the parent's order strictly.)

Output: as for first-fit packing (see `_packing`): for a dict element, each
feature ``k`` gives ``k``, ``k_segment_ids`` (1, 2, ... for the pieces of
elements in the example, 0 on padding) and ``k_positions`` (int32, 0 on
padding). Segment ids restart at 1 in every example, so the rest of a split
element is segment 1 of the next example, and positions count from 0 within
each piece: the rest of a split element starts again at position 0, as
upstream Grain 0.2.18 produces it (benchmarks/packing.py checks that the two
implementations give identical output). A piece is what the model can attend
to within one example, and with REPLACE_FIRST_TOKEN_WITH_BOS it then starts
like any document: BOS at position 0.

BOS handling (`bos_handling`), as upstream Grain 0.2.18 does it:
  DO_NOTHING                    tokens are copied unchanged; the rest of a
                                split element starts with whatever token
                                follows the split.
  REPLACE_FIRST_TOKEN_WITH_BOS  in each feature of `bos_features`, the first
                                token of every piece (a whole element, or the
                                rest of a split one) is overwritten with
                                `bos_token_id`, so every segment starts with
                                BOS at position 0. The overwritten tokens are
                                dropped: use this for elements that begin
                                with a BOS (or a placeholder) of their own.
                                Upstream silently does nothing when
                                `bos_features` is empty; this raises instead.

State: ``{"parent": S, "offsets": [o_1, ..., o_F]}``. Between two examples,
at most one element has been read and not wholly used (the one that was
split): S is the parent's state before it and o_k how many tokens of feature
k it already gave (one per feature, in `length_struct`'s order; all 0 when
it gave nothing yet). With no such element, S is the parent's state and the
offsets are 0. Restoring re-reads that one element, so it costs one parent
element; no token is ever stored in the state.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Collection
from typing import Any

import numpy as np

from grain_dataset._common._errors import WrongTypeError
from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._iter_stage import Anchor, IterStage, StageIterator, iterator_of
from grain_dataset._core._state import check_state
from grain_dataset._runtime._fingerprint import token
from grain_dataset._sequences._packing import SEGMENT_DTYPE, Layout
from grain_index import checks


class BOSHandling(enum.Enum):
    """What ConcatThenSplitIterDataset does at the start of an example cut from a split element.

    Example::

        ConcatThenSplitIterDataset(
            ds, length_struct={"tokens": 1024},
            bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
            bos_features=("tokens",), bos_token_id=1,
        )
    """

    DO_NOTHING = 1
    REPLACE_FIRST_TOKEN_WITH_BOS = 2


class ConcatThenSplitIterDataset(IterStage):
    """Concatenates the elements' sequences and splits them into examples of fixed length.

    No padding except in the last example, at the cost of splitting elements
    across examples. See the module docstring for the output format, the BOS
    handling and the iterator state.

    Args:
      parent: an IterDataset of dicts (or trees) of 1-D arrays.
      length_struct: the packed length of every feature, in the elements' structure.
      meta_features: features (dict keys) that are never split: an element
        whose meta features do not fit whole closes the example and opens the
        next one, and the rest of a split element repeats them. They get no
        ``*_segment_ids`` or ``*_positions``.
      split_full_length_features: False passes elements that already fill a
        feature to its length (none longer) through as their own examples,
        unsplit, in Grain's order (see the module docstring).
      bos_handling: a `BOSHandling`.
      bos_features: the features (dict keys) whose pieces start with BOS;
        required with REPLACE_FIRST_TOKEN_WITH_BOS.
      bos_token_id: the BOS token; required with REPLACE_FIRST_TOKEN_WITH_BOS.

    Example::

        ds = grain.MapDataset.source([{"tokens": np.arange(n)} for n in (3, 4)])
        packed = ConcatThenSplitIterDataset(ds.to_iter_dataset(), length_struct={"tokens": 5})
        [(p["tokens"].tolist(), p["tokens_positions"].tolist()) for p in packed]
        # [([0, 1, 2, 0, 1], [0, 1, 2, 0, 1]), ([2, 3, 0, 0, 0], [0, 1, 0, 0, 0])]
    """

    _positional_chain = True
    _order_as_grain = False

    def _fingerprint_token(self) -> str | None:
        return token(
            "concat_then_split", self._layout.lengths, self._bos_handling.name, self._split_full
        )

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Any,
        meta_features: Collection[str] = (),
        split_full_length_features: bool = True,
        bos_handling: BOSHandling = BOSHandling.DO_NOTHING,
        bos_features: Collection[str] = (),
        bos_token_id: int | None = None,
    ):
        name = type(self).__name__
        super().__init__(as_iter_dataset(parent, "parent", name))
        if not isinstance(split_full_length_features, bool):
            raise TypeError(
                f"`split_full_length_features` must be a bool, got {split_full_length_features!r}."
            )
        self._split_full = split_full_length_features
        self._layout = Layout(length_struct, meta_features, name)
        self._layout.allow_list_meta(False)
        if not isinstance(bos_handling, BOSHandling):
            raise WrongTypeError(
                f"`bos_handling` must be a BOSHandling (DO_NOTHING or "
                f"REPLACE_FIRST_TOKEN_WITH_BOS), got {bos_handling!r}."
            )
        self._bos_handling = bos_handling
        self._bos: list[bool] = [False] * self._layout.count
        self._bos_token_id: int | None = None
        if bos_handling is BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS:
            if bos_token_id is None:
                raise ValueError(
                    "bos_token_id must be set if bos_handling is "
                    "BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS. "
                    "`bos_token_id` is required with BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS: "
                    "pass the tokenizer's BOS id."
                )
            self._bos_token_id = checks.as_int(bos_token_id, "bos_token_id")
            self._bos = self._bos_flags(bos_features)
        elif bos_features or bos_token_id is not None:
            raise ValueError(
                "`bos_features` and `bos_token_id` only apply with "
                "bos_handling=BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS; set that or drop them."
            )

    def _bos_flags(self, bos_features: Any) -> list[bool]:
        if isinstance(bos_features, str) or not isinstance(bos_features, Collection):
            raise TypeError(
                f"`bos_features` must be a collection of feature names, got {bos_features!r}."
            )
        names = list(bos_features)
        keys = self._layout.flat_keys
        if keys is None:
            raise ValueError(
                "BOS handling needs `length_struct` to be a flat dict whose keys "
                f"`bos_features` can name, got {self._layout.skeleton!r}."
            )
        if not names:
            raise ValueError(
                "`bos_features` is empty, so REPLACE_FIRST_TOKEN_WITH_BOS would change "
                f"nothing: name the features that get BOS (of {list(keys)})."
            )
        unknown = [name for name in names if name not in keys]
        if unknown:
            raise ValueError(
                f"`bos_features` names {unknown}, which `length_struct` lacks "
                f"(its features: {list(keys)})."
            )
        return [key in names for key in keys]

    def _describe(self) -> str:
        return f"length_struct={self._layout.skeleton!r}, bos_handling={self._bos_handling}"


class _Waiting:
    """A full-length element waiting to be passed through (split_full_length_features=False)."""

    __slots__ = ("before", "leaves", "number")

    def __init__(self, leaves: list[np.ndarray], before: Any, number: int):
        self.leaves, self.before, self.number = leaves, before, number


@iterator_of(ConcatThenSplitIterDataset)
class _ConcatThenSplitIterator(StageIterator):
    def __init__(self, dataset: ConcatThenSplitIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._layout = dataset._layout
        self._meta = dataset._layout.meta
        self._dtypes: list[np.dtype | None] = [None] * self._layout.count
        self._zeros = [0] * self._layout.count
        # The element part-way consumed, what it already gave, and the parent's state before it.
        self._partial: list[np.ndarray] | None = None
        self._offsets = self._zeros
        # Set before each element is consumed, and read only while one is part-way.
        self._anchor = Anchor(parent, now=False)
        # split_full_length_features=False: elements read from the parent since the start
        # or the last restore, the full-length ones waiting, and whether anything was output.
        self._read = 0
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._emitted = False

    # -- reading -------------------------------------------------------------------------

    def _read_element(self) -> tuple[list[np.ndarray], Any] | None:
        """The next element with tokens, and the parent's state before it; None at the end."""
        while True:
            before = self._parent.get_state()
            try:
                element = next(self._parent)
            except StopIteration:
                return None
            self._read += 1
            leaves = self._layout.checked_leaves(element, self._dtypes)
            if any(leaf.shape[0] for leaf in leaves):
                return leaves, before

    def _is_full(self, leaves: list[np.ndarray]) -> bool:
        """Whether the element fills some feature exactly and overflows none (no-split mode)."""
        lengths = self._layout.lengths
        sizes = [leaf.shape[0] for leaf in leaves]
        if any(size > length for size, length in zip(sizes, lengths, strict=True)):
            return False
        return any(
            size == length
            for size, length, meta in zip(sizes, lengths, self._meta, strict=True)
            if not meta
        )

    def _reread(self) -> list[np.ndarray]:
        stage = repr(self._dataset)
        try:
            element = next(self._parent)
        except StopIteration:
            raise ValueError(
                f"cannot resume {stage}: its state points into an element, but the parent "
                "has none there. The state is from a different pipeline or data."
            ) from None
        self._read += 1
        leaves = self._layout.checked_leaves(element, self._dtypes)
        left = [leaf.shape[0] - offset for leaf, offset in zip(leaves, self._offsets, strict=True)]
        if min(left) < 0 or not any(left):
            raise ValueError(
                f"cannot resume {stage}: its state's offsets {self._offsets} do not fit the "
                f"element's lengths {[leaf.shape[0] for leaf in leaves]}. The state is from "
                "a different pipeline or data."
            )
        self._partial = leaves
        return leaves

    # -- building examples ---------------------------------------------------------------

    def __next__(self) -> Any:
        if not self._waiting:
            arrays, segment = self._build(None)
            if segment:
                return self._output(arrays)
            if not self._waiting:
                raise StopIteration
        # Full-length elements waiting (split_full_length_features=False), each one alone.
        arrays, _ = self._build([self._waiting.popleft().leaves])
        return self._output(arrays)

    def _output(self, arrays: list[Any]) -> Any:
        self._emitted = True
        for index, feature in enumerate(arrays):
            if feature is None:
                arrays[index] = self._allocate(index)
        values, segments, positions = zip(*arrays, strict=True)
        return self._layout.assemble(list(values), list(segments), list(positions))

    def _build(self, alone: list[list[np.ndarray]] | None) -> tuple[list[Any], int]:
        """Fills one example; with `alone`, just that (full-length) element."""
        dataset = self._dataset
        layout = self._layout
        lengths = layout.lengths
        arange = layout.arange
        meta = self._meta
        room = list(lengths)
        arrays: list[Any] = [None] * layout.count
        segment = 0
        bos = dataset._bos
        while True:
            if alone is not None:
                if not alone:
                    break
                leaves, offsets = alone.pop(), self._zeros
            elif self._partial is not None:
                leaves, offsets = self._partial, self._offsets
            elif any(self._offsets):
                # Restored part-way through an element: the parent is just before it.
                leaves, offsets = self._reread(), self._offsets
            else:
                got = self._read_element()
                if got is None:
                    break
                leaves, before = got
                if not dataset._split_full and self._is_full(leaves):
                    if not segment and self._emitted:
                        return self._build([leaves])  # passed through at once
                    self._waiting.append(_Waiting(leaves, before, self._read))
                    continue
                self._anchor.set(before)
                offsets = self._zeros
            # Meta features are never split: one that does not fit whole closes the example.
            if any(m and leaf.shape[0] > r for m, leaf, r in zip(meta, leaves, room, strict=True)):
                if not segment:
                    raise ValueError(
                        f"{layout.stage}: a meta feature of an element is longer than its "
                        f"packed length ({[leaf.shape[0] for leaf in leaves]} tokens for "
                        f"lengths {lengths}); meta features are never split."
                    )
                self._partial, self._offsets = leaves, offsets
                break
            takes = []
            whole = True
            for index, leaf in enumerate(leaves):
                left = leaf.shape[0] - (0 if meta[index] else offsets[index])
                take = left if left <= room[index] else room[index]
                if take < left:
                    whole = False
                takes.append(take)
            if any(takes):  # a piece that placed nothing gets no segment id
                segment += 1
                for index, take in enumerate(takes):
                    if not take:
                        continue
                    feature = arrays[index]
                    if feature is None:
                        feature = arrays[index] = self._allocate(index)
                    values, segments, positions = feature
                    start = lengths[index] - room[index]
                    end = start + take
                    offset = 0 if meta[index] else offsets[index]
                    values[start:end] = leaves[index][offset : offset + take]
                    if bos[index]:
                        values[start] = dataset._bos_token_id
                    segments[start:end] = segment
                    positions[start:end] = arange[:take]
                    room[index] -= take
            if alone is not None:
                continue
            if whole:
                self._partial = None
                self._offsets = self._zeros
            else:
                # Nothing more goes into this example: the rest opens the next one (meta
                # features whole again).
                self._partial = leaves
                self._offsets = [
                    0 if meta[i] else o + t
                    for i, (o, t) in enumerate(zip(offsets, takes, strict=True))
                ]
                break
        return arrays, segment

    def _allocate(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        length = self._layout.lengths[index]
        return (
            np.zeros(length, dtype=self._dtypes[index]),
            np.zeros(length, dtype=SEGMENT_DTYPE),
            np.zeros(length, dtype=SEGMENT_DTYPE),
        )

    # -- state -----------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        pending = self._partial is not None or any(self._offsets)
        if pending:
            state = {"parent": self._anchor.saved(), "offsets": list(self._offsets)}
        else:
            state = {"parent": self._parent.get_state(), "offsets": list(self._zeros)}
        if self._dataset._split_full:
            return state
        # Replay from before the first waiting element: the elements read since, and
        # whether the last of them is the pending one.
        replay = 1 if pending else 0
        if self._waiting:
            first = self._waiting[0]
            state["parent"] = first.before
            replay = self._read - first.number + 1
        state.update(replay=replay, pending=pending, emitted=self._emitted)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        fields: tuple[str, ...] = ("parent", "offsets")
        flags: tuple[str, ...] = ()
        if not self._dataset._split_full:
            fields, flags = (*fields, "replay", "pending", "emitted"), ("pending", "emitted")
        # check_state checks the keys; the offsets, a list, are checked here.
        shown = {**state, "offsets": 0} if isinstance(state, dict) and "offsets" in state else state
        check_state(shown, stage, fields, flags=flags)
        offsets = state["offsets"]
        count = self._layout.count
        if (
            not isinstance(offsets, list | tuple)
            or len(offsets) != count
            or any(isinstance(o, bool) or not isinstance(o, int) or o < 0 for o in offsets)
        ):
            raise ValueError(
                f"state['offsets'] of {stage} must list {count} integers >= 0 (one per "
                f"feature), got {offsets!r}; the state is corrupt or from another pipeline."
            )
        self._anchor.restore(state["parent"])
        self._partial = None
        self._waiting.clear()
        self._read = 0
        if self._dataset._split_full:
            self._offsets = list(offsets) if any(offsets) else self._zeros
            return
        self._emitted = state["emitted"]
        self._offsets = self._zeros
        self._replay(state["replay"], state["pending"], list(offsets))

    def _replay(self, count: int, pending: bool, offsets: list[int]) -> None:
        """Re-reads the `count` elements a no-split state covers (see get_state)."""
        for number in range(1, count + 1):
            before = self._parent.get_state()
            try:
                element = next(self._parent)
            except StopIteration:
                raise ValueError(
                    f"cannot resume {self._dataset!r}: its state replays {count} elements "
                    "but the parent ends sooner. The state is from a different pipeline or data."
                ) from None
            self._read = number
            leaves = self._layout.checked_leaves(element, self._dtypes)
            if number == count and pending:
                self._partial, self._offsets = leaves, offsets
                self._anchor.set(before)
            elif any(leaf.shape[0] for leaf in leaves) and self._is_full(leaves):
                self._waiting.append(_Waiting(leaves, before, number))
            # Any other element was output already.
