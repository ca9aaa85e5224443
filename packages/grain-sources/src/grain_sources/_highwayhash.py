"""64-bit HighwayHash, the checksum of Riegeli block and chunk headers and chunk data.

Written from the algorithm's public description (four 64-bit lanes of two
state vectors and two multiplier vectors, updated per 32-byte packet, a
length-dependent remainder packet, four permute-and-update rounds). Python
ints stand in for the SIMD lanes; every sum is reduced mod 2**64.

The "zipper" that merges each state vector into the other is a fixed byte
permutation of every pair of lanes (`_PAIR`), so both paths do it as one byte
shuffle: ``struct`` and ``itemgetter`` for one input (about 7 µs per 32-byte
packet in all), numpy fancy indexing for many (`_highwayhash_many`).

The known answers (the fixed first 64 bytes of every Riegeli file) are checked
in tests/test_riegeli.py.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence

_M = 0xFFFFFFFFFFFFFFFF
_M32 = 0xFFFFFFFF
INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_LANES = struct.Struct("<4Q")

RIEGELI_KEY = (0x2F696C6567656952, 0x0A7364726F636572, 0x2F696C6567656952, 0x0A7364726F636572)
"""The key Riegeli hashes with: 'Riegeli/', 'records\\n', twice."""

# The zipper of a lane pair (lo, hi), as 16 little-endian bytes: byte i of the
# pair added to (lane 2j, lane 2j + 1) is byte _PAIR[i] of lanes (2j, 2j + 1).
PAIR = (3, 12, 2, 5, 14, 1, 15, 0, 11, 4, 10, 13, 9, 6, 8, 7)
ZIPPER = PAIR + tuple(16 + i for i in PAIR)
"""`PAIR` for both pairs of the four lanes (32 bytes)."""
_zip = operator.itemgetter(*ZIPPER)


def remainder_packet(tail: bytes) -> bytes:
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
        self.mul0 = list(INIT0)
        self.mul1 = list(INIT1)
        self.v0 = [m ^ k for m, k in zip(INIT0, key, strict=True)]
        self.v1 = [m ^ (((k >> 32) | (k << 32)) & _M) for m, k in zip(INIT1, key, strict=True)]

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
        _packets(self, memoryview(remainder_packet(tail)), 32)

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
    zipper adds a byte shuffle of v1 to v0 and of v0 to v1. Unrolled, with the
    sixteen lanes in locals: CPython's list indexing would otherwise cost
    several times more.
    """
    a0, a1, a2, a3 = state.v0
    b0, b1, b2, b3 = state.v1
    m0, m1, m2, m3 = state.mul0
    n0, n1, n2, n3 = state.mul1
    unpack = _LANES.unpack_from
    lanes, pack, zipper = _LANES.unpack, _LANES.pack, _zip
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
        z0, z1, z2, z3 = lanes(bytes(zipper(pack(b0, b1, b2, b3))))
        a0 = (a0 + z0) & _M
        a1 = (a1 + z1) & _M
        a2 = (a2 + z2) & _M
        a3 = (a3 + z3) & _M
        z0, z1, z2, z3 = lanes(bytes(zipper(pack(a0, a1, a2, a3))))
        b0 = (b0 + z0) & _M
        b1 = (b1 + z1) & _M
        b2 = (b2 + z2) & _M
        b3 = (b3 + z3) & _M
    state.v0 = [a0, a1, a2, a3]
    state.v1 = [b0, b1, b2, b3]
    state.mul0 = [m0, m1, m2, m3]
    state.mul1 = [n0, n1, n2, n3]


def hash64(
    data: bytes | bytearray | memoryview, key: tuple[int, int, int, int] = RIEGELI_KEY
) -> int:
    """HighwayHash-64 of `data` under `key` (Riegeli's key by default)."""
    return _rest(_State(key), memoryview(data).cast("B"), 0)


def resume(lanes: Sequence[Sequence[int]], data: bytes | memoryview, start: int) -> int:
    """`hash64` of `data` from the state (v0, v1, mul0, mul1) after its first `start` bytes.

    `start` is a multiple of 32: the vectorized hash hands its last few long
    inputs over here, where one input costs less than numpy's per-call overhead.
    """
    state = _State(RIEGELI_KEY)
    state.v0, state.v1, state.mul0, state.mul1 = (list(map(int, part)) for part in lanes)
    return _rest(state, memoryview(data).cast("B"), start)


def _rest(state: _State, view: memoryview, start: int) -> int:
    whole = len(view) & ~31
    if whole > start:
        _packets(state, view[start:], whole - start)
    if len(view) & 31:
        state.remainder(bytes(view[whole:]))
    return state.finish()
