"""Seed derivation: deterministic, well mixed, path-sensitive, vectorizable."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_index import derive_seed, derive_seeds


def test_deterministic_and_in_range():
    assert derive_seed(42, "shuffle", 3) == derive_seed(42, "shuffle", 3)
    assert 0 <= derive_seed(2**64 - 1, 2**64 - 1) < 2**64


def test_paths_that_differ_anywhere_give_different_seeds():
    seeds = {
        derive_seed(1),
        derive_seed(1, 0),
        derive_seed(1, 0, 0),
        derive_seed(1, 1, 2),
        derive_seed(1, 2, 1),
        derive_seed(2, 1, 2),
        derive_seed(1, "shuffle", 0),
        derive_seed(1, "random_map", 0),
    }
    assert len(seeds) == 8
    assert derive_seed(5) != 5


def test_string_stages_are_stable_across_processes():
    code = "from grain_index import derive_seed; print(derive_seed(7, 'stage', 9))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONHASHSEED": str(h)},
        ).stdout.strip()
        for h in (1, 2)
    }
    assert outputs == {str(derive_seed(7, "stage", 9))}


@given(seed=st.integers(0, 2**64 - 1), indices=st.lists(st.integers(0, 2**63 - 1), max_size=50))
@settings(max_examples=80, deadline=None)
def test_vectorized_equals_scalar(seed, indices):
    out = derive_seeds(seed, "stage", 4, indices=np.array(indices, dtype=np.int64))
    assert out.dtype == np.uint64
    assert out.tolist() == [derive_seed(seed, "stage", 4, i) for i in indices]


def test_bits_are_balanced_over_consecutive_indices():
    values = derive_seeds(0, "stage", indices=np.arange(20_000))
    bits = (values[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    frequencies = bits.mean(axis=0)
    # 5 standard deviations of a fair bit over 20 000 draws is 0.018.
    assert np.all(np.abs(frequencies - 0.5) < 0.018), frequencies


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: derive_seed(-1), ValueError, "seed"),
        (lambda: derive_seed(2**64), ValueError, "seed"),
        (lambda: derive_seed(1.0), TypeError, "seed"),
        (lambda: derive_seed(1, -3), ValueError, "path element"),
        (lambda: derive_seeds(1, indices=[-1]), ValueError, "indices"),
        (lambda: derive_seeds(1, indices=[0.5]), TypeError, "indices"),
    ],
)
def test_bad_input(call, error, name):
    with pytest.raises(error, match=f"`{name}`"):
        call()
