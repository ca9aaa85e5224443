"""Multi-host input: which records each JAX process reads, and its batches as global arrays.

Why: in multi-host JAX every process runs the same program and feeds only its
own devices. Each process must read a disjoint part of the data (its shard:
`ShardByJaxProcess`, or ``ds[jax.process_index()::jax.process_count()]`` on a
MapDataset), and the per-process batches must be assembled into one global
`jax.Array` that a jitted step can consume (`make_global_batch`).

jax is imported when these are used, not when the module is imported, so the
layers below never pay for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from grain_index import ShardOptions


@dataclasses.dataclass(frozen=True, init=False)
class ShardByJaxProcess(ShardOptions):
    """Shard options for this JAX process: one shard per process.

    ``shard_index`` is ``jax.process_index()`` and ``shard_count`` is
    ``jax.process_count()``, read when the options are built (so after
    ``jax.distributed.initialize``). Pass it where ShardOptions go::

        sampler = grain.python.IndexSampler(
            num_records=len(source), shard_options=ShardByJaxProcess(drop_remainder=True),
            shuffle=True, num_epochs=1, seed=0)

    Args:
      drop_remainder: if True, every process gets the same number of records
        (the remainder is dropped), which keeps hosts in lockstep; if False,
        shard sizes differ by at most one.
    """

    def __init__(self, drop_remainder: bool = False) -> None:
        import jax

        super().__init__(
            shard_index=jax.process_index(),
            shard_count=jax.process_count(),
            drop_remainder=drop_remainder,
        )


def _default_sharding() -> Any:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    return NamedSharding(mesh, PartitionSpec("data"))


def _local_row_blocks(sharding: Any, ndim: int) -> int | None:
    """How many distinct blocks of rows this process's devices hold (None: unknown).

    With the default sharding this is the number of local devices; a
    replicated sharding holds 1 block; a 2-D mesh splitting rows over one axis
    holds as many as that axis has local positions.
    """
    probe = (len(sharding.device_set),) * ndim
    try:
        indices = sharding.addressable_devices_indices_map(probe)
    except (ValueError, TypeError):
        return None  # The sharding does not fit the leaf; jax reports that itself.
    rows = {(index[0].start, index[0].stop) for index in indices.values()}
    return len(rows)


def make_global_batch(batch: Any, sharding: Any = None) -> Any:
    """Returns this process's batch as part of global `jax.Array`s, leaf by leaf.

    Every process calls this with its own local batch (a pytree of numpy
    arrays, e.g. from its shard of the data); leaf shapes must be equal on all
    processes. The global array of a leaf of local shape ``(b, ...)`` has shape
    ``(b * jax.process_count(), ...)`` with the default sharding: process i's
    rows come after those of processes 0..i-1 (in device order).

    Args:
      batch: a pytree of numpy arrays (or array-likes) whose leading dimension
        is this process's batch size.
      sharding: a `jax.sharding.Sharding` for every leaf; default: a
        NamedSharding over a 1-D Mesh of all `jax.devices()` along the axis
        'data', with ``PartitionSpec('data')`` (the batch split over devices).

    Raises:
      ValueError: a leaf is a scalar, or its leading dimension does not divide
        evenly over this process's devices.

    Example::

        for batch in loader:
            global_batch = make_global_batch(batch)
            state = train_step(state, global_batch)
    """
    import jax
    import numpy as np

    if sharding is None:
        sharding = _default_sharding()
    elif not isinstance(sharding, jax.sharding.Sharding):
        raise TypeError(
            f"`sharding` must be a jax.sharding.Sharding (e.g. a NamedSharding) or None, "
            f"got {type(sharding).__name__}."
        )

    def convert(path: Any, leaf: Any) -> Any:
        array = np.asarray(leaf)
        name = f"leaf {jax.tree_util.keystr(path)} of `batch`" if path else "`batch`"
        if array.ndim == 0:
            raise ValueError(
                f"{name} is a scalar: make_global_batch needs a leading "
                "batch dimension on every leaf."
            )
        blocks = _local_row_blocks(sharding, array.ndim)
        if blocks is not None and array.shape[0] % blocks:
            raise ValueError(
                f"{name} has a leading dimension of {array.shape[0]}, which "
                f"does not divide evenly over this process's {blocks} devices (the row blocks "
                f"of `sharding`): use a per-process batch size that is a multiple of {blocks} "
                "(and drop_remainder=True, so that the last batch is not smaller)."
            )
        return jax.make_array_from_process_local_data(sharding, array)

    return jax.tree_util.tree_map_with_path(convert, batch)
