"""Train a small JAX model on ArrayRecord data through grain, interrupt it, resume it.

Run it (the first command writes the data and trains 200 steps; the second is
killed at step 120 after its checkpoint at step 100; the third resumes from that
checkpoint and finishes):

    uv run python docs/examples/train_mlp.py --workdir /tmp/run --steps 200
    uv run python docs/examples/train_mlp.py --workdir /tmp/run2 --steps 200 --crash-at 120
    uv run python docs/examples/train_mlp.py --workdir /tmp/run2 --steps 200

Both runs end by printing a digest of the final parameters: they are the same,
because the model and the data iterator are checkpointed together with Orbax,
and the pipeline resumes with exactly the batches it would have produced.

What it shows:
  * the records are written once as ArrayRecord shards and read with
    `grain.sources.ArrayRecordDataSource` (random access, so the shuffle is
    global and costs no memory);
  * the pipeline: source -> seeded global shuffle -> decode -> repeat for
    several epochs -> batch -> worker processes -> `grain.experimental.device_put`,
    which hands the training loop batches already sharded over every device;
  * `ocp.args.Composite(params=StandardSave(...), data=grain.checkpoint.CheckpointSave(it))`
    saves the model and the data position in one step directory.

Only jax, numpy, orbax and grain are needed (no model framework). The model is
a two-layer perceptron learning a fixed random "teacher" network's labels.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import signal
import sys

# Several CPU devices, so the batch is really sharded; must precede importing jax.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import grain
from grain_sources import write_array_record

FEATURES = 16
CLASSES = 4
HIDDEN = 32
RECORDS = 2048
BATCH = 32
LEARNING_RATE = 0.1


def write_data(directory: pathlib.Path) -> str:
    """Writes the training set as 4 ArrayRecord shards; returns their glob."""
    pattern = str(directory / "train.array_record-*")
    if list(directory.glob("train.array_record-*")):
        return pattern
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    features = rng.standard_normal((RECORDS, FEATURES)).astype(np.float32)
    labels = np.argmax(features @ teacher, axis=1).astype(np.int32)
    records = [f.tobytes() + np.int32(y).tobytes() for f, y in zip(features, labels, strict=True)]
    write_array_record(records, str(directory / "train.array_record"), num_shards=4)
    return pattern


def decode(record: bytes) -> dict[str, np.ndarray]:
    """One record's bytes -> {"x": float32[FEATURES], "y": int32[]}."""
    values = np.frombuffer(record, dtype=np.float32, count=FEATURES)
    label = np.frombuffer(record, dtype=np.int32, offset=4 * FEATURES)[0]
    return {"x": values, "y": label}


def make_iterator(
    pattern: str, epochs: int, sharding: jax.sharding.Sharding
) -> grain.DatasetIterator:
    """The input pipeline, ending in batches already placed on the devices."""
    source = grain.sources.ArrayRecordDataSource(pattern)
    ds = (
        grain.MapDataset.source(source)
        .seed(1234)
        .shuffle()
        .map(decode)
        .repeat(epochs)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .batch(BATCH, drop_remainder=True)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    ds = grain.experimental.device_put(ds, sharding, cpu_buffer_size=4, device_buffer_size=2)
    return iter(ds)


def init_params() -> dict[str, jax.Array]:
    key1, key2 = jax.random.split(jax.random.key(0))
    return {
        "w1": jax.random.normal(key1, (FEATURES, HIDDEN)) * 0.3,
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(key2, (HIDDEN, CLASSES)) * 0.3,
        "b2": jnp.zeros(CLASSES),
    }


def loss_fn(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    hidden = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, batch["y"][:, None], axis=1))


@jax.jit
def train_step(
    params: dict[str, jax.Array], batch: dict[str, jax.Array]
) -> tuple[dict[str, jax.Array], jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return params, loss


def digest(params: dict[str, jax.Array]) -> str:
    """A short hash of the parameters' exact bytes."""
    hasher = hashlib.sha256()
    for name in sorted(params):
        hasher.update(np.asarray(params[name]).tobytes())
    return hasher.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--data", type=pathlib.Path, default=None, help="default: WORKDIR/data")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument(
        "--crash-at", type=int, default=None, help="SIGKILL this process after this step"
    )
    args = parser.parse_args(argv)
    data_dir = args.data or args.workdir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    pattern = write_data(data_dir)

    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    epochs = -(-args.steps * BATCH // RECORDS) + 1
    data_iter = make_iterator(pattern, epochs, sharding)
    # Parameters replicated on every device; restored with the same sharding.
    params = jax.device_put(
        init_params(), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )

    options = ocp.CheckpointManagerOptions(max_to_keep=2, save_interval_steps=1)
    with ocp.CheckpointManager(args.workdir / "checkpoints", options=options) as manager:
        step = manager.latest_step() or 0
        if step:
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
            restored = manager.restore(
                step,
                args=ocp.args.Composite(
                    params=ocp.args.StandardRestore(abstract),
                    data=grain.checkpoint.CheckpointRestore(data_iter),
                ),
            )
            params = restored.params
            print(f"resumed at step {step}", flush=True)
        loss = jnp.nan
        while step < args.steps:
            batch = next(data_iter)
            params, loss = train_step(params, batch)
            step += 1
            if step % args.checkpoint_every == 0:
                manager.save(
                    step,
                    args=ocp.args.Composite(
                        params=ocp.args.StandardSave(params),
                        data=grain.checkpoint.CheckpointSave(data_iter),
                    ),
                )
            if step == args.crash_at:
                manager.wait_until_finished()
                print(f"crashing at step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        manager.wait_until_finished()
    print(f"step {step} loss {float(loss):.4f} params {digest(params)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
