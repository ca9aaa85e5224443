# %% [markdown]
# # Dataset basics: MapDataset, IterDataset and DatasetIterator
#
# A grain pipeline is built from three kinds of objects:
#
# - `MapDataset`: elements you can ask for by position, like a lazy list;
# - `IterDataset`: elements you can only walk through, in order;
# - `DatasetIterator`: the walk itself, whose position can be saved and
#   restored.
#
# This tutorial builds a small pipeline of each kind. It needs no data files and
# no network; run it with `uv run python docs/tutorials/dataset_basics.py`.
# The `# %%` markers split it into cells for editors that understand them.
#
# It uses the flat namespace `grain.python`, which holds every name below;
# `import grain` works too (`grain.MapDataset`, `grain.ReadOptions`, ...).

# %%
import pprint

import numpy as np

import grain.python as grain

# %% [markdown]
# ## MapDataset: random access to elements
#
# Start from any sequence. Each method returns a new dataset; nothing is
# computed until an element is asked for, and then only that element is.

# %%
dataset = (
    grain.MapDataset.source([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])  # or MapDataset.range(11)
    .shuffle(seed=10)  # a permutation of all 11 positions
    .map(lambda x: x + 1)  # applied to each element when it is read
    .batch(batch_size=2)  # groups neighbours; the last batch holds the odd one out
)

print("first batch:", dataset[0])
print("every batch:")
pprint.pprint(list(dataset))

# %% [markdown]
# A source only has to answer `len(source)` and `source[i]`. Deriving from
# `grain.RandomAccessDataSource` is not required, but it documents the intent
# (and type checkers understand it). A source that can read many records at
# once may also define `__getitems__(indices)` and declare it with the class
# attribute `batched_reads = True`: batches then call it once.


# %%
class EightNumbers(grain.RandomAccessDataSource):
    def __init__(self):
        self._values = [0, 1, 2, 3, 4, 5, 6, 7]

    def __len__(self):
        return len(self._values)

    def __getitem__(self, index):
        return self._values[index]


dataset = (
    grain.MapDataset.source(EightNumbers())
    .shuffle(seed=10)
    .map(lambda x: x + 1)
    .batch(batch_size=2)
)
print("len:", len(dataset))
pprint.pprint(list(dataset))

# %% [markdown]
# ### Positions past the end are later epochs
#
# `len(dataset)` is one epoch. Asking for position `len(dataset) + k` is not an
# error: it is element `k` of the second epoch. Stages with randomness draw
# anew in each epoch, so a shuffled dataset visits its records in another
# order the second time around.

# %%
print("third batch of the second epoch:", dataset[len(dataset) + 2])
print(
    "same as the first epoch's third batch?", np.array_equal(dataset[len(dataset) + 2], dataset[2])
)

first_epoch = np.concatenate([dataset[i] for i in range(len(dataset))])
second_epoch = np.concatenate([dataset[len(dataset) + i] for i in range(len(dataset))])
print("epoch 0 order:", first_epoch.tolist())
print("epoch 1 order:", second_epoch.tolist())
assert sorted(first_epoch.tolist()) == sorted(second_epoch.tolist())  # same records

# %% [markdown]
# ### Filtering
#
# A filter cannot shrink a `MapDataset` without reading everything (it would
# not know where position `i` lands), so it keeps the length and puts `None`
# where an element was dropped. Iterating skips those holes.
#
# Every hole still costs a read. If a filter throws away most of your data,
# store a filtered copy instead; grain warns when a pipeline drops more than 90%
# of what it reads.

# %%
filtered = dataset.filter(lambda batch: (batch[0] + batch[1]) % 2 == 0)
print(f"filtered length: {len(filtered)} (unchanged)")
print("by position:", [filtered[i] for i in range(len(filtered))])
print("iterated:", list(filtered))

# %% [markdown]
# ### Slicing
#
# Slices work as on a Python list and return a `MapDataset`. A strided slice
# is the simplest way to give each of several hosts its own share of the data:
# host `i` of `n` takes `dataset[i::n]`.

# %%
shard_index, shard_count = 0, 2
shard = dataset[shard_index::shard_count]
print(f"shard {shard_index} of {shard_count}: {len(shard)} batches")
print("its batches:", shard[0], shard[1])
assert np.array_equal(shard[1], dataset[2])

# %% [markdown]
# ## IterDataset: reading ahead with threads
#
# Training reads elements in order, and reading one often means waiting on a
# file. `to_iter_dataset` turns a `MapDataset` into an `IterDataset` that
# reads ahead in a pool of threads: up to `num_threads` threads keep up to
# `prefetch_buffer_size` elements in flight, and you still get them in order.
# Elements that a filter dropped are skipped.
#
# Do this late in the pipeline: random access (and so global shuffling) is gone
# afterwards; only per-element stages (`map`, `filter`, `batch`, ...) remain.

# %%
iter_dataset = shard.to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
for element in iter_dataset:
    print("from the thread pool:", element)

# %% [markdown]
# ## DatasetIterator: a position you can save
#
# `iter()` of a dataset is a `grain.DatasetIterator`. Besides `next()`, it has
# `get_state()`, a small dict of integers that says where it is, and
# `set_state(state)`, which moves it back there. The state never holds data:
# since every element is a function of its position (and the seeds), the
# position is all a checkpoint needs, provided the files underneath do not
# change.

# %%
dataset_iter = iter(dataset)
print("is a DatasetIterator:", isinstance(dataset_iter, grain.DatasetIterator))

print("first:", next(dataset_iter))
checkpoint = dataset_iter.get_state()
print("state after one element:", checkpoint)

second = next(dataset_iter)
print("second:", second)

dataset_iter.set_state(checkpoint)  # back to just after the first element
again = next(dataset_iter)
print("second again:", again)
assert np.array_equal(again, second)

# %% [markdown]
# The same works with a fresh iterator, e.g. in a new process after a
# preemption: create the pipeline again, call `set_state` with the saved
# state, and it continues with exactly the elements that would have followed.
# The advanced tutorial (`dataset_advanced.py`) saves such states with Orbax.

# %%
fresh = iter(dataset)
fresh.set_state(checkpoint)
assert np.array_equal(next(fresh), second)
print("a fresh iterator resumed at the same place")
