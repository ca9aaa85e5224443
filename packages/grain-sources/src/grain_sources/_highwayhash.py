"""64-bit HighwayHash, the checksum of Riegeli block and chunk headers and chunk data.

Written from the algorithm's public description (four 64-bit lanes of two
state vectors and two multiplier vectors, updated per 32-byte packet, a
length-dependent remainder packet, four permute-and-update rounds). Python
ints stand in for the SIMD lanes; every sum is reduced mod 2**64. It costs
about 5 µs per 32 bytes (the unrolled `_packets`); readers verify each chunk
once, when they read it.

The known answers (the fixed first 64 bytes of every Riegeli file) are checked
in tests/test_riegeli.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

_M = 0xFFFFFFFFFFFFFFFF
_M32 = 0xFFFFFFFF
_INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_LANES = struct.Struct("<4Q")

RIEGELI_KEY = (0x2F696C6567656952, 0x0A7364726F636572, 0x2F696C6567656952, 0x0A7364726F636572)
"""The key Riegeli hashes with: 'Riegeli/', 'records\\n', twice."""


def _zipper(v1: int, v0: int) -> tuple[int, int]:
    """The byte shuffles added to (add1, add0) from the lane pair (v1, v0)."""
    add0 = (
        (((v0 & 0xFF000000) | (v1 & 0xFF00000000)) >> 24)
        | (((v0 & 0xFF0000000000) | (v1 & 0xFF000000000000)) >> 16)
        | (v0 & 0xFF0000)
        | ((v0 & 0xFF00) << 32)
        | ((v1 & 0xFF00000000000000) >> 8)
        | ((v0 << 56) & _M)
    )
    add1 = (
        (((v1 & 0xFF000000) | (v0 & 0xFF00000000)) >> 24)
        | (v1 & 0xFF0000)
        | ((v1 & 0xFF0000000000) >> 16)
        | ((v1 & 0xFF00) << 24)
        | ((v0 & 0xFF000000000000) >> 8)
        | ((v1 & 0xFF) << 48)
        | (v0 & 0xFF00000000000000)
    )
    return add1, add0


def _remainder_packet(tail: bytes) -> bytes:
    """The 32-byte packet made of the last ``len(data) % 32`` bytes of the input."""
    size = len(tail)
    whole = size & ~3
    packet = bytearray(32)
    packet[:whole] = tail[:whole]
    rest = tail[whole:]
    if size & 16:
        # The last four bytes of the input, wherever they start.
        packet[28:32] = tail[size - 4 : size]
    elif rest:
        packet[16] = rest[0]
        packet[17] = rest[len(rest) >> 1]
        packet[18] = rest[-1]
    return bytes(packet)


class _State:
    __slots__ = ("mul0", "mul1", "v0", "v1")

    def __init__(self, key: tuple[int, int, int, int]):
        self.mul0 = list(_INIT0)
        self.mul1 = list(_INIT1)
        self.v0 = [m ^ k for m, k in zip(_INIT0, key, strict=True)]
        self.v1 = [m ^ (((k >> 32) | (k << 32)) & _M) for m, k in zip(_INIT1, key, strict=True)]

    def remainder(self, tail: bytes) -> None:
        size = len(tail)  # < 32
        for i in range(4):
            self.v0[i] = (self.v0[i] + (size << 32) + size) & _M
        # Each 32-bit half of v1 rotated left by `size` bits.
        rotated = []
        for lane in self.v1:
            halves = [lane & _M32, lane >> 32]
            halves = [((h << size) | (h >> (32 - size))) & _M32 if size else h for h in halves]
            rotated.append(halves[0] | (halves[1] << 32))
        self.v1 = rotated
        _packets(self, memoryview(_remainder_packet(tail)), 32)

    def finish(self) -> int:
        for _ in range(4):
            v0 = self.v0
            permuted = [((lane >> 32) | (lane << 32)) & _M for lane in (v0[2], v0[3], v0[0], v0[1])]
            _packets(self, memoryview(_LANES.pack(*permuted)), 32)
        return (self.v0[0] + self.v1[0] + self.mul0[0] + self.mul1[0]) & _M


def _packets(state: _State, view: memoryview, whole: int) -> None:
    """Updates `state` with every 32-byte packet of ``view[:whole]``, unrolled.

    Per packet: each lane of v1 takes mul0 and the input, mul0 a 32x32-bit
    product of v1 and v0, v0 takes mul1, mul1 a product of v0 and v1; then the
    zipper merges add byte shuffles of v1's lane pairs to v0 and of v0's to v1.
    Unrolled, with the sixteen lanes in locals: CPython's list indexing would
    otherwise cost several times more.
    """
    a0, a1, a2, a3 = state.v0
    b0, b1, b2, b3 = state.v1
    m0, m1, m2, m3 = state.mul0
    n0, n1, n2, n3 = state.mul1
    unpack = _LANES.unpack_from
    for start in range(0, whole, 32):
        p0, p1, p2, p3 = unpack(view, start)
        b0 = (b0 + m0 + p0) & _M
        b1 = (b1 + m1 + p1) & _M
        b2 = (b2 + m2 + p2) & _M
        b3 = (b3 + m3 + p3) & _M
        m0 ^= (b0 & _M32) * (a0 >> 32)
        m1 ^= (b1 & _M32) * (a1 >> 32)
        m2 ^= (b2 & _M32) * (a2 >> 32)
        m3 ^= (b3 & _M32) * (a3 >> 32)
        a0 = (a0 + n0) & _M
        a1 = (a1 + n1) & _M
        a2 = (a2 + n2) & _M
        a3 = (a3 + n3) & _M
        n0 ^= (a0 & _M32) * (b0 >> 32)
        n1 ^= (a1 & _M32) * (b1 >> 32)
        n2 ^= (a2 & _M32) * (b2 >> 32)
        n3 ^= (a3 & _M32) * (b3 >> 32)
        add1, add0 = _zipper(b1, b0)
        a1 = (a1 + add1) & _M
        a0 = (a0 + add0) & _M
        add1, add0 = _zipper(b3, b2)
        a3 = (a3 + add1) & _M
        a2 = (a2 + add0) & _M
        add1, add0 = _zipper(a1, a0)
        b1 = (b1 + add1) & _M
        b0 = (b0 + add0) & _M
        add1, add0 = _zipper(a3, a2)
        b3 = (b3 + add1) & _M
        b2 = (b2 + add0) & _M
    state.v0 = [a0, a1, a2, a3]
    state.v1 = [b0, b1, b2, b3]
    state.mul0 = [m0, m1, m2, m3]
    state.mul1 = [n0, n1, n2, n3]


def hash64(
    data: bytes | bytearray | memoryview, key: tuple[int, int, int, int] = RIEGELI_KEY
) -> int:
    """HighwayHash-64 of `data` under `key` (Riegeli's key by default)."""
    view = memoryview(data).cast("B")
    state = _State(key)
    whole = len(view) & ~31
    if whole:
        _packets(state, view, whole)
    if len(view) & 31:
        state.remainder(bytes(view[whole:]))
    return state.finish()


# -- many inputs at once -------------------------------------------------------------------
#
# A batch of chunks is hashed together: the inputs are independent, so numpy updates
# the lanes of all of them per packet (uint64 arithmetic wraps mod 2**64 exactly as
# the algorithm wants). Inputs are sorted longest first, so packet k updates the
# first `active[k]` rows only. The cost is per packet of the longest input, not per
# input: a batch of 256 1-KiB records costs about what one does in pure Python.

_U = np.uint64
_LO32 = _U(_M32)
_SHIFT32 = _U(32)


def _rot32(x: np.ndarray) -> np.ndarray:
    return (x >> _SHIFT32) | (x << _SHIFT32)


def _zipper_many(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_zipper` on arrays of lane pairs."""
    add0 = (
        (((lo & _U(0xFF000000)) | (hi & _U(0xFF00000000))) >> _U(24))
        | (((lo & _U(0xFF0000000000)) | (hi & _U(0xFF000000000000))) >> _U(16))
        | (lo & _U(0xFF0000))
        | ((lo & _U(0xFF00)) << _U(32))
        | ((hi & _U(0xFF00000000000000)) >> _U(8))
        | (lo << _U(56))
    )
    add1 = (
        (((hi & _U(0xFF000000)) | (lo & _U(0xFF00000000))) >> _U(24))
        | (hi & _U(0xFF0000))
        | ((hi & _U(0xFF0000000000)) >> _U(16))
        | ((hi & _U(0xFF00)) << _U(24))
        | ((lo & _U(0xFF000000000000)) >> _U(8))
        | ((hi & _U(0xFF)) << _U(48))
        | (lo & _U(0xFF00000000000000))
    )
    return add1, add0


def _update_many(state: list[np.ndarray], packet: np.ndarray, rows: int) -> None:
    """One packet (rows x 4 lanes) into the first `rows` rows of state [v0, v1, mul0, mul1].

    The arithmetic of `_packets`, on arrays.
    """
    v0, v1, mul0, mul1 = (part[:rows] for part in state)
    v1 += mul0 + packet
    mul0 ^= (v1 & _LO32) * (v0 >> _SHIFT32)
    v0 += mul1
    mul1 ^= (v0 & _LO32) * (v1 >> _SHIFT32)
    add1, add0 = _zipper_many(v1[:, 1::2], v1[:, 0::2])
    v0[:, 1::2] += add1
    v0[:, 0::2] += add0
    add1, add0 = _zipper_many(v0[:, 1::2], v0[:, 0::2])
    v1[:, 1::2] += add1
    v1[:, 0::2] += add0


def hash64_many(
    inputs: Sequence[bytes | memoryview], key: tuple[int, int, int, int] = RIEGELI_KEY
) -> list[int]:
    """`hash64` of each of `inputs`, computed together (see above)."""
    count = len(inputs)
    if count < 4:
        return [hash64(data, key) for data in inputs]
    sizes = np.array([len(data) for data in inputs], dtype=np.int64)
    order = np.argsort(-sizes, kind="stable")
    packets = sizes[order] // 32
    most = int(packets[0])
    # Each input's whole packets, zero-padded to the longest: (count, most, 4) lanes.
    table = np.zeros((count, most * 32), dtype=np.uint8)
    for row, index in enumerate(order.tolist()):
        whole = int(packets[row]) * 32
        table[row, :whole] = np.frombuffer(inputs[index], dtype=np.uint8, count=whole)
    lanes = table.view("<u8").reshape(count, most, 4)
    key_lanes = np.array(key, dtype=np.uint64)
    state = [
        np.tile(np.array(_INIT0, dtype=np.uint64) ^ key_lanes, (count, 1)),
        np.tile(np.array(_INIT1, dtype=np.uint64) ^ _rot32(key_lanes), (count, 1)),
        np.tile(np.array(_INIT0, dtype=np.uint64), (count, 1)),
        np.tile(np.array(_INIT1, dtype=np.uint64), (count, 1)),
    ]
    # Rows with more than k packets, for each k: a prefix, as rows are sorted.
    active = np.searchsorted(-packets, -np.arange(most), side="left")
    for k in range(most):
        rows = int(active[k])
        _update_many(state, lanes[:rows, k], rows)
    tails = sizes[order] % 32
    if tails.any():
        with_tail = np.flatnonzero(tails)
        tail = tails[with_tail].astype(np.uint64)
        v0, v1 = state[0], state[1]
        v0[with_tail] += ((tail << _SHIFT32) + tail)[:, None]
        shift = tail[:, None]
        halves = [v1[with_tail] & _LO32, v1[with_tail] >> _SHIFT32]
        rotated = [((h << shift) | (h >> (_U(32) - shift))) & _LO32 for h in halves]
        v1[with_tail] = rotated[0] | (rotated[1] << _SHIFT32)
        extra = np.frombuffer(
            b"".join(
                _remainder_packet(bytes(inputs[int(order[row])][-int(tails[row]) :]))
                for row in with_tail.tolist()
            ),
            dtype="<u8",
        ).reshape(-1, 4)
        # The rows with a tail are not a prefix: update a copy of them and put it back.
        sub = [part[with_tail] for part in state]
        _update_many(sub, extra, len(with_tail))
        for part, updated in zip(state, sub, strict=True):
            part[with_tail] = updated
    for _ in range(4):
        _update_many(state, _rot32(state[0][:, [2, 3, 0, 1]]), count)
    total = state[0][:, 0] + state[1][:, 0] + state[2][:, 0] + state[3][:, 0]
    out = np.empty(count, dtype=np.uint64)
    out[order] = total
    return out.tolist()
