"""`ds.seed(...)` and how a random stage finds its seed.

A random stage uses, in order: its own ``seed=`` (an int in [0, 2**32)), else
the seed that the nearest ``ds.seed(s)`` upstream derives for the stage's
position in the pipeline (`_Dataset._stage_seed`), else it raises. A mixture
combines its parents' seeds, so a stage after it depends on all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._core._base import IterDataset, register
from grain_dataset._core._iter_stage import IterStage
from grain_dataset._core._stage import MapStage
from grain_index import checks, derive_seed

SEED_LIMIT = 1 << 32


def explicit_seed(seed: Any, name: str = "seed") -> int:
    """Checks a user's per-stage seed: an integer in [0, 2**32)."""
    return checks.int_in_range(
        seed,
        name,
        0,
        SEED_LIMIT,
        lead="Seed must be an integer between 0 and 2**32-1 (got seed={value}).",
    )


# Grain's wording where a random stage has no seed, which clients match.
_GRAIN_NO_SEED = {
    "shuffle": "`shuffle` requires a seed. Please provide it with `ds.seed(seed)`. ",
    "random_map": "`random_map` requires a seed. Please either provide it with `ds.seed(seed)` "
    "before any random transformations or pass it directly with "
    "`ds.random_map(transform, seed=seed)`. ",
}


def stage_seed(stage: Any, seed: Any, what: str) -> int:
    """The 64-bit seed of random stage `stage` (already initialized) called `what`."""
    if seed is not None:
        return derive_seed(explicit_seed(seed), what)
    default = stage._stage_seed
    if default is None:
        raise ValueError(
            _GRAIN_NO_SEED.get(what, "")
            + f"`{what}` needs a seed: call ds.seed(seed) earlier in the pipeline "
            f"or pass seed=... to `{what}`."
        )
    return default


@register("map_seed")
class SeedMapDataset(MapStage):
    """Passes elements through; sets the seed later random stages derive theirs from."""

    def _fingerprint_token(self) -> str | None:
        return None  # the seeds it gives are in the tokens of the stages that use them

    def __init__(self, parent: Any, seed: int):
        super().__init__(parent)
        self._seed = checks.seed(seed)
        self._seed_base = derive_seed(self._seed, "ds.seed")
        self._parent = parent

    def __len__(self) -> int:
        return len(self._parent)

    def _getitem(self, index: int) -> Any:
        return self._parent._getitem(index)

    _maps_indices = True

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        return indices

    def _describe(self) -> str:
        return f"seed={self._seed}"


@register("iter_seed")
class SeedIterDataset(IterStage):
    """Passes elements through; sets the seed later random stages derive theirs from."""

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # the seeds it gives are in the tokens of the stages that use them

    _position_kind = "same"

    def __init__(self, parent: IterDataset[Any], seed: int):
        super().__init__(parent)
        self._seed = checks.seed(seed)
        self._seed_base = derive_seed(self._seed, "ds.seed")

    def __iter__(self) -> Any:
        return iter(self._parents[0])

    def _describe(self) -> str:
        return f"seed={self._seed}"
