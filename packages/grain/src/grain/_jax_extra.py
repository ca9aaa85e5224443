"""The names that need the `jax` extra: grain-jax, with jax and orbax-checkpoint.

`pip install grainline` installs the layers up to grain-mp; `pip install "grainline[jax]"`
adds grain-jax. The JAX names keep their places in every namespace
(`grain.experimental.device_put`, `grain.checkpoint.CheckpointSave`,
`grain.sharding.ShardByJaxProcess`, ...) and are looked up on first use, so that
without the extra they raise an ImportError that names the fix instead of
`import grain` failing.
"""

from __future__ import annotations

from typing import Any

INSTALL_HINT = 'pip install "grainline[jax]"'

# What a missing extra looks like: one of these top-level modules does not import.
_EXTRA_MODULES = frozenset({"grain_jax", "jax", "jaxlib", "orbax"})


def jax_name(name: str, where: str) -> Any:
    """grain_jax's `name`, or an ImportError naming the extra when it is not installed.

    Args:
      name: a public name of grain_jax.
      where: the namespace it is asked from, for the message (e.g. "grain.experimental").
    """
    try:
        import grain_jax

        return getattr(grain_jax, name)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in _EXTRA_MODULES:
            raise  # a real bug inside an installed grain-jax: do not disguise it
        message = (
            f"{where}.{name} needs the JAX layer of grain, which is not installed here "
            f"(no module named {error.name!r}). Install it with: {INSTALL_HINT}"
        )
    # Raised outside the except block: the hint is the whole story, not a second traceback.
    raise ImportError(message, name=where)
