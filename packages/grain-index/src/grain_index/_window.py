"""Window shuffle: a keyed bijection inside each window of consecutive positions.

An epoch of `length` positions is cut into windows of `window_size`
consecutive positions (the last window holds the remainder). Position p of
epoch e reads the offset

    start + P_{e,w}(p - start)        w = p // window_size, start = w * window_size

where P_{e,w} is a permutation of the window's [0, size) keyed by
``derive_seed(seed, "window_shuffle", e, w)``: every window of every epoch has
its own order, and a position never leaves its window.

Everything is vectorized over arrays of positions whose windows (and epochs)
may all differ, which is why the ordinary `index_shuffle_array` (one seed per
call) does not fit: a call here would have to loop over windows, and with
small windows that is a loop per element. Instead the permutations take their
key per element, computed once per run of consecutive positions in one window:

* windows of at most `SMALL_WINDOW` positions sort 64-bit hashes of
  (key, slot), one `argsort` per window: every order of the window is
  reachable, with the hash's uniformity, where a Feistel network on halves of
  2 to 8 values reaches only a fraction of the orders (SHUFFLE.md);
* larger windows use the alternating Feistel network on Z_a x Z_b of
  SHUFFLE.md, its round keys derived from the window's key, with cycle walking
  for the fewer than `a` values outside [0, size).

A window's size is either `window_size` or, for the last window of an epoch,
``length % window_size``, so each call handles at most two domain sizes.
`window_shuffle` is the scalar form (Python ints, same values), for reading
one position without numpy's per-call overhead.

Example::

    offsets = window_shuffle_array(np.arange(10), 0, length=10, window_size=4, seed=7)
    # offsets[:4] is a permutation of 0..3, offsets[4:8] of 4..7, offsets[8:] of 8, 9
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from grain_index import _seeds, _validate
from grain_index._shuffle import DEFAULT_ROUNDS, MAX_RECORDS

SMALL_WINDOW = 64
"""Windows of at most this many positions are shuffled exactly, by ranking hashes."""

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_CHUNK = 8192  # elements per Feistel block: its buffers stay in L2 cache
_SMALL_CHUNK = 4096  # rows per ranking block: 4096 x 64 hashes = 2 MiB
# Distinct words that separate the round keys of one window from each other and
# from the ranking hashes (any fixed, distinct constants would do).
_ROUND_WORDS = np.arange(1, 65, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
_RANK_WORD = np.uint64(0xD1B54A32D192ED03)


def window_keys(seed: int, epochs: Any, windows: Any) -> np.ndarray:
    """``derive_seed(seed, "window_shuffle", epochs[k], windows[k])`` for every k, as uint64.

    `epochs` and `windows` are broadcast against each other; values must lie
    in [0, 2**64).
    """
    prefix = np.uint64(_seeds.derive_seed(seed, "window_shuffle"))
    epochs = np.asarray(epochs).astype(np.uint64)
    windows = np.asarray(windows).astype(np.uint64)
    inner = _seeds.mix64_array(prefix ^ _seeds.mix64_array(epochs))
    return _seeds.mix64_array(inner ^ _seeds.mix64_array(windows))


def _runs(epochs: np.ndarray, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first element of each run, run number of each element).

    A run is a stretch of consecutive elements in one window of one epoch; the
    keys (and, for small windows, the whole order) are computed once per run,
    which for the usual consecutive positions is once per window.
    """
    change = np.empty(epochs.shape, dtype=bool)
    change[:1] = True
    np.not_equal(epochs[1:], epochs[:-1], out=change[1:])
    change[1:] |= windows[1:] != windows[:-1]
    run_of = np.cumsum(change) - 1
    return np.flatnonzero(change), run_of


def _rank_permute(
    positions: np.ndarray, run_of: np.ndarray, keys: np.ndarray, size: int
) -> np.ndarray:
    """P(positions) for windows of `size` <= SMALL_WINDOW: the rank order of hashed slots."""
    # Slot j of a window gets the hash mix64(key ^ word_j); the window's order is
    # the slots sorted by hash, and position p reads the p-th slot of that order.
    words = _seeds.mix64_array(np.arange(size, dtype=np.uint64) ^ _RANK_WORD)
    out = np.empty(positions.shape, dtype=np.int64)
    for start in range(0, positions.size, _SMALL_CHUNK):
        stop = start + _SMALL_CHUNK
        runs = run_of[start:stop]
        # run_of never decreases, so this block's runs are one contiguous range.
        first, last = int(runs[0]), int(runs[-1])
        hashes = _seeds.mix64_array(keys[first : last + 1, None] ^ words[None, :])
        # A stable sort keeps the order a bijection even for equal hashes.
        order = np.argsort(hashes, axis=1, kind="stable")
        out[start:stop] = order[runs - first, positions[start:stop]]
    return out


def _feistel_pass(
    x: np.ndarray, kx: np.ndarray, km: np.ndarray, a: int, b: int, rounds: int
) -> np.ndarray:
    """One pass of the alternating Feistel network on Z_a x Z_b, with per-element keys.

    `kx` and `km` have shape (rounds, len(x)); round r adds
    ``mulhi32(fold((lo ^ kx_r) * km_r), s_r)`` to the high half modulo s_r,
    then swaps the halves (s_r = a on even rounds, b on odd ones).
    """
    sizes = (np.uint64(a), np.uint64(b))
    hi, lo = np.divmod(x, np.uint64(b))
    for r in range(rounds):
        s = sizes[r % 2]
        # lo < 2**32 and kx, km < 2**32, so the product fits in 64 bits.
        h = (lo ^ kx[r]) * km[r]
        h = (h >> _SHIFT32) ^ (h & _MASK32)
        f = (h * s) >> _SHIFT32
        v = hi + f
        # (hi + f) mod s without a division: v - s wraps around when v < s.
        hi, lo = lo, np.minimum(v, v - s)
    # After an even number of rounds the low half is back in Z_b, else in Z_a.
    return hi * sizes[1 - rounds % 2] + lo


def _feistel_permute(
    positions: np.ndarray, run_of: np.ndarray, keys: np.ndarray, size: int, rounds: int
) -> np.ndarray:
    """P(positions) for windows of `size` > SMALL_WINDOW, keyed per run by `keys`."""
    a = math.isqrt(size - 1) + 1
    b = -(-size // a)
    out = np.empty(positions.shape, dtype=np.int64)
    limit = np.uint64(size)
    for start in range(0, positions.size, _CHUNK):
        stop = start + _CHUNK
        runs = run_of[start:stop]
        first, last = int(runs[0]), int(runs[-1])
        round_keys = _seeds.mix64_array(keys[None, first : last + 1] ^ _ROUND_WORDS[:rounds, None])
        if last > first:
            round_keys = round_keys[:, runs - first]
        # One run (a block inside one window) broadcasts its keys over the block.
        kx = round_keys & _MASK32
        km = (round_keys >> _SHIFT32) | np.uint64(1)
        x = _feistel_pass(positions[start:stop].astype(np.uint64), kx, km, a, b, rounds)
        # Cycle walking: the few values that left [0, size) go through again.
        pending = np.flatnonzero(x >= limit)
        while pending.size:
            if last > first:
                moved = _feistel_pass(x[pending], kx[:, pending], km[:, pending], a, b, rounds)
            else:
                moved = _feistel_pass(x[pending], kx, km, a, b, rounds)
            x[pending] = moved
            pending = pending[moved >= limit]
        out[start:stop] = x.view(np.int64)
    return out


def _permute(
    positions: np.ndarray,
    epochs: np.ndarray,
    windows: np.ndarray,
    seed: int,
    size: int,
    rounds: int,
) -> np.ndarray:
    """P_{e,w}(positions) for windows that all have `size` positions."""
    if size == 1 or not positions.size:
        return np.zeros(positions.shape, dtype=np.int64)
    run_starts, run_of = _runs(epochs, windows)
    keys = window_keys(seed, epochs[run_starts], windows[run_starts])
    if size <= SMALL_WINDOW:
        return _rank_permute(positions, run_of, keys, size)
    return _feistel_permute(positions, run_of, keys, size, rounds)


def window_shuffle_array(
    offsets: Any,
    epochs: Any,
    *,
    length: int,
    window_size: int,
    seed: int,
    rounds: int = DEFAULT_ROUNDS,
) -> np.ndarray:
    """Returns, for each position, the offset it reads in a window-shuffled epoch.

    Args:
      offsets: positions within their epoch, integers in [0, length).
      epochs: the epoch of each position (integers in [0, 2**64)), an array
        broadcast against `offsets` or one int for all.
      length: positions per epoch, in [1, 2**63).
      window_size: positions per window, >= 1; a window as large as the epoch
        shuffles the whole epoch.
      seed: an integer in [0, 2**64).
      rounds: Feistel rounds for windows larger than `SMALL_WINDOW`, in [1, 64].

    Returns:
      An int64 array of the shape of `offsets`. Within one epoch, the map from
      an offset to its result is a bijection on [0, length) that keeps every
      window of `window_size` consecutive offsets in place as a set.

    Example::

        out = window_shuffle_array(np.arange(6), 3, length=6, window_size=3, seed=0)
        assert sorted(out[:3]) == [0, 1, 2] and sorted(out[3:]) == [3, 4, 5]
    """
    length = _validate.int_in_range(length, "length", 1, MAX_RECORDS)
    window_size = _validate.int_in_range(window_size, "window_size", 1)
    seed = _validate.seed(seed)
    rounds = _validate.int_in_range(rounds, "rounds", 1, len(_ROUND_WORDS) + 1)
    offsets = _validate.index_array(offsets, "offsets")
    if offsets.size:
        low, high = int(offsets.min()), int(offsets.max())
        if low < 0 or high >= length:
            bad = low if low < 0 else high
            raise ValueError(f"`offsets` must be >= 0 and < length ({length}), got {bad}.")
    epochs = _validate.index_array(epochs, "epochs")
    if epochs.size and int(epochs.min()) < 0:
        raise ValueError(f"`epochs` must be >= 0, got {int(epochs.min())}.")
    shape = np.broadcast_shapes(offsets.shape, epochs.shape)
    flat = np.broadcast_to(offsets, shape).astype(np.int64).ravel()
    flat_epochs = np.broadcast_to(epochs, shape).ravel()
    window_size = min(window_size, length)
    windows = flat // window_size
    starts = windows * window_size
    positions = flat - starts
    full_windows = length // window_size
    full = windows < full_windows
    if full.all():
        out = _permute(positions, flat_epochs, windows, seed, window_size, rounds)
    else:
        # Positions of the last, partial window form a domain of their own size.
        out = np.empty_like(flat)
        out[full] = _permute(
            positions[full], flat_epochs[full], windows[full], seed, window_size, rounds
        )
        rest = ~full
        last_size = length - full_windows * window_size
        out[rest] = _permute(
            positions[rest], flat_epochs[rest], windows[rest], seed, last_size, rounds
        )
    return (starts + out).reshape(shape)


# -- the scalar form: the same values, one position at a time, in Python ints -------------


@functools.lru_cache(maxsize=64)
def _prefix(seed: int) -> int:
    return _seeds.derive_seed(seed, "window_shuffle")


@functools.lru_cache(maxsize=256)
def _rank_order(key: int, size: int) -> tuple[int, ...]:
    """The slots of a small window in output order (cached: neighbours share a window)."""
    mix64 = _seeds.mix64
    rank_word = int(_RANK_WORD)
    hashes = [mix64(key ^ mix64(j ^ rank_word)) for j in range(size)]
    # `sorted` is stable, like the array form's argsort(kind="stable").
    return tuple(sorted(range(size), key=hashes.__getitem__))


@functools.lru_cache(maxsize=256)
def _round_keys(key: int, rounds: int) -> tuple[tuple[int, int], ...]:
    keys = []
    for r in range(rounds):
        k = _seeds.mix64(key ^ int(_ROUND_WORDS[r]))
        keys.append((k & 0xFFFFFFFF, (k >> 32) | 1))
    return tuple(keys)


def _feistel_scalar(position: int, key: int, size: int, rounds: int) -> int:
    a = math.isqrt(size - 1) + 1
    b = -(-size // a)
    sizes = (a, b)
    keys = _round_keys(key, rounds)
    x = position
    while True:
        hi, lo = divmod(x, b)
        for r, (kx, km) in enumerate(keys):
            s = sizes[r % 2]
            h = (lo ^ kx) * km
            v = hi + ((((h >> 32) ^ (h & 0xFFFFFFFF)) * s) >> 32)
            hi, lo = lo, (v - s if v >= s else v)
        x = hi * sizes[1 - rounds % 2] + lo
        if x < size:  # cycle walking, as in the array form
            return x


def window_shuffle(
    offset: int,
    epoch: int,
    *,
    length: int,
    window_size: int,
    seed: int,
    rounds: int = DEFAULT_ROUNDS,
) -> int:
    """The scalar `window_shuffle_array`: the offset that `offset` of `epoch` reads.

    Equal to ``window_shuffle_array([offset], epoch, ...)[0]`` and about ten
    times faster for one position (no numpy call overhead).
    """
    length = _validate.int_in_range(length, "length", 1, MAX_RECORDS)
    window_size = _validate.int_in_range(window_size, "window_size", 1)
    seed = _validate.seed(seed)
    rounds = _validate.int_in_range(rounds, "rounds", 1, len(_ROUND_WORDS) + 1)
    offset = _validate.int_in_range(offset, "offset", 0, length)
    epoch = _validate.int_in_range(epoch, "epoch", 0, _validate.UINT64_LIMIT)
    window_size = min(window_size, length)
    window, position = divmod(offset, window_size)
    start = window * window_size
    size = min(window_size, length - start)
    if size == 1:
        return start
    mix64 = _seeds.mix64
    key = mix64(mix64(_prefix(seed) ^ mix64(epoch)) ^ mix64(window))
    if size <= SMALL_WINDOW:
        return start + _rank_order(key, size)[position]
    return start + _feistel_scalar(position, key, size, rounds)
