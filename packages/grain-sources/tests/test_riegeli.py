"""Our ArrayRecord reader (Riegeli chunks over range reads) against the C++ reader.

Files are written by the C++ writer with every option it offers, and read both
ways through local paths: our reader through fsspec's local filesystem.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_sources import ArrayRecordDataSource, write_array_record
from grain_sources._array_record_remote import RemoteArrayRecordDataSource
from grain_sources._checks import UnreadableFileError
from grain_sources._highwayhash import hash64
from grain_sources._riegeli import decode_varints, physical_end, strip_block_headers

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("cramjam")

# The fixed first 64 bytes of every Riegeli file (its format description).
_SIGNATURE = bytes.fromhex(
    "83af70d10d884a3f0000000000000000400000000000000091bac23c9287e1a9"
    "0000000000000000e19f13c0e9b1c37273000000000000000000000000000000"
)


def test_highwayhash_gives_the_hashes_of_the_riegeli_signature():
    block_hash, chunk_hash, data_hash = (
        struct.unpack_from("<Q", _SIGNATURE, 0),
        struct.unpack_from("<Q", _SIGNATURE, 24),
        struct.unpack_from("<Q", _SIGNATURE, 40),
    )
    assert hash64(_SIGNATURE[8:24]) == block_hash[0]
    assert hash64(_SIGNATURE[32:64]) == chunk_hash[0]
    assert hash64(b"") == data_hash[0]


def test_varints_decode_vectorized():
    values = [0, 1, 127, 128, 300, 2**32, 2**63 + 5]
    encoded = bytearray()
    for value in values:
        while value >= 0x80:
            encoded.append(value & 0x7F | 0x80)
            value >>= 7
        encoded.append(value)
    assert decode_varints(bytes(encoded)).tolist() == values


# A chunk begins at a block boundary or after the block header's 24 bytes, never inside.
_CHUNK_BEGIN = st.integers(0, 300_000).filter(lambda b: b % 65536 == 0 or b % 65536 > 24)


@given(begin=_CHUNK_BEGIN, size=st.integers(0, 200_000))
def test_block_headers_are_removed_from_any_range(begin, size):
    end = physical_end(begin, size)
    # Positions are the bytes themselves (mod 251), headers marked 255.
    positions = np.arange(begin, end)
    raw = (positions % 251).astype(np.uint8)
    raw[(positions % 65536) < 24] = 255
    stripped = np.frombuffer(strip_block_headers(raw.tobytes(), begin), np.uint8)
    assert stripped.size == size
    assert not (stripped == 255).any()


_OPTIONS = st.builds(
    lambda group, compression, pad: (
        f"group_size:{group},{compression}" + (",pad_to_block_boundary:true" if pad else "")
    ),
    st.sampled_from([1, 2, 3, 17, 64]),
    st.sampled_from(["uncompressed", "zstd:1", "zstd:9", "brotli:1", "brotli:6", "snappy"]),
    st.booleans(),
)
_RECORDS = st.lists(
    st.one_of(st.binary(max_size=64), st.integers(0, 150_000).map(lambda n: b"x" * n)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=_RECORDS, options=_OPTIONS, seed=st.integers(0, 2**32 - 1))
def test_our_reader_matches_the_cpp_reader(tmp_path, records, options, seed):
    (path,) = write_array_record(records, tmp_path / f"f-{seed}.ar", options=options)
    ours = ArrayRecordDataSource(path, filesystem=fsspec.filesystem("file"))
    assert isinstance(ours, RemoteArrayRecordDataSource)
    cpp = ArrayRecordDataSource(path)
    try:
        assert len(ours) == len(cpp) == len(records)
        order = np.random.default_rng(seed).permutation(len(records))
        assert ours.__getitems__(order) == cpp.__getitems__(order) == [records[i] for i in order]
        assert ours[int(order[0])] == records[int(order[0])]
    finally:
        cpp.close()


def test_transposed_files_are_refused_with_the_fix(tmp_path):
    (path,) = write_array_record([b"a", b"b"], tmp_path / "t.ar", options="transpose:true")
    with pytest.raises(UnreadableFileError, match=r"transpose:true.*rewrite it without transpose"):
        ArrayRecordDataSource(path, filesystem=fsspec.filesystem("file"))[0]


def test_a_damaged_footer_is_named(tmp_path):
    (path,) = write_array_record([b"a" * 10] * 50, tmp_path / "f.ar")
    data = bytearray((tmp_path / "f.ar").read_bytes())
    data[-65536 + 24 + 8] ^= 1  # the postscript chunk header
    (tmp_path / "f.ar").write_bytes(bytes(data))
    with pytest.raises(UnreadableFileError, match=r"f.ar.*wrong hash"):
        ArrayRecordDataSource(path, filesystem=fsspec.filesystem("file"))
