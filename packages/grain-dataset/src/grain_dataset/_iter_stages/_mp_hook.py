"""`IterDataset.mp_prefetch`, which lives in the grain-mp layer above this one.

The dataset layer may not import grain-mp (a lower layer never imports a higher
one), so the method imports it lazily and says what to install when it is
missing. It reaches grain-mp only through its public name `grain_mp.mp_prefetch`.
"""

from __future__ import annotations

import importlib
from typing import Any

from grain_dataset._core._base import register


@register("mp_prefetch")
def _mp_prefetch(parent: Any, options: Any, worker_init_fn: Any, sequential_slice: Any) -> Any:
    try:
        module = importlib.import_module("grain_mp")
    except ImportError as error:
        raise ImportError(
            "`mp_prefetch` runs pipelines in worker processes, which the grain-mp package "
            "provides; install it (`pip install grain-mp`, or `pip install grainline` for "
            f"everything). Import failed with: {error}"
        ) from error
    return module.mp_prefetch(parent, options, worker_init_fn, sequential_slice)
