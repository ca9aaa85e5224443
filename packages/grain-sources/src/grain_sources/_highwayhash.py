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


class _State:
    __slots__ = ("mul0", "mul1", "v0", "v1")

    def __init__(self, key: tuple[int, int, int, int]):
        self.mul0 = list(_INIT0)
        self.mul1 = list(_INIT1)
        self.v0 = [m ^ k for m, k in zip(_INIT0, key, strict=True)]
        self.v1 = [m ^ (((k >> 32) | (k << 32)) & _M) for m, k in zip(_INIT1, key, strict=True)]

    def update(self, a: tuple[int, ...]) -> None:
        v0, v1, mul0, mul1 = self.v0, self.v1, self.mul0, self.mul1
        for i in range(4):
            v1[i] = (v1[i] + mul0[i] + a[i]) & _M
            mul0[i] ^= (v1[i] & _M32) * (v0[i] >> 32)
            v0[i] = (v0[i] + mul1[i]) & _M
            mul1[i] ^= (v0[i] & _M32) * (v1[i] >> 32)
        add1, add0 = _zipper(v1[1], v1[0])
        v0[1] = (v0[1] + add1) & _M
        v0[0] = (v0[0] + add0) & _M
        add1, add0 = _zipper(v1[3], v1[2])
        v0[3] = (v0[3] + add1) & _M
        v0[2] = (v0[2] + add0) & _M
        add1, add0 = _zipper(v0[1], v0[0])
        v1[1] = (v1[1] + add1) & _M
        v1[0] = (v1[0] + add0) & _M
        add1, add0 = _zipper(v0[3], v0[2])
        v1[3] = (v1[3] + add1) & _M
        v1[2] = (v1[2] + add0) & _M

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
        self.update(_LANES.unpack(packet))

    def finish(self) -> int:
        for _ in range(4):
            v0 = self.v0
            self.update(
                tuple(((lane >> 32) | (lane << 32)) & _M for lane in (v0[2], v0[3], v0[0], v0[1]))
            )
        return (self.v0[0] + self.v1[0] + self.mul0[0] + self.mul1[0]) & _M


def _packets(state: _State, view: memoryview, whole: int) -> None:
    """`_State.update` over every 32-byte packet of ``view[:whole]``, unrolled.

    The same arithmetic as `_State.update` with the sixteen lanes held in locals:
    about four times faster in CPython, which is what makes verifying every chunk
    affordable.
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
