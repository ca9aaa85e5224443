# %% [markdown]
# # The DataLoader
#
# `grain.DataLoader` is the older, all-in-one way to build an input pipeline
# (the Dataset API of `dataset_basics.py` is the other). You give it three
# things and iterate over it:
#
# - a **sampler**, which decides which record to read at each step (shuffled,
#   repeated for several epochs, split between hosts);
# - a **data source**, which reads a record given its key;
# - a list of **operations** applied to each record (maps, filters, batches).
#
# It runs the operations in worker processes if you ask for them, and its
# iterator's position can be checkpointed with Orbax.
#
# This tutorial runs offline: the ImageNet-like dataset it reads is made up and
# written to a temporary directory by `tiny_datasets.py` (next to this file) in
# TFDS's format. With network access, `tfds.data_source("imagenet_a",
# split="test")` reads the real thing. The original guide resizes images with
# OpenCV and shows them with matplotlib; here PIL resizes them and the loop
# prints their shapes instead of drawing them.
#
#     uv run python docs/tutorials/data_loader.py

# %%
import atexit
import json
import pathlib
import shutil
import tempfile

import numpy as np
import orbax.checkpoint as ocp
import PIL.Image
import tensorflow_datasets as tfds
import tiny_datasets  # the offline stand-ins, next to this file

import grain.python as grain

workdir = pathlib.Path(tempfile.mkdtemp(prefix="grain_data_loader_"))
atexit.register(shutil.rmtree, workdir, ignore_errors=True)
data_dir = tiny_datasets.build("tiny_imagenet_a", workdir / "tfds")

# %% [markdown]
# ## The sampler
#
# `grain.IndexSampler` yields one `RecordMetadata` per step, with three fields:
#
# - `index`: the step, counting up from 0 across epochs; it is what a
#   checkpoint stores;
# - `record_key`: which record of the source to read at that step;
# - `rng`: a random generator for this record alone (when the sampler has a
#   seed), for operations that need random numbers.
#
# Every value is computed from the step number, so `sampler[k]` is as cheap as
# the next item. Iterating over a sampler consumes it, like any iterator; the
# DataLoader does not iterate it, it asks for `sampler[k]`.
#
# Five records and two epochs keep the output short; for a whole dataset pass
# `num_records=len(source)`.

# %%
index_sampler_example = grain.IndexSampler(
    num_records=5,
    num_epochs=2,
    shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
    shuffle=True,
    seed=0,
)
for record_metadata in index_sampler_example:
    print(record_metadata)

# Consumed: a new one for the DataLoader below.
index_sampler = grain.IndexSampler(
    num_records=5,
    num_epochs=2,
    shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
    shuffle=True,
    seed=0,
)

# %% [markdown]
# ## The data source
#
# Any object with `__len__` and `__getitem__` serves. Two common ones:
#
# - `grain.ArrayRecordDataSource(paths)` reads ArrayRecord files;
# - `tfds.data_source(name, split=...)` reads a prepared TFDS dataset, without
#   TensorFlow.
#
# The records of this one are dicts with an image, a label and a file name.

# %%
source = tfds.data_source("tiny_imagenet_a", split="test", data_dir=data_dir)
print(f"# records: {len(source)}")
first = source[0]
print("First record:", {key: np.shape(value) for key, value in first.items()})
print("  label:", first["label"], " file name:", first["file_name"])

# %% [markdown]
# ## Operations
#
# Operations are objects, one class per kind: subclass `grain.MapTransform`
# (a `map(element)` method), `grain.RandomMapTransform` (`random_map(element,
# rng)`), `grain.FilterTransform` (`filter(element)` returning a bool) and the
# others, or use the ready-made `grain.Batch`.
#
# Two things to keep in mind:
#
# 1. Workers receive the operations by pickling (or by forking the process),
#    so define them at module level, not inside a function.
# 2. `grain.Batch(batch_size)` batches what *this* loader reads. When each host
#    reads its own shard, as with a sharded `IndexSampler`, that is the batch
#    size per host, not the global one.

# %%


class ResizeAndCrop(grain.MapTransform):
    """Scales the image to 256x256, then keeps its top-left 224x224 corner."""

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        image = PIL.Image.fromarray(element["image"])
        image = image.resize((256, 256), resample=PIL.Image.Resampling.BILINEAR)
        element["image"] = np.asarray(image)[:224, :224]
        return element


transformations = [ResizeAndCrop()]

# %% [markdown]
# ## The DataLoader
#
# The DataLoader puts the pieces together. `worker_count=0` runs everything
# in this process: quick to start, good for trying things out. With
# `worker_count=n` it starts n worker processes, collects what they produce,
# and shuts them down when you are done. The output is the same either way.

# %%
data_loader = grain.DataLoader(
    data_source=source,
    operations=transformations,
    sampler=index_sampler,
    worker_count=0,
)

for element in data_loader:
    # In a notebook: plt.imshow(element["image"]); plt.show()
    print(element["file_name"], element["image"].shape, element["image"].dtype)

# %% [markdown]
# A batch stacks consecutive elements into arrays with a leading batch
# dimension (strings become an array of strings):

# %%
batched_loader = grain.DataLoader(
    data_source=source,
    operations=[ResizeAndCrop(), grain.Batch(batch_size=4, drop_remainder=True)],
    sampler=grain.IndexSampler(
        num_records=len(source), shard_options=grain.NoSharding(), shuffle=True, seed=0
    ),
    worker_count=2,
)
for batch in batched_loader:
    print(batch["image"].shape, batch["label"])
    break

# %% [markdown]
# ## Checkpointing with Orbax
#
# `grain.GrainCheckpointSave` and `grain.GrainCheckpointRestore` (the same
# objects as `grain.checkpoint.CheckpointSave` / `CheckpointRestore`) let an
# Orbax `CheckpointManager` save the DataLoader's iterator together with the
# model. With several hosts, Orbax coordinates them and each host writes its
# own small file.

# %%
data_iter = iter(data_loader)

num_steps = 5
for i in range(num_steps):
    x = next(data_iter)
    print(i, x["file_name"], x["label"])

# %%
checkpoint_dir = workdir / "orbax"
mngr = ocp.CheckpointManager(checkpoint_dir)

assert mngr.save(step=num_steps, args=grain.GrainCheckpointSave(data_iter), force=True)
mngr.wait_until_finished()  # saving runs in the background by default

for path in sorted(checkpoint_dir.rglob("*")):
    print(path.relative_to(checkpoint_dir))

# %% [markdown]
# The saved state is a small JSON document: the next step to read, plus
# descriptions of the sampler and the data source. Restoring compares those
# descriptions with the DataLoader it restores into, and refuses a checkpoint
# made with another sampler or source rather than resuming somewhere else.

# %%
(state_file,) = checkpoint_dir.glob("*/*/*.json")
print(state_file.read_text())

# %%
after_save = []
for i in range(5, 10):
    x = next(data_iter)
    after_save.append(x["file_name"])
    print(i, x["file_name"], x["label"])

# %%
mngr.restore(num_steps, args=grain.GrainCheckpointRestore(data_iter))

# %%
# Back at step 5: the same records again.
replayed = []
for i in range(5, 10):
    x = next(data_iter)
    replayed.append(x["file_name"])
    print(i, x["file_name"], x["label"])
assert replayed == after_save

# %% [markdown]
# A DataLoader with another sampler (here, another seed) refuses the
# checkpoint:

# %%
other_loader = grain.DataLoader(
    data_source=source,
    operations=transformations,
    sampler=grain.IndexSampler(
        num_records=5, num_epochs=2, shard_options=grain.NoSharding(), shuffle=True, seed=1
    ),
)
try:
    mngr.restore(num_steps, args=grain.GrainCheckpointRestore(iter(other_loader)))
except ValueError as error:
    print("refused:", error)
mngr.close()

# %% [markdown]
# ## Extras
#
# ### Sharing in-memory data with the workers
#
# `grain.InMemoryDataSource` stores a sequence of simple values (`int`,
# `float`, `bool`, `str` and `bytes` under 10 MB each, `None`) once, in
# shared memory. Worker processes read the same memory instead of each
# receiving a copy. The process that created it frees it when the source is
# closed or garbage collected, or at exit.

# %%
in_memory_datasource = grain.InMemoryDataSource(range(5))
print(in_memory_datasource)
print(f"First Record Read: {in_memory_datasource[0]}")

# %%
data_loader = grain.DataLoader(
    data_source=in_memory_datasource,
    sampler=grain.IndexSampler(
        num_records=len(in_memory_datasource),
        num_epochs=2,
        shard_options=grain.NoSharding(),
        shuffle=True,
        seed=0,
    ),
    worker_count=5,
)

data_iter = iter(data_loader)
for _ in range(len(in_memory_datasource) * 2):
    x = next(data_iter)
    print(x)
data_iter.close()  # stops the five workers now rather than at garbage collection

# %% [markdown]
# ### Threads within each worker
#
# `read_options` sets how each process reads: `num_threads` threads reading up
# to `prefetch_buffer_size` records ahead. Each worker has its own pool, so the
# loader below may use up to 10 x 8 = 80 reading threads. More threads help
# when records wait on slow storage; for data already in memory, few suffice.

# %%
data_loader = grain.DataLoader(
    data_source=source,
    sampler=grain.IndexSampler(
        num_records=len(source),
        num_epochs=2,
        shard_options=grain.NoSharding(),
        shuffle=True,
        seed=0,
    ),
    worker_count=10,
    read_options=grain.ReadOptions(num_threads=8, prefetch_buffer_size=500),
)
with iter(data_loader) as data_iter:
    names = [next(data_iter)["file_name"] for _ in range(3)]
print("first three records:", names)
# The state has Grain's keys: per worker, the last sampler index it read.
seen = json.loads(data_iter.get_state())["last_seen_indices"]
print("state:", max(seen.values()) + 1, "steps read")
