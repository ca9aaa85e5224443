# %% [markdown]
# # Advanced Dataset usage: checkpoints, mixtures, shuffling and prefetching
#
# This tutorial continues `dataset_basics.py` with what most training input
# pipelines need sooner or later:
#
# 1. saving the pipeline's position in an Orbax checkpoint and resuming from it;
# 2. mixing several datasets with weights, also over many epochs;
# 3. shuffling: globally, or hierarchically for files without random access;
# 4. reading ahead: threads, transfers to devices, worker processes, and
#    letting grain pick the sizes.
#
# It runs offline: the MNIST-like datasets it reads are made up and written to
# a temporary directory by `tiny_datasets.py` (next to this file), in the same
# TFDS format as the real ones. With network access, `tfds.data_source("mnist",
# split="train")` reads the real MNIST and everything below works unchanged.
# It needs `tensorflow-datasets`, `orbax-checkpoint`, `jax` and `pyarrow`
# (all in this workspace's dev environment) and runs on a CPU.
#
#     uv run python docs/tutorials/dataset_advanced.py

# %%
import atexit
import pathlib
import shutil
import sys
import tempfile

import jax
import numpy as np
import orbax.checkpoint as ocp
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow_datasets as tfds
import tiny_datasets  # the offline stand-ins, next to this file

import grain

workdir = pathlib.Path(tempfile.mkdtemp(prefix="grain_advanced_"))
atexit.register(shutil.rmtree, workdir, ignore_errors=True)

data_dir = str(workdir / "tfds")
tiny_datasets.build("tiny_mnist", data_dir)
tiny_datasets.build("tiny_pneumonia_mnist", data_dir)


def mnist():
    return tfds.data_source("tiny_mnist", split="train", data_dir=data_dir)


def pneumonia_mnist():
    return tfds.data_source("tiny_pneumonia_mnist", split="train", data_dir=data_dir)


# %% [markdown]
# ## 1. Checkpointing the input pipeline
#
# A `DatasetIterator`'s state is a few integers (see the basics tutorial), so it
# is cheap to save with every model checkpoint. `grain.checkpoint.CheckpointSave`
# and `CheckpointRestore` let Orbax save and restore it next to the model; Orbax
# also takes care of the several-hosts case, where each host writes its own
# small file.
#
# First, a shuffled pipeline over the MNIST stand-in, and a few steps of it:

# %%
ds = grain.MapDataset.source(mnist()).seed(seed=45).shuffle().to_iter_dataset()

num_steps = 4
ds_iter = iter(ds)
for step in range(num_steps):
    x = next(ds_iter)
    print(step, x["label"])

# %% [markdown]
# Save the iterator at step 4. Orbax writes asynchronously by default:
# `wait_until_finished` blocks until the files are on disk. (`force=True` lets
# `save` write even when the manager's save interval would skip this step.)

# %%
checkpoint_dir = workdir / "orbax"
mngr = ocp.CheckpointManager(checkpoint_dir)

assert mngr.save(step=num_steps, args=grain.checkpoint.CheckpointSave(ds_iter), force=True)
mngr.wait_until_finished()

for path in sorted(checkpoint_dir.rglob("*")):
    print(path.relative_to(checkpoint_dir))

# %% [markdown]
# The data iterator's part of the checkpoint is one JSON file per process,
# `process_<i>-of-<n>.json`, holding `get_state()`: here, the position of the
# next element to read.

# %%
for state_file in sorted(checkpoint_dir.glob("*/*/*.json")):
    print(state_file.name, "->", state_file.read_text())

# %% [markdown]
# Keep reading, then restore the checkpoint into the same iterator (a fresh
# `iter(ds)` works just as well, e.g. after a restart) and read the same steps
# again: the labels repeat exactly.

# %%
after_save = []
for step in range(4, 8):
    x = next(ds_iter)
    after_save.append(int(x["label"]))
    print(step, x["label"])

mngr.restore(num_steps, args=grain.checkpoint.CheckpointRestore(ds_iter))
replayed = []
for step in range(4, 8):
    x = next(ds_iter)
    replayed.append(int(x["label"]))
    print(step, x["label"])
assert replayed == after_save
mngr.close()

# %% [markdown]
# ## 2. Mixing datasets
#
# Mixing draws elements from several datasets in proportion to weights. There
# are two mixers:
#
# - `grain.MapDataset.mix` keeps random access: position `i` of the mixture is
#   computed directly. Use it when every component has an element at every
#   position.
# - `grain.IterDataset.mix` walks its components in order. Use it when a
#   component is filtered, since a filtered `MapDataset` has holes.
#
# The two stand-ins below mix "medical" images with handwritten digits; the
# combination is meaningless, but both are small. (With the real datasets,
# make TFDS prepare them in the `array_record` file format, which has random
# access; `tiny_datasets.build` writes that format.)

# %%
ds1 = grain.MapDataset.source(pneumonia_mnist()).map(lambda features: features["image"])
ds2 = grain.MapDataset.source(mnist()).map(lambda features: features["image"])
ds = grain.MapDataset.mix([ds1, ds2], weights=[0.7, 0.3])
print(f"Mixed dataset length = {len(ds)}")
print("shape of an element:", np.shape(ds[0]))

# %% [markdown]
# With filters, mix `IterDataset`s:

# %%
ds1 = (
    grain.MapDataset.source(pneumonia_mnist())
    .filter(lambda features: int(features["label"]) == 1)
    .to_iter_dataset()
)
ds2 = (
    grain.MapDataset.source(mnist())
    .filter(lambda features: int(features["label"]) > 4)
    .to_iter_dataset()
)
ds = grain.IterDataset.mix([ds1, ds2], weights=[0.7, 0.3]).map(lambda features: features["image"])
print("shape of an element:", np.shape(next(iter(ds))))

# %% [markdown]
# ### More than one epoch
#
# A mixture's epoch ends when one component runs out: its length follows from
# the shortest component and the weights, and what the other components had
# left is not used in that epoch. To use every record, repeat the components
# before mixing. A repeated dataset is infinite (its length is `sys.maxsize`),
# and so is the mixture.

# %%
ds1 = grain.MapDataset.source(pneumonia_mnist()).repeat()
ds2 = grain.MapDataset.source(mnist()).repeat()

ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
print(f"ds1 length = {len(ds1)}")
print(f"ds2 length = {len(ds2)}")
print(f"Mixed dataset length = {len(ds)}")
assert len(ds) == sys.maxsize

# %% [markdown]
# ## 3. Shuffling
#
# Two ways to shuffle, depending on whether the files allow random access:
#
# | | global shuffle | hierarchical shuffle |
# |---|---|---|
# | how | permutes all records | shuffles the files, reads several at once, shuffles a window |
# | files | random access (ArrayRecord, TFDS `array_record`) | any: Parquet, TFRecord too |
# | quality | every order equally likely | local: records stay near their file neighbours |
# | memory | none beyond the index | the window and the open files |
#
# ### Global shuffle
#
# `shuffle` on a `MapDataset` permutes all positions, and draws another
# permutation each epoch. When mixing, shuffle each component before the mix
# (so the mixture keeps its weights exactly) and give each component its own
# seed (so no two components share random numbers).

# %%
ds1 = grain.MapDataset.source(pneumonia_mnist()).seed(42).shuffle().repeat()
ds2 = grain.MapDataset.source(mnist()).seed(43).shuffle().repeat()

ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
print(f"Mixed dataset length = {len(ds)}")
print("first labels:", [int(ds[i]["label"]) for i in range(9)])

# %% [markdown]
# ### Hierarchical shuffle
#
# Formats such as Parquet are read front to back. To shuffle them, start from
# the list of file names (shuffled, if you like: it is a `MapDataset`), open
# each file as an `IterDataset`, interleave several files, and shuffle what
# comes out in a window. Larger windows and more interleaved files shuffle
# better and cost more memory. The result still checkpoints exactly.
#
# `grain.experimental.ParquetIterDataset(path)` reads one Parquet file row by
# row (it needs `pyarrow`). Here are four small Parquet files to read:

# %%
filenames = []
for part in range(4):
    path = workdir / f"part-{part}.parquet"
    rows = range(part * 100, part * 100 + 20)
    pq.write_table(pa.table({"id": list(rows), "part": [part] * len(rows)}), path)
    filenames.append(str(path))

# %%
dataset = grain.MapDataset.source(filenames)
dataset = dataset.map(grain.experimental.ParquetIterDataset)
dataset = grain.experimental.WindowShuffleIterDataset(
    grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(filenames)),
    window_size=10,
    seed=42,
)
iter_ds = iter(dataset)
for _ in range(5):
    print(next(iter_ds))

# %% [markdown]
# ## 4. Reading ahead
#
# ### A thread that reads ahead
#
# `grain.experimental.ThreadPrefetchIterDataset` runs everything before it in a
# background thread and keeps `prefetch_buffer_size` elements ready, so that the
# consumer rarely waits. Here it feeds `jax.device_put`, which moves each
# element to the default device.

# %%
cpu_buffer_size = 3
ds = grain.MapDataset.source(mnist()).to_iter_dataset()
ds = ds.map(lambda x: x)  # stands for your own processing
ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu_buffer_size)
ds = ds.map(jax.device_put)
print("on device:", type(next(iter(ds))["image"]).__name__)

# %% [markdown]
# ### Transfers to devices ahead of time
#
# `grain.experimental.device_put` does both: it keeps `cpu_buffer_size` elements
# ready on the host and `device_buffer_size` already transferred, to a
# `jax.Device` or, as here, a sharding over all devices. Transfers then overlap
# with the training step. `PartitionSpec("data")` splits every leaf along its
# first dimension over the devices, so the records are batched first (a
# record's scalar label has no dimension to split) with a batch size that is a
# multiple of the device count.
#
# This runs on CPU devices here; on a TPU or GPU the same code transfers to the
# accelerator.

# %%
tpu_buffer_size = 2
devices = jax.devices()
ds = grain.MapDataset.source(mnist()).batch(4 * len(devices), drop_remainder=True).to_iter_dataset()

mesh = jax.sharding.Mesh(np.array(devices), axis_names=("data",))
p = jax.sharding.PartitionSpec("data")
sharding = jax.sharding.NamedSharding(mesh, p)

ds = grain.experimental.device_put(
    ds=ds,
    device=sharding,
    cpu_buffer_size=cpu_buffer_size,
    device_buffer_size=tpu_buffer_size,
)
batch = next(iter(ds))
print("a batch of images on", len(devices), "device(s):", batch["image"].shape)
print("its sharding:", batch["image"].sharding)

# %% [markdown]
# ### Threads in `to_iter_dataset`
#
# `to_iter_dataset` itself reads ahead with a pool of threads, configured with
# `grain.ReadOptions` (16 threads and 500 elements by default). `num_threads`
# is an upper bound: the pool adds threads only while that makes reading
# faster.

# %%
read_options = grain.ReadOptions(num_threads=32, prefetch_buffer_size=400)
ds = grain.MapDataset.source(mnist()).to_iter_dataset(read_options=read_options)
print("read", sum(1 for _ in ds), "elements")

# %% [markdown]
# ### Letting grain choose the read-ahead
#
# `grain.experimental.pick_performance_config` reads a few elements, measures
# their size and cost, and proposes options that stay within a memory budget.
# Its `read_options` go to `to_iter_dataset`:

# %%
ds = grain.MapDataset.source(mnist())
performance_config = grain.experimental.pick_performance_config(
    ds=ds,
    ram_budget_mb=1024,
    max_workers=None,
    max_buffer_size=None,
)
print(performance_config.read_options)
ds = ds.to_iter_dataset(read_options=performance_config.read_options)

# %% [markdown]
# ### Worker processes
#
# Threads help while elements wait on files; they do not help Python code that
# computes, since only one thread runs Python at a time. `mp_prefetch` runs the
# pipeline in worker processes instead, each worker producing every n-th
# element, and merges their outputs back into the original order.
# `per_worker_buffer_size` is how many finished elements (batches, if the
# pipeline batches) each worker may hold ready. With `num_workers=0` nothing
# changes: the pipeline runs in this process.
#
# Workers are started when iteration begins, and stopped when the iterator is
# closed, garbage collected, or the program exits.

# %%
ds = grain.MapDataset.source(mnist()).to_iter_dataset()

prefetch_lazy_iter_ds = ds.mp_prefetch(
    grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=10),
)
with iter(prefetch_lazy_iter_ds) as it:
    labels = [int(next(it)["label"]) for _ in range(10)]
print("labels from 3 workers:", labels)
assert labels == [int(mnist()[i]["label"]) for i in range(10)]  # the single-process order

# %% [markdown]
# `pick_performance_config` also chooses a worker count: one worker per CPU when
# elements are expensive enough to be worth sending between processes, else 0.
# That count depends on the machine, and so may the output: a stage after
# `to_iter_dataset` that combines elements (an `IterDataset.batch`, for one)
# combines, in each worker, only that worker's elements. (Batch on the
# `MapDataset`, before `to_iter_dataset`, and the output is the same for any
# worker count.) To get the same data on every run, store the chosen config with
# your experiment and pass the stored values in later runs.

# %%
ds = grain.MapDataset.source(mnist()).to_iter_dataset()

performance_config = grain.experimental.pick_performance_config(
    ds=ds,
    ram_budget_mb=1024,
    max_workers=None,
    max_buffer_size=None,
)
print(performance_config.multiprocessing_options)
prefetch_lazy_iter_ds = ds.mp_prefetch(
    performance_config.multiprocessing_options,
)
with iter(prefetch_lazy_iter_ds) as it:
    print("first label:", next(it)["label"])
