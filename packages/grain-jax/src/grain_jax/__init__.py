"""grain_jax: JAX integration: device prefetch, Orbax checkpoints, multi-host.

Layout: the top library layer. It builds on grain_dataset (its public names
and `grain_dataset.extension`) and grain_index; it sits above grain_mp but
does not use it. Importing it loads neither jax nor orbax (a data pipeline
without them stays light): each public name resolves on first use from its
private module.

  _device_put   device_put: batches transferred to devices ahead of the step
  _checkpoint   CheckpointHandler / CheckpointSave / CheckpointRestore for Orbax
  _sharding     ShardByJaxProcess, make_global_batch (multi-host)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grain_jax._checkpoint import CheckpointHandler as CheckpointHandler
    from grain_jax._checkpoint import CheckpointRestore as CheckpointRestore
    from grain_jax._checkpoint import CheckpointSave as CheckpointSave
    from grain_jax._device_put import device_put as device_put
    from grain_jax._sharding import ShardByJaxProcess as ShardByJaxProcess
    from grain_jax._sharding import make_global_batch as make_global_batch

_WHERE = {
    "CheckpointHandler": "grain_jax._checkpoint",
    "CheckpointRestore": "grain_jax._checkpoint",
    "CheckpointSave": "grain_jax._checkpoint",
    "ShardByJaxProcess": "grain_jax._sharding",
    "device_put": "grain_jax._device_put",
    "make_global_batch": "grain_jax._sharding",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'grain_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
