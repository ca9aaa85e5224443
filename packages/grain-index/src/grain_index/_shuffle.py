"""Keyed bijective index shuffle on [0, n) for every n from 1 to 2**63.

`index_shuffle(i, max_index, seed, rounds)` is the record that position `i` of
a shuffled order reads; `index_unshuffle` is its inverse (the position where a
record lands). Both exist as scalar functions and as numpy-vectorized functions
that give identical values. Memory is O(1) in n. SHUFFLE.md beside this file
explains the construction and why it is uniform enough.

In short: n <= 64 uses an exact Fisher-Yates table drawn from the seed. Larger
n use an alternating Feistel network on Z_a x Z_b with a*b >= n, a = ceil(sqrt n),
and cycle walking for the fewer than `a` values in [n, a*b).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from grain_index import _seeds, _validate

DEFAULT_ROUNDS = 6
"""Rounds used by the library's own shuffles (samplers, `MapDataset.shuffle`)."""

MAX_RECORDS = 1 << 63
"""The largest supported domain: `max_index` may be at most 2**63 - 1."""

SMALL_DOMAIN = 64
"""Domains of at most this many indices use an exact Fisher-Yates table."""

_MASK32 = 0xFFFFFFFF
_UINT64_LIMIT = _validate.UINT64_LIMIT
_CHUNK = 8192  # elements per vectorized block: the block's buffers stay in L2 cache


class _Plan:
    """Everything the shuffle of one (n, seed, rounds) needs, derived once."""

    __slots__ = (
        "b",
        "inverse_array",
        "inverse_table",
        "last",
        "n",
        "np_keys",
        "np_keys_reversed",
        "rounds",
        "table",
        "table_array",
    )

    def __init__(self, n: int, seed: int, rounds: int):
        self.n = n
        self.table: tuple[int, ...] | None = None
        if n <= SMALL_DOMAIN:
            table = list(range(n))
            for i in range(n - 1, 0, -1):
                j = ((_seeds.derive_seed(seed, "fisher-yates", i) >> 32) * (i + 1)) >> 32
                table[i], table[j] = table[j], table[i]
            self.table = tuple(table)
            inverse = [0] * n
            for position, record in enumerate(table):
                inverse[record] = position
            self.inverse_table = tuple(inverse)
            self.table_array = np.array(table, dtype=np.uint64)
            self.inverse_array = np.array(inverse, dtype=np.uint64)
            return
        a = math.isqrt(n - 1) + 1
        b = -(-n // a)
        self.b = b
        # The halves swap sizes every round; `last` is the size of the low half
        # after the final round.
        self.last = b if rounds % 2 == 0 else a
        keys = []
        for r in range(rounds):
            k = _seeds.derive_seed(seed, "feistel", r)
            keys.append((k & _MASK32, (k >> 32) | 1, a if r % 2 == 0 else b))
        self.rounds = tuple(keys)
        self.np_keys = [tuple(np.uint64(v) for v in key) for key in keys]
        self.np_keys_reversed = self.np_keys[::-1]


@functools.lru_cache(maxsize=512)
def _plan(n: int, seed: int, rounds: int) -> _Plan:
    return _Plan(n, seed, rounds)


def _unrolled(plan: _Plan, inverse: bool) -> Callable[[int], int]:
    """Compiles the plan's scalar forward (or backward) pass with every key inlined.

    Only integers derived from the seed enter the source, never user text. The
    unrolled pass measured 5-10% faster than a loop over the round keys, which matters
    at a budget of 2 us per call.
    """
    lines = ["def walk(x):", "    while True:"]
    if inverse:
        lines.append(f"        hi, lo = divmod(x, {plan.last})")
        for kx, km, s in reversed(plan.rounds):
            lines += [
                f"        h = (hi ^ {kx}) * {km}",
                f"        c = lo - (((h >> 32) ^ (h & 0xFFFFFFFF)) * {s} >> 32)",
                f"        hi, lo = (c + {s} if c < 0 else c), hi",
            ]
        lines.append(f"        x = hi * {plan.b} + lo")
    else:
        lines.append(f"        hi, lo = divmod(x, {plan.b})")
        for kx, km, s in plan.rounds:
            # Round function: a 32x32 -> 64 bit product folded hi ^ lo (wyhash's
            # "mum"), scaled into [0, s) by a multiply-high; never exceeds 64 bits.
            lines += [
                f"        h = (lo ^ {kx}) * {km}",
                f"        c = hi + (((h >> 32) ^ (h & 0xFFFFFFFF)) * {s} >> 32)",
                f"        hi, lo = lo, (c - {s} if c >= {s} else c)",
            ]
        lines.append(f"        x = hi * {plan.last} + lo")
    lines += [f"        if x < {plan.n}:", "            return x"]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<index_shuffle n={plan.n}>", "exec"), namespace)
    return namespace["walk"]


@functools.lru_cache(maxsize=1024)
def _scalar_function(n: int, seed: int, rounds: int, inverse: bool) -> Callable[[int], int]:
    """The scalar forward (or backward) function of one shuffle, built on first use."""
    plan = _plan(n, seed, rounds)
    if plan.table is not None:
        return (plan.inverse_table if inverse else plan.table).__getitem__
    return _unrolled(plan, inverse)


def _checked_plan(max_index: Any, seed: Any, rounds: Any) -> _Plan:
    max_index = _validate.int_in_range(max_index, "max_index", 0, MAX_RECORDS)
    seed = _validate.seed(seed)
    rounds = _validate.int_in_range(rounds, "rounds", 1)
    return _plan(max_index + 1, seed, rounds)


def index_shuffle(index: int, max_index: int, seed: int, rounds: int) -> int:
    """Returns the record at position `index` of a keyed shuffle of [0, max_index].

    The map ``index -> index_shuffle(index, max_index, seed, rounds)`` is a
    bijection on [0, max_index]; each value is computed alone in O(rounds) time
    and O(1) memory, so a shuffled order never has to be materialized.

    Args:
      index: a position in [0, max_index].
      max_index: the largest index (inclusive), in [0, 2**63 - 1].
      seed: an integer in [0, 2**64); different seeds give unrelated orders.
      rounds: Feistel rounds, >= 1. More rounds mix better and cost more;
        `DEFAULT_ROUNDS` (6) is what the library's own shuffles use.

    Example::

        order = [index_shuffle(i, max_index=9, seed=42, rounds=6) for i in range(10)]
        assert sorted(order) == list(range(10))
    """
    # The all-`int` valid call is checked inline: this function's budget is ~2 us.
    if not (
        type(index) is int
        and type(max_index) is int
        and type(seed) is int
        and type(rounds) is int
        and 0 <= index <= max_index < MAX_RECORDS
        and 0 <= seed < _UINT64_LIMIT
        and rounds >= 1
    ):
        if type(index) is int and type(max_index) is int and not 0 <= index <= max_index:
            bad = (
                "`max_index` must be >= 0" if max_index < 0 else "`index` must be in [0, max_index]"
            )
            raise ValueError(
                f"index must be in [0, max_index], but got index = {index} and "
                f"max_index = {max_index}. {bad}: pass a position of the shuffled range."
            )
        plan = _checked_plan(max_index, seed, rounds)
        index = _validate.int_in_range(index, "index", 0, plan.n)
    return _scalar_function(max_index + 1, seed, rounds, False)(index)


def index_unshuffle(position: int, max_index: int, seed: int, rounds: int) -> int:
    """The inverse of `index_shuffle`: the position where record `position` lands.

    ``index_unshuffle(index_shuffle(i, m, s, r), m, s, r) == i`` for every i.
    """
    # The same inline check as `index_shuffle`: a helper call would cost ~10% per call.
    if not (
        type(position) is int
        and type(max_index) is int
        and type(seed) is int
        and type(rounds) is int
        and 0 <= position <= max_index < MAX_RECORDS
        and 0 <= seed < _UINT64_LIMIT
        and rounds >= 1
    ):
        plan = _checked_plan(max_index, seed, rounds)
        position = _validate.int_in_range(position, "position", 0, plan.n)
    return _scalar_function(max_index + 1, seed, rounds, True)(position)


def index_shuffle_function(
    max_index: int, seed: int, rounds: int = DEFAULT_ROUNDS
) -> Callable[[int], int]:
    """Returns ``lambda i: index_shuffle(i, max_index, seed, rounds)`` without per-call checks.

    For hot loops over one shuffle (a dataset's random access): the arguments
    are checked once here, and the returned function trusts its input, which
    must be an int in [0, max_index].
    """
    _checked_plan(max_index, seed, rounds)
    return _scalar_function(max_index + 1, seed, rounds, False)


def _checked_array(values: Any, name: str, n: int) -> np.ndarray:
    array = _validate.index_array(values, name)
    if array.size:
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= n:
            bad = low if low < 0 else high
            raise ValueError(f"`{name}` must be >= 0 and < {n} (max_index + 1), got {bad}.")
    return array


def _result_dtype(array: np.ndarray) -> np.dtype:
    return np.dtype(np.uint64) if array.dtype.kind == "u" else np.dtype(np.int64)


def _feistel_blocks(x: np.ndarray, plan: _Plan, inverse: bool) -> np.ndarray:
    """Applies one pass of the Feistel network to uint64 `x`, block by block."""
    u64 = np.uint64
    shift, mask = u64(32), u64(_MASK32)
    split, join = (u64(plan.last), u64(plan.b)) if inverse else (u64(plan.b), u64(plan.last))
    keys = plan.np_keys_reversed if inverse else plan.np_keys
    out = np.empty_like(x)
    size = min(_CHUNK, x.size)
    buffers = [np.empty(size, u64) for _ in range(4)]
    for start in range(0, x.size, _CHUNK):
        block = x[start : start + _CHUNK]
        hi, lo, h, t = (buffer[: block.size] for buffer in buffers)
        np.floor_divide(block, split, out=hi)
        np.multiply(hi, split, out=lo)
        np.subtract(block, lo, out=lo)
        for kx, km, s in keys:
            # `h` becomes the round function of the half that stays unchanged.
            np.bitwise_xor(hi if inverse else lo, kx, out=h)
            np.multiply(h, km, out=h)
            np.right_shift(h, shift, out=t)
            np.bitwise_and(h, mask, out=h)
            np.bitwise_xor(h, t, out=h)
            np.multiply(h, s, out=h)
            np.right_shift(h, shift, out=h)
            if inverse:
                # lo_old = (lo - f) mod s, computed as min(v, v - s) for v = lo + s - f.
                np.subtract(s, h, out=h)
                np.add(h, lo, out=h)
                np.subtract(h, s, out=t)
                np.minimum(h, t, out=h)
                hi, lo, h = h, hi, lo
            else:
                # (hi + f) mod s without a division: min(v, v - s) wraps the second.
                np.add(h, hi, out=h)
                np.subtract(h, s, out=t)
                np.minimum(h, t, out=h)
                hi, lo, h = lo, h, hi
        result = out[start : start + block.size]
        np.multiply(hi, join, out=result)
        np.add(result, lo, out=result)
    return out


def _apply_array(
    values: Any, name: str, max_index: Any, seed: Any, rounds: Any, inverse: bool
) -> np.ndarray:
    plan = _checked_plan(max_index, seed, rounds)
    array = _checked_array(values, name, plan.n)
    dtype = _result_dtype(array)
    if plan.table is not None:
        table = plan.inverse_array if inverse else plan.table_array
        return table[array.astype(np.intp)].astype(dtype)
    flat = np.ascontiguousarray(array.ravel())
    # Values are checked to lie in [0, 2**63), so 64-bit input is reinterpreted, not copied.
    x = flat.view(np.uint64) if flat.dtype.itemsize == 8 else flat.astype(np.uint64)
    out = _feistel_blocks(x, plan, inverse)
    # Cycle walking: the few values that left [0, n) go through the network again.
    pending = np.flatnonzero(out >= np.uint64(plan.n))
    while pending.size:
        moved = _feistel_blocks(out[pending], plan, inverse)
        out[pending] = moved
        pending = pending[moved >= np.uint64(plan.n)]
    return out.view(dtype).reshape(array.shape)


def index_shuffle_array(
    indices: Any, max_index: int, seed: int, rounds: int = DEFAULT_ROUNDS
) -> np.ndarray:
    """Vectorized `index_shuffle`: the same values for a whole integer array.

    Returns an array of the shape of `indices` (uint64 for unsigned input,
    int64 otherwise) whose element k equals
    ``index_shuffle(int(indices[k]), max_index, seed, rounds)``.
    """
    return _apply_array(indices, "indices", max_index, seed, rounds, inverse=False)


def index_unshuffle_array(
    positions: Any, max_index: int, seed: int, rounds: int = DEFAULT_ROUNDS
) -> np.ndarray:
    """Vectorized `index_unshuffle`, the inverse of `index_shuffle_array`."""
    return _apply_array(positions, "positions", max_index, seed, rounds, inverse=True)
