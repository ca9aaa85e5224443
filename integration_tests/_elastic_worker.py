"""One JAX process of the elastic cluster that test_elastic_multihost.py starts.

Why a separate script: `jax.distributed.initialize` aborts the whole process
when a peer is missing, so it never runs inside pytest.

Usage::

    python _elastic_worker.py PHASE PROCESS_ID NUM_PROCESSES PORT WORKDIR

Phases (one cluster each, in this order, sharing ``WORKDIR/ckpt``):
  first   4 processes, 2 data workers each: train TRAIN_STEPS steps on global
          batches, save params and the data iterator through Orbax.
  second  2 processes, 1 data worker: restore the latest checkpoint (written
          by 4 processes), train TRAIN_STEPS steps with another global batch
          size, save.
  last    3 processes, no data worker: restore (written by 2), train
          TRAIN_STEPS steps, then read the rest of the epoch with a global
          batch of one element per process.
Each reports the elements it was given (``PHASE_<pid>.json``).
"""

from __future__ import annotations

import functools
import json
import os
import sys

SEED = 77
TRAIN_STEPS = 3
# Per-process batch size of each phase (the global batch is this times the count).
PER_PROCESS = {"first": 4, "second": 6, "last": 2}
WORKERS = {"first": 2, "second": 1, "last": 0}


def keep(modulus: int, x: int) -> bool:
    return x % modulus != 0


def pipeline():  # -> grain.MapDataset
    import grain

    def part(start: int, length: int, modulus: int, seed: int) -> grain.MapDataset:
        ds = grain.MapDataset.range(start, start + length).shuffle(seed=seed)
        return ds.filter(functools.partial(keep, modulus))

    return grain.MapDataset.mix(
        [part(0, 240, 3, SEED), part(10_000, 200, 4, SEED + 1)], [0.6, 0.4]
    ).map(int)


def main() -> None:
    phase, pid, count, port, workdir = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    import jax
    from _multihost_worker import report  # this script's directory is on sys.path

    jax.distributed.initialize(f"127.0.0.1:{port}", count, pid, initialization_timeout=30)
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import grain

    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    per_process = PER_PROCESS[phase]
    iterator = grain.experimental.ElasticIterator(
        pipeline(),
        per_process * count,
        grain.sharding.ShardByJaxProcess(),
        read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=16),
        multiprocessing_options=grain.MultiprocessingOptions(num_workers=WORKERS[phase]),
    )
    mngr = ocp.CheckpointManager(
        os.path.join(workdir, "ckpt"), options=ocp.CheckpointManagerOptions(max_to_keep=3)
    )
    params = {"w": jax.device_put(np.zeros((4,), np.float32), replicated)}
    step = 0
    if phase != "first":
        step = mngr.latest_step()
        abstract = {"w": jax.ShapeDtypeStruct((4,), np.float32, sharding=replicated)}
        restored = mngr.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract),
                dataset=grain.checkpoint.CheckpointRestore(iterator),
            ),
        )
        params = restored.params

    @jax.jit
    def train_step(w: jax.Array, batch: jax.Array) -> jax.Array:
        return w + jax.numpy.sum(batch) / batch.shape[0]

    seen: list[int] = []
    for _ in range(TRAIN_STEPS):
        local = np.asarray(next(iterator), np.float32)
        seen.extend(int(x) for x in local)
        batch = jax.make_array_from_process_local_data(rows, local)
        params = {"w": train_step(params["w"], batch)}
        step += 1
    out: dict = {"trained": list(seen), "w": float(np.asarray(params["w"].addressable_data(0))[0])}
    if phase == "last":
        # The rest of the epoch with a global batch of one element per process (so that
        # no partial batch is dropped): this shard's state, another global batch size.
        tail = grain.experimental.ElasticIterator(
            pipeline(), count, grain.sharding.ShardByJaxProcess()
        )
        tail.set_state(iterator.get_state())
        out["rest"] = [int(x) for batch in tail for x in np.asarray(batch)]
    else:
        mngr.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                dataset=grain.checkpoint.CheckpointSave(iterator),
            ),
        )
        mngr.wait_until_finished()
        out["state_bytes"] = len(json.dumps(iterator.get_state()))
    iterator.close()
    mngr.close()
    report(workdir, f"{phase}_{pid}.json", out)
    multihost_utils.sync_global_devices(f"{phase} done")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
