"""Pins every public namespace to the names the spec documents and we have built.

A name added to or dropped from a namespace fails here until this list is
updated on purpose. Each name must also resolve to a real object.
"""

import importlib

import pytest

import grain_dataset.stages
import grain_index

EXPORTS = {
    "grain": [
        "DataLoader",
        "DataLoaderIterator",
        "DatasetIterator",
        # Ours: `import grain` warns with it when Google's `grain` is installed too.
        "GrainDistributionConflictWarning",
        "IterDataset",
        "MapDataset",
        "MultiprocessingOptions",
        "ReadOptions",
        "Record",
        "RecordMetadata",
        "__version__",
        "__version_info__",
        "checkpoint",
        "config",
        "constants",
        "experimental",
        "load",
        "monitoring",
        "multiprocessing",
        "python",
        "samplers",
        "sharding",
        "sources",
        "transforms",
    ],
    "grain.experimental": [
        "BOSHandling",
        "DatasetOptions",
        "ElasticIterator",
        "ExecutionTrackingMode",
        "FlatMapTransform",
        "MapWithIndexTransform",
        "PackAndBatchOperation",
        "PerformanceConfig",
        # Ours: mp_prefetch's workers on a Ray cluster (MultiprocessingOptions.executor).
        "RayWorkers",
        "RngPool",
        "ShapeDtypeStruct",
        "ShapeDtypeStructProtocol",
        "UnverifiedStateWarning",
        "apply_transformations",
        "assert_equal_output_after_checkpoint",
        "batch_and_pad",
        "device_put",
        "force_restore",
        "get_element_spec",
        "get_next_index",
        "index_shuffle",
        "make_global_batch",
        "multithread_prefetch",
        "pick_performance_config",
        "set_next_index",
        "without_fingerprint",
    ],
    "grain.sources": [
        "ArrayDataSource",
        "ArrayRecordDataSource",
        "InMemoryDataSource",
        "RandomAccessDataSource",
        "RangeDataSource",
        "SharedMemoryDataSource",
    ],
    "grain.transforms": [
        "Batch",
        "DatasetSelectionMap",
        "Filter",
        "FlatMap",
        "Map",
        "MapWithIndex",
        "RandomMap",
        "TfRandomMap",
        "Transformation",
        "Transformations",
    ],
    "grain.samplers": ["IndexSampler", "Sampler", "SequentialSampler"],
    "grain.sharding": ["NoSharding", "ShardByJaxProcess", "ShardOptions"],
    "grain.python": [
        "ArrayRecordDataSource",
        "Batch",
        "BatchOperation",
        "DATASET_INDEX",
        "DataLoader",
        "DatasetIterator",
        "DatasetSelectionMap",
        "EPOCH",
        "FilterOperation",
        "FilterTransform",
        "FlatMapTransform",
        "GrainCheckpointHandler",
        "GrainCheckpointRestore",
        "GrainCheckpointSave",
        "INDEX",
        "InMemoryDataSource",
        "IndexSampler",
        "IterDataset",
        "META_FEATURES",
        "MapDataset",
        "MapOperation",
        "MapTransform",
        "MapWithIndexTransform",
        "MultiprocessingOptions",
        "NoSharding",
        "Operation",
        "PyGrainCheckpointHandler",
        "PyGrainCheckpointRestore",
        "PyGrainCheckpointSave",
        "PyGrainDatasetIterator",
        "RECORD",
        "RECORD_KEY",
        "RandomAccessDataSource",
        "RandomMapOperation",
        "RandomMapTransform",
        "RangeDataSource",
        "ReadOptions",
        "Record",
        "RecordMetadata",
        "SEED",
        "Sampler",
        "SequentialSampler",
        "ShardByJaxProcess",
        "ShardOptions",
        "SharedMemoryArray",
        "SharedMemoryDataSource",
        "Transformation",
        "Transformations",
        "config",
        "experimental",
        "load",
    ],
    "grain_index": [
        "DEFAULT_ROUNDS",
        "CostMixingSchedule",
        "IndexSampler",
        "MAX_PERIOD",
        "MAX_RECORDS",
        "MixingSchedule",
        "NoSharding",
        "Record",
        "RecordMetadata",
        "Sampler",
        "SequentialSampler",
        "ShardOptions",
        "decode_runs",
        "derive_seed",
        "derive_seeds",
        "encode_runs",
        "index_shuffle",
        "index_shuffle_array",
        "index_shuffle_function",
        "index_unshuffle",
        "index_unshuffle_array",
        "integer_weights",
        "shard_bounds",
        "window_shuffle",
        "window_shuffle_array",
    ],
    # The extension surfaces the packages above build on (test_layering.py: nothing
    # outside a package imports its private modules).
    "grain_index.checks": [
        "UINT64_LIMIT",
        "as_int",
        "finite_weights",
        "index_array",
        "int_in_range",
        "seed",
    ],
    "grain_dataset.extension": [
        # The memory the default batch_fn stacks into (workers: shared memory).
        "BatchAllocator",
        "batch_allocator",
        "set_batch_allocator",
        "Checkpointable",
        "Directory",
        "IterStageTraits",
        "IteratorTraits",
        "MapTraits",
        "PositionKind",
        "StageTraits",
        "Anchor",
        "CLOSE_TIMEOUT_S",
        "INFINITE",
        "IterStage",
        "MapStage",
        "OutOfRangeError",
        "POLL_S",
        "PositionalSplit",
        "StageIterator",
        "WeakRegistry",
        "WrongTypeError",
        "add_lock",
        "check_below",
        "check_parents_state",
        "check_state",
        "closed_error",
        "drops_positions",
        "interrupt",
        "iter_worker_slice",
        "iterator_of",
        "load_coroutine",
        "pipeline_fingerprint",
        "positional_split",
        "read_state_into",
        "reads_in_batches",
        "register",
        "remember_dataset",
        "restore_all",
        "save_coroutine",
        "serialized",
        "state_to_text",
        "write_state",
    ],
    "grain_mp.worker_env": [
        "HIDDEN",
        "SEE_ACCELERATORS_ENV",
        "enter_worker",
        "entry",
        "for_workers",
        "workers_see_accelerators",
    ],
    "grain_sources": [
        "ArrayDataSource",
        "ArrayRecordDataSource",
        "BlockShuffle",
        "CorruptRecordError",
        "InMemoryDataSource",
        "ObjectAccessDeniedError",
        "ObjectStore",
        "ObjectStoreError",
        "ParquetReader",
        "JsonLinesRecordFiles",
        "ParquetRecordFiles",
        "RecordFiles",
        "RecordFilesDataSource",
        "RecordReader",
        "TFRecordRecordFiles",
        "RandomAccessDataSource",
        "RangeDataSource",
        "RetryPolicy",
        "SharedMemoryDataSource",
        "TFRecordDataSource",
        "TFRecordReader",
        "TFRecordStreamReader",
        "TruncatedRecordError",
        "is_url",
        "reads_in_batches",
        "write_array_record",
        "write_tfrecord",
        "write_tfrecord_index",
    ],
    "grain_dataset": [
        "BOSHandling",
        "Batch",
        "Config",
        "DatasetIterator",
        "DatasetOptions",
        "DatasetSelectionMap",
        "ExecutionTrackingMode",
        "FilterTransform",
        "FlatMapTransform",
        "IterDataset",
        "MapDataset",
        "MapTransform",
        "MapWithIndex",
        "PipelineStats",
        "RandomMapTransform",
        "ReadOptions",
        "RngPool",
        "ShapeDtypeStruct",
        "ShapeDtypeStructProtocol",
        "StageStats",
        "TfRandomMap",
        "Transformation",
        "Transformations",
        "UnsupportedTransformationError",
        "UnverifiedStateWarning",
        "apply_transformations",
        "assert_equal_output_after_checkpoint",
        "batch_and_pad",
        "config",
        "force_restore",
        "get_element_spec",
        "get_next_index",
        "monitoring",
        "set_next_index",
        "stack",
        "track_stats",
        "unstamped",
        "without_fingerprint",
    ],
    # Layers not built yet export nothing rather than pretend.
    "grain_mp": [
        "BatchOperation",
        "DataLoader",
        "DataLoaderIterator",
        "ElasticIterator",
        "FilterOperation",
        "MapOperation",
        "MultiprocessPrefetchIterDataset",
        "MultiprocessingOptions",
        "Operation",
        "PackAndBatchOperation",
        "PerformanceConfig",
        "PyGrainDatasetIterator",
        "RandomMapOperation",
        "RayWorkers",
        "SharedMemoryArray",
        "SharedMemoryArrayMetadata",
        "load",
        "mp_prefetch",
        "multithread_prefetch",
        "pick_performance_config",
        "resolve_worker_count",
        "sweep_dead_segments",
    ],
    "grain.multiprocessing": [
        "MultiprocessingOptions",
        "SharedMemoryArray",
        "SharedMemoryArrayMetadata",
    ],
    "grain_jax": [
        "CheckpointHandler",
        "CheckpointRestore",
        "CheckpointSave",
        "ShardByJaxProcess",
        "device_put",
        "make_global_batch",
    ],
    "grain.checkpoint": ["CheckpointHandler", "CheckpointRestore", "CheckpointSave"],
    "grain.constants": [
        "DATASET_INDEX",
        "EPOCH",
        "INDEX",
        "META_FEATURES",
        "RECORD",
        "RECORD_KEY",
        "SEED",
    ],
    "grain.monitoring": [
        "Bucketer",
        "Counter",
        "Distribution",
        "EventMetric",
        "Metadata",
        "Metric",
        "Units",
        "get_monitoring_root",
        "pipeline_stats",
        "record_autotune_node_throughput",
        "record_autotune_optimization_latency",
        "record_autotune_parameter",
        "record_autotune_usl_coeff",
        "record_bytes_read_and_latency",
        "record_framework_type",
        "set_debug_server_ports",
        "setup_telemetry",
        "snapshot",
    ],
    # Ours: the conversion API, grain-convert's, named under the face.
    "grain.convert": ["EXECUTORS", "ConversionError", "ConversionResult", "InputError", "convert"],
    "grain_convert": [
        "EXECUTORS",
        "ConversionError",
        "ConversionResult",
        "InputError",
        "convert",
        "manifest",
    ],
    "grain_convert.extension": [
        "FORMAT_NAMES",
        "SMALL_RECORD",
        "TFRECORD_SIDECAR",
        "ProgressBar",
        "array_record_module",
        "check_writer_options",
        "format_rate",
        "overhead_note",
    ],
    "grain.python.experimental": [
        "BOSHandling",
        "DatasetOptions",
        "ElasticIterator",
        "ExecutionTrackingMode",
        "FlatMapTransform",
        "MapWithIndexTransform",
        "PackAndBatchOperation",
        "PerformanceConfig",
        "RayWorkers",
        "RngPool",
        "ShapeDtypeStruct",
        "ShapeDtypeStructProtocol",
        "UnverifiedStateWarning",
        "apply_transformations",
        "assert_equal_output_after_checkpoint",
        "batch_and_pad",
        "device_put",
        "force_restore",
        "get_element_spec",
        "get_next_index",
        "index_shuffle",
        "make_global_batch",
        "multithread_prefetch",
        "pick_performance_config",
        "set_next_index",
        "without_fingerprint",
    ],
}


# The public stage classes: registered once, in grain_dataset.stages (whose names
# grain-dataset tests/test_stage_contract.py checks), and exported by these three namespaces.
for _namespace in ("grain_dataset", "grain.experimental", "grain.python.experimental"):
    EXPORTS[_namespace] = EXPORTS[_namespace] + list(grain_dataset.stages.__all__)


@pytest.mark.parametrize("module_name", sorted(EXPORTS))
def test_namespace_exports_exactly_the_pinned_names(module_name):
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(EXPORTS[module_name])
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_namespaces_share_one_object_per_name():
    import grain
    import grain.python as pg

    assert grain.experimental.index_shuffle is grain_index.index_shuffle
    assert pg.IndexSampler is grain.samplers.IndexSampler is grain_index.IndexSampler
    assert pg.ShardOptions is grain.sharding.ShardOptions
    assert grain.Record is pg.Record
    assert grain.RecordMetadata is pg.RecordMetadata
    assert grain.MapDataset is pg.MapDataset
    assert grain.transforms.Map is pg.MapTransform
    assert grain.sources.RandomAccessDataSource is pg.RandomAccessDataSource


def test_grain_convert_is_the_engine_layer_reexported():
    import grain.convert
    import grain_convert

    for name in grain.convert.__all__:
        assert getattr(grain.convert, name) is getattr(grain_convert, name), name
    # The face defines none of it: each name comes from the grain_convert package.
    assert grain.convert.convert.__module__.startswith("grain_convert.")
    assert issubclass(grain.convert.InputError, ValueError)


def test_data_loader_guide_sampler_calls():
    import grain.python as grain

    index_sampler_example = grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )
    printed = [str(record_metadata) for record_metadata in index_sampler_example]
    assert len(printed) == 10
    assert printed[0].startswith("RecordMetadata(index=0, record_key=")
    sampler = grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.NoSharding(),
        shuffle=True,
        seed=0,
    )
    assert len(sampler) == 10


def test_experimental_index_shuffle_signature():
    import grain

    n = 50
    order = [
        grain.experimental.index_shuffle(index=i, max_index=n - 1, seed=3, rounds=4)
        for i in range(n)
    ]
    assert sorted(order) == list(range(n))
