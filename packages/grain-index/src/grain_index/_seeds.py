"""Seed derivation: one function turns (pipeline seed, stage, position) into seeds.

A pipeline has one user seed. Every random decision in it (the shuffle of epoch
3, the generator of element 1234 of a random map) draws from a seed derived from
a *path* below that user seed::

    derive_seed(seed, "shuffle", epoch)
    derive_seed(seed, stage_id, element_index)

Each path step goes through splitmix64's finalizer, a bijection on 64-bit words
with full avalanche, so paths that differ anywhere give unrelated seeds and two
stages never share a random stream. Strings are hashed with BLAKE2b, which,
unlike `hash()`, is the same in every process and on every run.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from grain_index import _validate

MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_ROOT = 0x6A09E667F3BCC908  # separates derived seeds from the raw user seed


def mix64(value: int) -> int:
    """splitmix64: a keyless bijection on [0, 2**64) with strong avalanche."""
    z = (value + _GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & MASK64
    return z ^ (z >> 31)


def mix64_array(values: np.ndarray) -> np.ndarray:
    """`mix64` over a uint64 array (numpy's uint64 arithmetic wraps mod 2**64)."""
    z = values.astype(np.uint64) + np.uint64(_GOLDEN)
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MUL1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MUL2)
    z ^= z >> np.uint64(31)
    return z


def _path_word(part: Any) -> int:
    if isinstance(part, str):
        return int.from_bytes(hashlib.blake2b(part.encode(), digest_size=8).digest(), "little")
    return _validate.int_in_range(part, "path element", 0, _validate.UINT64_LIMIT)


def derive_seed(seed: int, *path: int | str) -> int:
    """Returns a well-mixed seed in [0, 2**64) for `path` below `seed`.

    Args:
      seed: the pipeline's seed, an integer in [0, 2**64).
      *path: stage ids (ints or strings) and positions (epoch, element index),
        most general first. Order matters: ``derive_seed(s, 1, 2)`` and
        ``derive_seed(s, 2, 1)`` are unrelated.

    Example::

        shuffle_seed = derive_seed(42, "shuffle", epoch)
        element_seed = derive_seed(42, stage_id, index)
    """
    h = mix64(_validate.seed(seed) ^ _ROOT)
    for part in path:
        h = mix64(h ^ mix64(_path_word(part)))
    return h


def derive_seeds(seed: int, *path: int | str, indices: Any) -> np.ndarray:
    """Vectorized `derive_seed(seed, *path, i)` for every `i` in `indices`.

    Returns a uint64 array with the shape of `indices`; element k equals
    ``derive_seed(seed, *path, int(indices[k]))``.
    """
    array = _validate.index_array(indices, "indices")
    if array.size and int(array.min()) < 0:
        raise ValueError(f"`indices` must be >= 0, got {int(array.min())}.")
    prefix = np.uint64(derive_seed(seed, *path))
    return mix64_array(prefix ^ mix64_array(array.astype(np.uint64)))
