"""grain.checkpoint: checkpointing data iterators with Orbax.

``mngr.save(step, args=grain.checkpoint.CheckpointSave(it))`` and
``mngr.restore(step, args=grain.checkpoint.CheckpointRestore(it))`` on an
``orbax.checkpoint.CheckpointManager``; each process writes its own
``process_<i>-of-<n>.json``. Orbax is imported on first use of these names,
not by ``import grain``. They come with ``pip install "grainline[jax]"``; without it
they raise an ImportError that says so.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from grain._jax_extra import jax_name as _jax_name

if _TYPE_CHECKING:
    from grain_jax import CheckpointHandler as CheckpointHandler
    from grain_jax import CheckpointRestore as CheckpointRestore
    from grain_jax import CheckpointSave as CheckpointSave

__all__ = ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"]


def __getattr__(name: str) -> _Any:
    if name not in __all__:
        raise AttributeError(f"module 'grain.checkpoint' has no attribute {name!r}")
    return _jax_name(name, __name__)


def __dir__() -> list[str]:
    return sorted(__all__)
