"""HighwayHash-64: the scalar hash against answers known before it was rewritten, the
vectorized hash of many inputs against the scalar one, and threads hashing together."""

from __future__ import annotations

import concurrent.futures
import hashlib
import struct
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_sources._hash_combiner import HashCombiner
from grain_sources._highwayhash import hash64, remainder_packet
from grain_sources._highwayhash_many import hash64_many

# SHA-256 of the hashes below as computed by the first (zipper-by-masks) implementation,
# which matched the Riegeli signature's hashes: a rewrite must give every one of them.
_KNOWN_DIGEST = "8da547ebbda736f1a3c5d8d4e2e1c934feb001d921c784d64ee5e015913b2bf8"
_OTHER_KEY = (1, 2, 3, 4)


def _known_inputs() -> list[bytes]:
    rng = np.random.default_rng(20261124)
    inputs = [rng.bytes(n) for n in range(201)]
    return inputs + [rng.bytes(n) for n in (1000, 4096, 65536 + 7)]


def test_the_scalar_hash_gives_the_known_answers_for_every_length_0_to_200():
    inputs = _known_inputs()
    hashes = [hash64(data) for data in inputs] + [hash64(x, _OTHER_KEY) for x in inputs[:70]]
    digest = hashlib.sha256(struct.pack(f"<{len(hashes)}Q", *hashes)).hexdigest()
    assert digest == _KNOWN_DIGEST
    assert hash64(bytes(range(256)) * 5) == 0x112C57C0C2BDEA37


def test_the_vectorized_hash_matches_for_every_length_0_to_200_at_once():
    inputs = _known_inputs()
    assert hash64_many(inputs) == [hash64(data) for data in inputs]
    assert hash64_many(inputs, _OTHER_KEY) == [hash64(data, _OTHER_KEY) for data in inputs]


# Short inputs drawn byte by byte; long ones from a seed (cheap for hypothesis to draw).
_INPUT = st.one_of(
    st.binary(max_size=200),
    st.tuples(st.integers(201, 5000), st.integers(0, 2**32 - 1)).map(
        lambda size_seed: np.random.default_rng(size_seed[1]).bytes(size_seed[0])
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_INPUT, max_size=40), st.booleans())
def test_hashing_many_inputs_at_once_gives_each_ones_hash(inputs, as_views):
    # Memoryviews too: chunks reach the hash as slices of the bytes read.
    given_inputs = [memoryview(data) for data in inputs] if as_views else inputs
    assert hash64_many(given_inputs) == [hash64(data) for data in inputs]


@given(st.binary(min_size=1, max_size=31))
def test_the_remainder_packet_keeps_the_tail_in_32_bytes(tail):
    packet = remainder_packet(tail)
    assert len(packet) == 32
    words = len(tail) & ~3
    assert packet[:words] == tail[:words]


@pytest.mark.timeout(60)
@settings(max_examples=10, deadline=None)
@given(st.lists(st.lists(_INPUT, min_size=1, max_size=6), min_size=2, max_size=24))
def test_threads_hashing_at_once_each_get_their_own_hashes(calls):
    combiner = HashCombiner()
    start = threading.Barrier(len(calls))

    def run(inputs):
        start.wait(10)
        return combiner.hash(inputs)

    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(run, calls))
    assert results == [[hash64(data) for data in inputs] for inputs in calls]
    assert not combiner._busy
    assert not combiner._pending
