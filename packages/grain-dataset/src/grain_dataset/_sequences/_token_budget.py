"""Batches filled to a token budget: a variable number of sequences per batch, few shapes.

The model, for `grain.experimental.TokenBudgetBatchIterDataset`:

- Every element has a *length* (its longest sequence feature) and is padded to
  a *padded length* L, the smallest of `padded_lengths` that holds it. A
  batch of n elements whose longest padded length is L has R rows, the
  smallest of `batch_sizes` >= n, and costs R * L <= `token_budget`. So every
  batch's shape is one of the declared `shapes` (R, L): a jitted step
  compiles once per shape, not once per batch.
- In stream order (``bucket_window=None``), elements join the open batch
  while it stays within the budget; the first element that does not fit
  closes it and opens the next.
- With bucketing (``bucket_window=W``), the parent's stream is read in groups
  of W elements. Inside a group each element goes to the bucket of its padded
  length, and a bucket is emitted as soon as it holds as many elements as the
  budget allows at its length. At the group's end the elements left in the
  buckets are put together, shortest padded lengths first, in stream order
  as above. A larger window pads less (fewer partly filled batches) and costs
  more memory and a longer replay on restore.

An element longer than the largest padded length raises a ValueError unless
``truncate=True``, which cuts its sequence features to that length (the cut
tokens are lost, on purpose). Nothing else is ever dropped: an element with
no tokens is a row of length 0.

State: ``{"parent": S, "consumed": c, "emitted": e}``. S is the parent's state
where the stage last held nothing (in stream order: before the element that
opened the open batch; with bucketing: the start of the group), c the
elements read since and e the batches of the group already returned.
`set_state` restores S and feeds the c elements through the same rules,
dropping the e batches: no token is stored in the state, and a restore
re-reads at most one batch's elements in stream order, at most W with
bucketing. In stream order the stage asks its parent for its state before
each element (which element will not fit shows only after reading it).

In stream order the batches returned so far hold exactly the elements read
before S: after a batch, ``consumed`` is 1 (the element that did not fit,
held) or 0 (the end), and ``emitted`` 0. `grain.experimental.ElasticIterator`
(``batching=``) reads its position from S for that reason. With bucketing a
full bucket leaves earlier elements of its window behind, so the returned
batches are not a prefix of the stream, and ElasticIterator refuses it.

Worker processes: a batch depends on the lengths of the elements around it,
so this stage runs on the merged stream. Under `mp_prefetch` over a
positional pipeline (``MapDataset ... .to_iter_dataset()`` then maps and
filters), the workers compute the elements and the batches are formed in
the consuming process: the output is the same for every worker count. Over
a pipeline that is not positional each worker batches its own slice, so the
batches depend on the worker count (each is still within budget and
exact on restore with the same count).

Output, for a flat dict element: every sequence feature ``k`` as a
[R, L, ...] array padded with `padding_value`, ``k_lengths`` (int32 [R]: its
tokens per row, 0 on padding rows) and ``k_mask`` (bool [R, L]: True on
tokens); other features stacked to [R, ...] with zeros on padding rows; and
``row_mask`` (bool [R]: True on the rows that hold an element). A bare
array element gives the tuple ``(values, lengths, mask, row_mask)``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grain_dataset._core._base import IterDataset, MapDataset
from grain_dataset.extension import (
    Anchor,
    IterStage,
    StageIterator,
    check_state,
    iterator_of,
)
from grain_index import checks

LENGTH_DTYPE = np.int32
_ROW_MASK = "row_mask"
_SUFFIXES = ("_lengths", "_mask")
_STATE_FIELDS = ("parent", "consumed", "emitted")


def _ascending(values: Any, name: str) -> list[int]:
    """`values` as a list of strictly increasing positive ints; raises naming `name`."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"`{name}` must be a sequence of positive ints, got {values!r}.")
    out = [checks.int_in_range(value, f"{name}[{i}]", 1) for i, value in enumerate(values)]
    if not out:
        raise ValueError(f"`{name}` is empty: give at least one value.")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"`{name}` must be strictly increasing, got {out}.")
    return out


def _powers_of_two(low: int, high: int) -> list[int]:
    """Powers of two in [low, high]; [high] if there are none."""
    out = [1 << k for k in range(high.bit_length()) if low <= 1 << k <= high]
    return out or [high]


class TokenBudgetBatchIterDataset(IterStage):
    """Batches of as many sequences as fit a token budget, in a few padded shapes.

    See the module docstring of `grain_dataset._token_budget` (and docs/dataset.md,
    "Batches by token budget") for the rules, the output and the state.

    Args:
      parent: an IterDataset (or a MapDataset, read with ``to_iter_dataset()``)
        of flat dicts of arrays, or of bare 1-D arrays.
      token_budget: the most padded tokens in one batch: rows * padded length.
      padded_lengths: the lengths sequences are padded to, increasing; the last
        is the longest sequence accepted. Default: the powers of two from 16
        (or less, for a small budget) up to `token_budget`.
      batch_sizes: the row counts a batch may have, increasing. Default: the
        powers of two up to ``token_budget // padded_lengths[0]``.
      bucket_window: None batches in stream order; an int W groups elements of
        similar length within windows of W elements (less padding, a replay of
        up to W elements on restore).
      sequence_keys: the features of a dict element padded along their first
        axis (they share the padded length); default every feature. Others are
        stacked as they are.
      padding_value: the value of padding tokens, one number or a dict per
        sequence feature.
      full_rows: give every batch the most rows its padded length allows
        (padding rows where it holds fewer elements): exactly one shape per
        padded length.
      truncate: cut sequences longer than the last padded length to it instead
        of raising.

    Example::

        ds = grain.MapDataset.source([np.arange(n) for n in (3, 9, 4, 30, 5)])
        batches = TokenBudgetBatchIterDataset(
            ds, token_budget=64, padded_lengths=[8, 16, 32], batch_sizes=[1, 2, 4, 8]
        )
        [b[0].shape for b in batches]
        # [(4, 16), (2, 32)]: 3, 9 and 4 tokens padded to 16 in 4 rows (one a
        # padding row); 30 needs 32 and 2 rows (64 tokens), so 5 joins it.
    """

    # mp_prefetch's positional split walks through it: the workers compute the
    # positions below, this stage batches the merged stream (the same for any count).
    _positional_chain = True

    def __init__(
        self,
        parent: IterDataset[Any] | MapDataset[Any],
        *,
        token_budget: int,
        padded_lengths: Sequence[int] | None = None,
        batch_sizes: Sequence[int] | None = None,
        bucket_window: int | None = None,
        sequence_keys: Sequence[str] | None = None,
        padding_value: Any = 0,
        full_rows: bool = False,
        truncate: bool = False,
    ):
        if isinstance(parent, MapDataset):
            parent = parent.to_iter_dataset()
        if not isinstance(parent, IterDataset):
            raise TypeError(
                "`parent` of TokenBudgetBatchIterDataset must be an IterDataset or a "
                f"MapDataset, got {type(parent).__name__}."
            )
        super().__init__(parent)
        self._budget = checks.int_in_range(token_budget, "token_budget", 1)
        budget = self._budget
        if padded_lengths is None:
            padded_lengths = _powers_of_two(min(16, budget), budget)
        self._lengths = _ascending(padded_lengths, "padded_lengths")
        too_long = [length for length in self._lengths if length > budget]
        if too_long:
            raise ValueError(
                f"`padded_lengths` {too_long} exceed `token_budget` ({budget}): one row "
                "of them breaks the budget. Raise the budget or drop those lengths."
            )
        if batch_sizes is None:
            batch_sizes = _powers_of_two(1, budget // self._lengths[0])
        self._rows = _ascending(batch_sizes, "batch_sizes")
        # Per padded length, the most rows the budget allows (a batch's size limit).
        self._max_rows = []
        for length in self._lengths:
            allowed = [rows for rows in self._rows if rows * length <= budget]
            if not allowed:
                raise ValueError(
                    f"`token_budget`={budget} holds no batch of padded length {length}: the "
                    f"smallest of `batch_sizes` ({self._rows[0]}) needs "
                    f"{self._rows[0] * length} tokens. Raise the budget, add a smaller batch "
                    "size or drop that padded length."
                )
            self._max_rows.append(allowed[-1])
        self._window = (
            None
            if bucket_window is None
            else checks.int_in_range(bucket_window, "bucket_window", 1)
        )
        if sequence_keys is not None:
            if isinstance(sequence_keys, str) or not all(
                isinstance(key, str) for key in sequence_keys
            ):
                raise TypeError(
                    f"`sequence_keys` must be a sequence of feature names, got {sequence_keys!r}."
                )
            if not sequence_keys:
                raise ValueError("`sequence_keys` is empty: name at least one feature.")
            sequence_keys = tuple(sequence_keys)
        self._sequence_keys: tuple[str, ...] | None = sequence_keys
        values = padding_value.values() if isinstance(padding_value, Mapping) else [padding_value]
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                raise TypeError(f"`padding_value` must be a number, got {value!r}.")
        self._padding = padding_value
        for name, flag in (("full_rows", full_rows), ("truncate", truncate)):
            if not isinstance(flag, bool):
                raise TypeError(f"`{name}` must be a bool, got {flag!r}.")
        self._full_rows = full_rows
        self._truncate = truncate

    @property
    def token_budget(self) -> int:
        """The most padded tokens (rows * padded length) in one batch."""
        return self._budget

    @property
    def max_length(self) -> int:
        """The longest sequence accepted: the last of `padded_lengths`."""
        return self._lengths[-1]

    @property
    def bucket_window(self) -> int | None:
        """The bucketing window in elements, or None for stream order."""
        return self._window

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every (rows, padded length) a batch can have, sorted: a jitted step's compilations."""
        if self._full_rows:
            return sorted(zip(self._max_rows, self._lengths, strict=True))
        return sorted(
            (rows, length)
            for length, most in zip(self._lengths, self._max_rows, strict=True)
            for rows in self._rows
            if rows <= most
        )

    def _fingerprint_token(self) -> str:
        # The arguments that decide which elements share a batch.
        return (
            f"TokenBudgetBatch({self._budget},{self._lengths},{self._rows},"
            f"{self._window},{self._full_rows})"
        ).replace(" ", "")

    def _describe(self) -> str:
        return (
            f"token_budget={self._budget}, padded_lengths={self._lengths}, "
            f"batch_sizes={self._rows}, bucket_window={self._window}"
        )


class _Element:
    """One element read from the parent: its checked features and padded-length index."""

    __slots__ = ("bucket", "value")

    def __init__(self, value: Any, bucket: int):
        self.value = value
        self.bucket = bucket


@iterator_of(TokenBudgetBatchIterDataset)
class _TokenBudgetIterator(StageIterator):
    def __init__(self, dataset: TokenBudgetBatchIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._stage = repr(dataset)
        self._lengths = dataset._lengths
        self._max_rows = dataset._max_rows
        self._window = dataset._window
        # The first element fixes the features, dtypes and trailing shapes of the stream.
        self._keys: tuple[str, ...] | None = None
        self._features: Any = None
        self._is_dict: bool | None = None
        self._specs: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self._anchor = Anchor(parent)
        self._reset()

    def _reset(self) -> None:
        self._consumed = 0
        self._emitted = 0
        # Stream order: the open batch and its longest padded length's index.
        self._open: list[_Element] = []
        self._open_bucket = -1
        # Bucketing: the elements of each padded length, and the group's last batches.
        self._buckets: list[list[_Element]] = [[] for _ in self._lengths]
        self._flush: list[tuple[list[_Element], int]] | None = None
        self._flushed = 0

    # -- elements ------------------------------------------------------------------------

    def _prepare(self, element: Any) -> _Element:
        """The element checked, truncated if allowed, with its length and padded length."""
        if type(element) is np.ndarray and self._is_dict is False and element.ndim:
            # The common bare-array case: one dtype and trailing-shape check.
            dtype, trailing = self._specs[""]
            if element.dtype == dtype and element.shape[1:] == trailing:
                length = element.shape[0]
                if length <= self._lengths[-1]:
                    return _Element(element, bisect.bisect_left(self._lengths, length))
        if isinstance(element, Mapping):
            if self._is_dict is False:
                raise TypeError(f"{self._stage}: a dict element after bare-array elements.")
            value: Any = dict(element)
            if self._keys is None:
                self._first_dict(value)
            elif value.keys() != self._features:
                raise ValueError(
                    f"{self._stage}: an element has the features {sorted(value)}, the first "
                    f"had {sorted(self._features)}; every element needs the same features."
                )
            length = 0
            for key in self._keys or ():
                array = value[key] = self._sequence(value[key], key)
                length = max(length, array.shape[0])
        else:
            if self._is_dict:
                raise TypeError(
                    f"{self._stage}: got a {type(element).__name__} element after dict "
                    "elements; every element must have one structure."
                )
            self._is_dict = False
            value = self._sequence(element, None)
            length = value.shape[0]
        if length > self._lengths[-1]:
            value, length = self._too_long(value, length)
        return _Element(value, bisect.bisect_left(self._lengths, length))

    def _first_dict(self, value: dict[str, Any]) -> None:
        wanted = self._dataset._sequence_keys
        if not all(isinstance(key, str) for key in value):
            raise TypeError(f"{self._stage}: dict elements need str keys, got {list(value)}.")
        keys = tuple(value) if wanted is None else wanted
        missing = [key for key in keys if key not in value]
        if missing:
            raise ValueError(
                f"{self._stage}: `sequence_keys` names {missing}, which the element lacks "
                f"(its features: {list(value)})."
            )
        added = {_ROW_MASK} | {key + suffix for key in keys for suffix in _SUFFIXES}
        clash = sorted(added & value.keys())
        if clash:
            raise ValueError(
                f"{self._stage}: the element has features {clash}, names this stage adds to "
                "its output; rename them with a map first."
            )
        padding = self._dataset._padding
        if isinstance(padding, Mapping):
            unknown = sorted(set(padding) - set(keys))
            if unknown:
                raise ValueError(
                    f"`padding_value` names {unknown}, which are not sequence features "
                    f"(those are {list(keys)})."
                )
        self._keys = keys
        self._features = frozenset(value)
        self._is_dict = True

    def _sequence(self, leaf: Any, key: str | None) -> np.ndarray:
        """`leaf` as an array of ndim >= 1 whose dtype and trailing shape match the stream's."""
        array = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
        name = "the element" if key is None else f"feature {key!r}"
        if array.ndim == 0:
            raise ValueError(
                f"{self._stage}: {name} is a scalar; a sequence needs one entry per token. "
                "Leave scalar features out of `sequence_keys`."
            )
        spec = self._specs.get(key or "")
        if spec is None:
            if array.dtype.kind not in "biuf":
                raise TypeError(
                    f"{self._stage}: {name} has dtype {array.dtype}; sequences must be "
                    "numeric (tokenize before batching)."
                )
            self._specs[key or ""] = (array.dtype, array.shape[1:])
        elif array.dtype != spec[0] or array.shape[1:] != spec[1]:
            raise TypeError(
                f"{self._stage}: {name} has dtype {array.dtype} and shape {array.shape}, but "
                f"earlier elements had {spec[0]} and (n, {', '.join(map(str, spec[1]))}); a "
                "batch holds one dtype per feature, so cast or reshape with a map first."
            )
        return array

    def _too_long(self, value: Any, length: int) -> tuple[Any, int]:
        limit = self._lengths[-1]
        if not self._dataset._truncate:
            raise ValueError(
                f"{self._stage}: an element has {length} tokens, more than the longest padded "
                f"length {limit} (the last of `padded_lengths`), so no batch can hold it. "
                f"Truncate elements before (a map keeping [:{limit}]), pass truncate=True to "
                "cut them here, or add a longer padded length (at most `token_budget`)."
            )
        if not isinstance(value, dict):
            return value[:limit], limit
        for key in self._keys or ():
            value[key] = value[key][:limit]
        return value, limit

    # -- batches -------------------------------------------------------------------------

    def _rows(self, count: int, bucket: int) -> int:
        if self._dataset._full_rows:
            return self._max_rows[bucket]
        rows = self._dataset._rows
        return rows[bisect.bisect_left(rows, count)]

    def _assemble(self, elements: list[_Element], bucket: int) -> Any:
        padded = self._lengths[bucket]
        count = len(elements)
        rows = self._rows(count, bucket)
        row_mask = np.zeros(rows, dtype=bool)
        row_mask[:count] = True
        if not self._is_dict:
            values, lengths, mask = self._pad([e.value for e in elements], "", rows, padded)
            return values, lengths, mask, row_mask
        out: dict[str, Any] = {}
        keys = self._keys or ()
        first = elements[0].value
        for key in first:
            column = [e.value[key] for e in elements]
            if key in keys:
                out[key], out[key + "_lengths"], out[key + "_mask"] = self._pad(
                    column, key, rows, padded
                )
            else:
                out[key] = self._stack(column, key, rows)
        out[_ROW_MASK] = row_mask
        return out

    def _pad(
        self, column: list[np.ndarray], key: str, rows: int, padded: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        dtype, trailing = self._specs[key]
        padding = self._dataset._padding
        if isinstance(padding, Mapping):
            padding = padding.get(key, 0)
        shape = (rows, padded, *trailing)
        if padding == 0:
            values = np.zeros(shape, dtype=dtype)
        else:
            try:
                values = np.full(shape, padding, dtype=dtype)
            except (OverflowError, ValueError):
                values = np.zeros(shape, dtype=dtype)  # the check below raises
            if values.flat[0] != padding:
                raise ValueError(
                    f"`padding_value` {padding!r} does not fit the dtype {dtype} of "
                    f"{key or 'the elements'}; pick a padding value of that dtype."
                )
        lengths = np.zeros(rows, dtype=LENGTH_DTYPE)
        lengths[: len(column)] = [array.shape[0] for array in column]
        mask = np.arange(padded, dtype=LENGTH_DTYPE) < lengths[:, None]
        # The mask's True entries, in row-major order, are the rows' tokens in order:
        # one copy of all of them instead of a slice assignment per row.
        values[mask] = np.concatenate(column)
        return values, lengths, mask

    def _stack(self, column: list[Any], key: str, rows: int) -> np.ndarray:
        try:
            stacked = np.stack([np.asarray(value) for value in column])
        except ValueError as error:
            raise ValueError(
                f"{self._stage}: feature {key!r} is not a sequence feature and its values "
                f"differ in shape ({error}); list it in `sequence_keys` to pad it."
            ) from None
        if rows == len(column):
            return stacked
        out = np.zeros((rows, *stacked.shape[1:]), dtype=stacked.dtype)
        out[: len(column)] = stacked
        return out

    # -- the rules -----------------------------------------------------------------------

    def _join(self, element: _Element) -> tuple[list[_Element], int] | None:
        """Stream order: adds `element`; returns the batch it closed, if it did not fit."""
        bucket = max(self._open_bucket, element.bucket)
        if len(self._open) < self._max_rows[bucket]:
            self._open.append(element)
            self._open_bucket = bucket
            return None
        closed = self._open, self._open_bucket
        self._open, self._open_bucket = [element], element.bucket
        return closed

    def _sort(self, element: _Element) -> tuple[list[_Element], int] | None:
        """Bucketing: adds `element` to its bucket; returns the bucket if that filled it."""
        bucket = self._buckets[element.bucket]
        bucket.append(element)
        if len(bucket) < self._max_rows[element.bucket]:
            return None
        self._buckets[element.bucket] = []
        return bucket, element.bucket

    def _start_flush(self) -> None:
        """Bucketing, at a group's end: the leftovers, shortest first, in stream order."""
        batches = []
        for elements in self._buckets:
            for element in elements:
                closed = self._join(element)
                if closed is not None:
                    batches.append(closed)
        if self._open:
            batches.append((self._open, self._open_bucket))
        self._open, self._open_bucket = [], -1
        self._buckets = [[] for _ in self._lengths]
        self._flush = batches
        self._flushed = 0

    # -- the protocol --------------------------------------------------------------------

    def __next__(self) -> Any:
        if self._window is None:
            return self._next_in_order()
        return self._next_bucketed()

    def _next_in_order(self) -> Any:
        parent = self._parent
        while True:
            before = parent.get_state()
            try:
                value = next(parent)
            except StopIteration:
                if not self._open:
                    raise
                batch = self._open, self._open_bucket
                self._reset()
                self._anchor.move()
                return self._assemble(*batch)
            self._consumed += 1
            closed = self._join(self._prepare(value))
            if closed is not None:
                # The element that did not fit opens the next batch: resume before it.
                self._anchor.set(before)
                self._consumed = 1
                return self._assemble(*closed)

    def _next_bucketed(self) -> Any:
        parent = self._parent
        while True:
            if self._flush is not None:
                if self._flushed < len(self._flush):
                    batch = self._flush[self._flushed]
                    self._flushed += 1
                    self._emitted += 1
                    return self._assemble(*batch)
                # The group is done and nothing is held: the next one starts here.
                self._reset()
                self._anchor.move()
            if self._consumed == self._window:
                self._start_flush()
                continue
            try:
                value = next(parent)
            except StopIteration:
                if not any(self._buckets):
                    raise
                self._start_flush()
                continue
            self._consumed += 1
            full = self._sort(self._prepare(value))
            if full is not None:
                self._emitted += 1
                return self._assemble(*full)

    def get_state(self) -> dict[str, Any]:
        return {
            "parent": self._anchor.saved(),
            "consumed": self._consumed,
            "emitted": self._emitted,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, self._stage, _STATE_FIELDS)
        consumed, emitted = state["consumed"], state["emitted"]
        if self._window is not None and consumed > self._window:
            raise ValueError(
                f"cannot restore {self._stage}: state['consumed']={consumed} exceeds "
                f"bucket_window={self._window}. The state is from another pipeline."
            )
        self._anchor.restore(state["parent"])
        self._reset()
        feed = self._join if self._window is None else self._sort
        produced = 0
        # Replay: the same elements through the same rules rebuild what the stage held.
        for read in range(consumed):
            try:
                value = next(self._parent)
            except StopIteration:
                raise ValueError(
                    f"cannot restore {self._stage}: its state says {consumed} elements were "
                    f"read, but the parent ended after {read}. The state is from another "
                    "pipeline or data."
                ) from None
            if feed(self._prepare(value)) is not None:
                produced += 1
        self._consumed = consumed
        if produced > emitted or (self._window is None and (produced or emitted)):
            raise ValueError(
                f"cannot restore {self._stage}: replaying {consumed} elements gives "
                f"{produced} batches, but the state says {emitted}. The state is from "
                "another pipeline or data."
            )
        if produced == emitted:
            self._emitted = emitted
            return
        # Batches of the group's end were being returned.
        self._start_flush()
        assert self._flush is not None
        skip = emitted - produced
        if skip > len(self._flush):
            raise ValueError(
                f"cannot restore {self._stage}: state['emitted']={emitted} exceeds the "
                f"{produced + len(self._flush)} batches of its group. The state is from "
                "another pipeline or data."
            )
        self._flushed = skip
        self._emitted = emitted
