"""CRC-32C: the numpy fallback against google-crc32c's C code and the standard check value."""

import sys

import numpy as np
import pytest

from grain_sources import _crc32c

google_crc32c = pytest.importorskip("google_crc32c")

LENGTHS = [0, 1, 2, 7, 8, 15, 16, 255, 256, 257, 1000, 4095, 4096, 4097, 65536, 100003, 1 << 20]


def test_check_value():
    # The check value of CRC-32C from the CRC catalogue.
    assert _crc32c.value_numpy(b"123456789") == 0xE3069283
    assert _crc32c.value(b"123456789") == 0xE3069283


@pytest.mark.parametrize("length", LENGTHS)
def test_numpy_fallback_matches_google_crc32c(length):
    data = np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8).tobytes()
    assert _crc32c.value_numpy(data) == google_crc32c.value(data)


@pytest.mark.parametrize("length", [300, 5000, 100003])
def test_numpy_fallback_on_constant_data(length):
    # Long runs of one byte value (zeros especially) stress the zero-byte operators.
    for byte in (0, 0xFF, 0x5A):
        data = bytes([byte]) * length
        assert _crc32c.value_numpy(data) == google_crc32c.value(data)


def test_numpy_fallback_on_many_small_lengths():
    rng = np.random.default_rng(7)
    for length in range(0, 700, 13):
        data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        assert _crc32c.value_numpy(data) == google_crc32c.value(data), length


def test_numpy_fallback_accepts_any_buffer():
    data = np.arange(1000, dtype=np.uint32)
    expected = google_crc32c.value(data.tobytes())
    assert _crc32c.value_numpy(data) == expected
    assert _crc32c.value_numpy(bytearray(data.tobytes())) == expected
    assert _crc32c.value_numpy(memoryview(data.tobytes())) == expected


def test_value_accepts_bytearray_and_memoryview():
    assert _crc32c.value(bytearray(b"123456789")) == 0xE3069283
    assert _crc32c.value(memoryview(b"123456789")) == 0xE3069283


def test_value_falls_back_without_google_crc32c(monkeypatch):
    monkeypatch.setattr(_crc32c, "_implementation", None)
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # makes the import fail
    data = b"x" * 5000
    assert _crc32c.value(data) == google_crc32c.value(data)
    assert _crc32c._implementation is _crc32c.value_numpy


def test_value_uses_the_c_implementation_when_installed(monkeypatch):
    monkeypatch.setattr(_crc32c, "_implementation", None)
    assert _crc32c.value(b"abc") == google_crc32c.value(b"abc")
    assert _crc32c._implementation is not _crc32c.value_numpy
