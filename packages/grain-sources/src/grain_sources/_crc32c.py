"""CRC-32C (Castagnoli), the checksum of TFRecord files.

`value(data)` uses google-crc32c's C code when it is installed (the `tfrecord`
extra). Otherwise it falls back to `value_numpy`, which is exact and fast
enough for large records without any compiled code:

  * the data is cut into L lanes of m bytes (after padding zeros in front,
    which leave a CRC register of 0 unchanged);
  * one table-driven CRC runs over all lanes at once: a Python loop over the m
    byte positions, each step a few numpy operations on L registers;
  * the L lane registers are merged pairwise. The register update is linear
    over GF(2), so the register of A+B is ``Z(|B|)(reg(A)) ^ reg(B)``, where
    ``Z(k)`` (feeding k zero bytes) is a 32x32 bit matrix. Each level of the
    tree applies one such matrix to half of the registers, vectorized.

The initial value 0xFFFFFFFF is applied at the end with the same trick:
``reg(data, init) = Z(len(data))(init) ^ reg(data, 0)``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

_POLY = 0x82F63B78  # Castagnoli, bit-reflected
_MASK = 0xFFFFFFFF

# Below this many bytes the lane machinery costs more than a plain loop.
_SMALL = 256
_MAX_LANES = 1 << 15


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST: list[int] = _TABLE.tolist()
_BITS = np.arange(32, dtype=np.uint32)


def _apply(columns: np.ndarray, registers: np.ndarray) -> np.ndarray:
    """The bit matrix given by its 32 `columns` applied to each of `registers`."""
    bits = (registers[:, None] >> _BITS) & np.uint32(1)
    return np.bitwise_xor.reduce(np.where(bits != 0, columns, np.uint32(0)), axis=1)


@functools.lru_cache(maxsize=128)
def _zeros_operator(count: int) -> np.ndarray:
    """The 32 columns of the matrix that feeds `count` zero bytes to a register."""
    if count == 0:
        return np.uint32(1) << _BITS
    if count == 1:
        unit = np.uint32(1) << _BITS
        return _TABLE[unit & np.uint32(0xFF)] ^ (unit >> np.uint32(8))
    half = _zeros_operator(count // 2)
    result = _apply(half, half)  # Z(2h) = Z(h) after Z(h): apply to each column
    if count % 2:
        result = _apply(_zeros_operator(1), result)
    return result


def _register_small(data: Any, register: int) -> int:
    table = _TABLE_LIST
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def value_numpy(data: Any) -> int:
    """CRC-32C of the bytes-like `data`, computed with numpy only (no compiled extension)."""
    view = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    size = view.size
    if size < _SMALL:
        return _register_small(view, _MASK) ^ _MASK
    lanes = 1 << min((size // 16).bit_length() - 1, _MAX_LANES.bit_length() - 1)
    width = -(-size // lanes)
    padded = np.zeros(lanes * width, dtype=np.uint8)
    padded[padded.size - size :] = view
    # Position-major, so each step of the loop reads one contiguous row.
    columns = np.ascontiguousarray(padded.reshape(lanes, width).T)
    registers = np.zeros(lanes, dtype=np.uint32)
    table = _TABLE
    low = np.uint32(0xFF)
    eight = np.uint32(8)
    for row in columns:
        registers = table[(registers ^ row) & low] ^ (registers >> eight)
    span = width
    while registers.size > 1:
        registers = _apply(_zeros_operator(span), registers[0::2]) ^ registers[1::2]
        span *= 2
    initial = _apply(_zeros_operator(size), np.array([_MASK], dtype=np.uint32))
    return int(registers[0] ^ initial[0]) ^ _MASK


_implementation: Any = None


def _choose() -> Any:
    """google-crc32c's C function if installed (imported on first use), else `value_numpy`."""
    global _implementation
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - depends on the environment
        google_crc32c = None  # type: ignore[assignment]
    # google-crc32c may itself fall back to a per-byte Python loop; ours is faster then.
    if google_crc32c is not None and getattr(google_crc32c, "implementation", "") == "c":
        fast = google_crc32c.value

        def _implementation(data: Any) -> int:
            # It accepts only read-only buffers that need no release: bytes.
            return fast(data if isinstance(data, bytes) else bytes(data))
    else:
        _implementation = value_numpy
    return _implementation


def value(data: Any) -> int:
    """CRC-32C of the bytes-like `data`, with google-crc32c's C code when installed."""
    return (_implementation or _choose())(data)
