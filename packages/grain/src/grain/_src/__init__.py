"""Compatibility aliases for the few private Grain paths that well-known clients import.

Not an API: each module here offers, under the private path of Grain that a
widely used client imports at module level, exactly the names that client
uses, with the behaviour it uses, built on public names of this library:

  python.shared_memory_array            Keras 3's grain adapter
  python.ipc.shared_memory_array        Flax (Grain 0.2.18's home of SharedMemoryArray)
  python.dataset.sources.tfrecord_dataset   MaxText (subclasses `_TFRecordReader`
                                        and `_TFRecordDatasetIterator` to read GCS)
  python.dataset.transformations.prefetch   axlearn, xLSTM-jax and others
  python.dataset.dataset                axlearn (subclasses MapDataset)
  python.data_loader                    axlearn (`_determine_worker_count`)
  core.sharding                         axlearn's tests and others (`even_split`)

Nothing else of Grain's private tree is here. `docs/compatibility.md` lists
the private paths clients use and why each one is or is not aliased.
"""
