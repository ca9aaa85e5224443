"""One JAX process of the localhost cluster that integration_tests/test_multihost.py starts.

Why a separate script: `jax.distributed.initialize` aborts the whole process
(SIGABRT) when a peer is missing, so it must never run inside pytest. Each
process of the cluster runs this file; the test reads what it reports.

Usage::

    python _multihost_worker.py MODE PROCESS_ID NUM_PROCESSES PORT WORKDIR

`WORKDIR` holds ``data.array_record`` (records ``b"<id>"``), the checkpoints
(``ckpt/``) and the reports (``<mode>_<process id>.json``, written atomically).

Modes:
  save     read the whole epoch through two pipelines (a sliced, shuffled,
           batched `mp_prefetch` Dataset and a DataLoader sharded with
           ShardByJaxProcess); at step STEP checkpoint both, with a global
           jax.Array parameter, through an async Orbax CheckpointManager; build
           a global batch with make_global_batch; report, then wait to be
           SIGKILLed (a crash after the checkpoint).
  restore  restore the latest checkpoint into fresh pipelines and read the
           rest of the epoch; report.
  mismatch restore only the Dataset iterator of the latest checkpoint, which
           another number of processes wrote; report the error.

XLA_FLAGS (two CPU devices per process) must be set by the launcher, before
this interpreter imports jax.
"""

from __future__ import annotations

import json
import os
import sys
import time

STEP = 3
BATCH = 4
SEED = 1234
NUM_WORKERS = 2


def decode(record: bytes) -> int:
    return int(record)


def build(workdir: str, pid: int, count: int) -> tuple:
    """The two pipelines of this process, at their start."""
    from grain_dataset import Batch, MapDataset, MapTransform
    from grain_index import IndexSampler
    from grain_jax import ShardByJaxProcess
    from grain_mp import DataLoader, MultiprocessingOptions
    from grain_sources import ArrayRecordDataSource

    class Decode(MapTransform):
        def map(self, element: bytes) -> int:
            return decode(element)

    source = ArrayRecordDataSource(os.path.join(workdir, "data.array_record"))
    dataset = (
        MapDataset.source(source)
        .map(decode)
        .shuffle(seed=SEED)[pid::count]
        .to_iter_dataset()
        .batch(BATCH, drop_remainder=True)
        .mp_prefetch(MultiprocessingOptions(num_workers=NUM_WORKERS))
    )
    loader = DataLoader(
        data_source=source,
        sampler=IndexSampler(
            num_records=len(source),
            shard_options=ShardByJaxProcess(drop_remainder=True),
            shuffle=True,
            num_epochs=1,
            seed=SEED + 1,
        ),
        operations=[Decode(), Batch(batch_size=BATCH, drop_remainder=True)],
        worker_count=0,
    )
    return iter(dataset), iter(loader)


def report(workdir: str, name: str, content: dict) -> None:
    path = os.path.join(workdir, name)
    with open(path + ".tmp", "w") as f:
        json.dump(content, f)
    os.replace(path + ".tmp", path)


def main() -> None:
    mode, pid, count, port, workdir = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    import jax

    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=count,
        process_id=pid,
        initialization_timeout=30,
    )
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from grain_jax import CheckpointRestore, CheckpointSave, make_global_batch

    dataset_it, loader_it = build(workdir, pid, count)
    out: dict = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "global_devices": jax.device_count(),
    }
    options = ocp.CheckpointManagerOptions(enable_async_checkpointing=True, max_to_keep=2)
    mngr = ocp.CheckpointManager(os.path.join(workdir, "ckpt"), options=options)

    def rest(iterator: object) -> list:
        return [np.asarray(batch).tolist() for batch in iterator]

    if mode == "save":
        # The parameter: process i's two devices hold i + 1.
        params = {"w": make_global_batch(np.full((2,), pid + 1, np.float32))}
        dataset, loader = [], []
        for step in range(10**6):
            if step == STEP:
                mngr.save(
                    STEP,
                    args=ocp.args.Composite(
                        params=ocp.args.StandardSave(params),
                        dataset=CheckpointSave(dataset_it),
                        loader=CheckpointSave(loader_it),
                    ),
                )
            try:
                batch, loader_batch = next(dataset_it), next(loader_it)
            except StopIteration:
                break
            dataset.append(batch.tolist())
            loader.append(loader_batch.tolist())
            if step == 0:
                local = np.asarray(batch, np.int64)
                global_batch = make_global_batch(local)
                out["global_shape"] = list(global_batch.shape)
                out["global_sum"] = int(jax.jit(jax.numpy.sum)(global_batch))
                out["allgathered_sum"] = int(multihost_utils.process_allgather(local).sum())
        mngr.wait_until_finished()
        dataset_it.close()
        out.update(dataset=dataset, loader=loader, saved_at=STEP)
        report(workdir, f"save_{pid}.json", out)
        time.sleep(120)  # The test SIGKILLs the whole cluster here.
        sys.exit("not killed")

    if mode == "mismatch":
        try:
            mngr.restore(
                mngr.latest_step(), args=ocp.args.Composite(dataset=CheckpointRestore(dataset_it))
            )
        except ValueError as error:
            out["error"] = str(error)
        report(workdir, f"mismatch_{pid}.json", out)
        multihost_utils.sync_global_devices("mismatch done")
        jax.distributed.shutdown()
        return

    # make_global_batch's default sharding: the rows split over every device.
    rows = NamedSharding(Mesh(np.asarray(jax.devices()), ("data",)), PartitionSpec("data"))
    abstract = {"w": jax.ShapeDtypeStruct((2 * count,), np.float32, sharding=rows)}
    step = mngr.latest_step()
    restored = mngr.restore(
        step,
        args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract),
            dataset=CheckpointRestore(dataset_it),
            loader=CheckpointRestore(loader_it),
        ),
    )
    w = restored.params["w"]
    out.update(
        step=step,
        w_local=sorted({float(v) for s in w.addressable_shards for v in np.asarray(s.data)}),
        w_sum=float(jax.jit(jax.numpy.sum)(w)),
        dataset=rest(dataset_it),
        loader=rest(loader_it),
    )
    dataset_it.close()
    mngr.close()
    report(workdir, f"restore_{pid}.json", out)
    multihost_utils.sync_global_devices("restore done")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
