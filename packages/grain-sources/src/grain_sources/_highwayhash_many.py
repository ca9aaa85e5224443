"""HighwayHash-64 of many inputs at once, vectorized with numpy.

The inputs are independent, so numpy updates the lanes of all of them per
32-byte packet: one Python step per packet of the longest input, whatever the
number of inputs. The state is four uint64 arrays of shape (inputs, 4) (uint64
arithmetic wraps mod 2**64 as the algorithm wants); the zipper is one byte
gather per state vector (`_highwayhash.ZIPPER`).

Inputs are sorted longest first, so packet k updates a prefix of the rows (the
inputs that have a k-th packet), and their packets are laid out packet-major:
packet k of every input that has one is one contiguous slice of a flat table,
gathered from the joined inputs by a sliding-window view (no per-input copy).
Once fewer than `_MIN_INPUTS` rows are left, numpy's per-call overhead costs
more than the scalar hash: those few longest inputs (one large chunk among
small ones) finish in `_highwayhash.resume` from the state reached.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grain_sources._highwayhash import INIT0, INIT1, RIEGELI_KEY, ZIPPER, hash64, resume

_U = np.uint64
_LO32 = _U(0xFFFFFFFF)
_SHIFT32 = _U(32)
_ZIPPER = np.array(ZIPPER, dtype=np.intp)
# Below this many inputs the scalar hash is faster than numpy's per-call overhead.
_MIN_INPUTS = 5


def _rot32(x: np.ndarray) -> np.ndarray:
    return (x >> _SHIFT32) | (x << _SHIFT32)


def _update(state: list[np.ndarray], packet: np.ndarray, scratch: list[np.ndarray]) -> None:
    """One packet per row into the state [v0, v1, mul0, mul1] (all of `packet`'s length)."""
    v0, v1, mul0, mul1 = state
    low, high = scratch
    v1 += mul0
    v1 += packet
    np.bitwise_and(v1, _LO32, out=low)
    np.right_shift(v0, _SHIFT32, out=high)
    low *= high
    mul0 ^= low
    v0 += mul1
    np.bitwise_and(v0, _LO32, out=low)
    np.right_shift(v1, _SHIFT32, out=high)
    low *= high
    mul1 ^= low
    v0 += np.take(v1.view(np.uint8), _ZIPPER, axis=1).view(np.uint64)
    v1 += np.take(v0.view(np.uint8), _ZIPPER, axis=1).view(np.uint64)


def _rows(state: list[np.ndarray], rows: int | np.ndarray) -> list[np.ndarray]:
    return [part[:rows] if isinstance(rows, int) else part[rows] for part in state]


def hash64_many(
    inputs: Sequence[bytes | memoryview], key: tuple[int, int, int, int] = RIEGELI_KEY
) -> list[int]:
    """`hash64` of each of `inputs`, computed together (see the module's doc)."""
    count = len(inputs)
    if count < _MIN_INPUTS:
        return [hash64(data, key) for data in inputs]
    sizes = np.fromiter(map(len, inputs), dtype=np.int64, count=count)
    order = np.argsort(-sizes, kind="stable")
    sizes = sizes[order]
    # The inputs joined in sorted order, padded so that any 32-byte window fits.
    joined = np.frombuffer(b"".join([inputs[i] for i in order.tolist()]) + bytes(32), np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view(joined, 32)
    starts = np.cumsum(sizes) - sizes
    packets = sizes // 32
    # active[k]: how many rows have a packet k (a prefix: rows are sorted). Numpy
    # steps while enough rows are active; the few longest inputs finish in `resume`.
    active = np.searchsorted(-packets, -np.arange(int(packets[0])), side="left")
    steps = int(np.count_nonzero(active >= _MIN_INPUTS))
    taken = np.minimum(packets, steps)
    slots = np.concatenate(([0], np.cumsum(active[:steps])))
    # Packet k of row r goes to flat row slots[k] + r.
    row = np.repeat(np.arange(count), taken)
    k = np.arange(row.size) - np.repeat(np.cumsum(taken) - taken, taken)
    flat = np.empty((row.size, 32), np.uint8)
    flat[slots[k] + row] = windows[starts[row] + 32 * k]
    lanes = flat.view("<u8").astype(np.uint64, copy=False)

    key_lanes = np.array(key, dtype=np.uint64)
    state = [
        np.tile(np.array(INIT0, dtype=np.uint64) ^ key_lanes, (count, 1)),
        np.tile(np.array(INIT1, dtype=np.uint64) ^ _rot32(key_lanes), (count, 1)),
        np.tile(np.array(INIT0, dtype=np.uint64), (count, 1)),
        np.tile(np.array(INIT1, dtype=np.uint64), (count, 1)),
    ]
    scratch = [np.empty((count, 4), np.uint64), np.empty((count, 4), np.uint64)]
    for step in range(steps):
        rows = int(active[step])
        _update(_rows(state, rows), lanes[slots[step] : slots[step + 1]], _rows(scratch, rows))
    longer = {
        row: resume([part[row] for part in state], inputs[int(order[row])], 32 * steps)
        for row in np.flatnonzero(packets > steps).tolist()
    }

    tails = sizes % 32
    with_tail = np.flatnonzero(tails)
    if with_tail.size:
        _remainders(
            state,
            with_tail,
            tails[with_tail],
            starts[with_tail] + 32 * packets[with_tail],
            joined,
            windows,
        )
    for _ in range(4):
        _update(state, _rot32(state[0][:, [2, 3, 0, 1]]), scratch)
    total = state[0][:, 0] + state[1][:, 0] + state[2][:, 0] + state[3][:, 0]
    total[list(longer)] = list(longer.values())
    out = np.empty(count, dtype=np.uint64)
    out[order] = total
    return out.tolist()


def _remainders(
    state: list[np.ndarray],
    rows: np.ndarray,
    tail: np.ndarray,
    at: np.ndarray,
    joined: np.ndarray,
    windows: np.ndarray,
) -> None:
    """The remainder step of `rows`, whose last `tail` (1..31) bytes start at `at` in `joined`.

    `_highwayhash.remainder_packet`, vectorized: the tail's whole 4-byte words,
    then either its last four bytes at 28..31 (a tail of 16 or more) or its
    first, middle and last leftover bytes at 16, 17 and 18.
    """
    words = tail & ~3
    packet = windows[at].copy()
    packet[np.arange(32) >= words[:, None]] = 0
    long_tail = (tail & 16) != 0
    packet[long_tail, 28:] = windows[at[long_tail] + tail[long_tail] - 4][:, :4]
    short = ~long_tail & (tail > words)
    left = words[short]
    begin = at[short]
    packet[short, 16] = joined[begin + left]
    packet[short, 17] = joined[begin + left + ((tail[short] - left) >> 1)]
    packet[short, 18] = joined[begin + tail[short] - 1]

    sub = _rows(state, rows)
    size = tail.astype(np.uint64)
    sub[0] += ((size << _SHIFT32) + size)[:, None]
    # Each 32-bit half of v1 rotated left by the tail's size.
    shift = size[:, None]
    halves = [sub[1] & _LO32, sub[1] >> _SHIFT32]
    low, high = (((h << shift) | (h >> (_SHIFT32 - shift))) & _LO32 for h in halves)
    sub[1] = low | (high << _SHIFT32)
    _update(
        sub,
        packet.view("<u8").astype(np.uint64, copy=False),
        [np.empty_like(sub[0]) for _ in range(2)],
    )
    for part, updated in zip(state, sub, strict=True):
        part[rows] = updated
