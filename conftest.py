"""Session-wide test set-up for the whole workspace.

JAX reads XLA_FLAGS once, when its CPU backend starts, so the eight host
devices the sharding tests need must be asked for before any test imports jax.
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()
