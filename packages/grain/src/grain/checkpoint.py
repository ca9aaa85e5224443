"""grain.checkpoint: checkpointing data iterators with Orbax.

``mngr.save(step, args=grain.checkpoint.CheckpointSave(it))`` and
``mngr.restore(step, args=grain.checkpoint.CheckpointRestore(it))`` on an
``orbax.checkpoint.CheckpointManager``; each process writes its own
``process_<i>-of-<n>.json``. Orbax is imported on first use of these names,
not by ``import grain``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grain_jax import CheckpointHandler as CheckpointHandler
    from grain_jax import CheckpointRestore as CheckpointRestore
    from grain_jax import CheckpointSave as CheckpointSave

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'grain.checkpoint' has no attribute {name!r}")
    import grain_jax

    return getattr(grain_jax, name)
