"""The public names of Grain 0.2.18, per namespace.

Obtained by probing an installed grain==0.2.18 with dir() (public names only),
leaving out three module-level artefacts of `grain.monitoring` that are not API
(`annotations` from a __future__ import, `fast_monitoring` = None, and the
`monitoring_base` module it imports). Upstream's `grain.config` is an object
with `update` and `get_or_default`, not a module.
"""

NAMESPACES = {
    'grain': [
        'DataLoader', 'DataLoaderIterator', 'DatasetIterator', 'IterDataset', 'MapDataset',
        'MultiprocessingOptions', 'ReadOptions', 'Record', 'RecordMetadata', 'checkpoint',
        'config', 'constants', 'experimental', 'load', 'monitoring', 'multiprocessing', 'proto',
        'python', 'samplers', 'sharding', 'sources', 'transforms',
    ],
    'grain.python': [
        'ArrayRecordDataSource', 'Batch', 'BatchOperation', 'DATASET_INDEX', 'DataLoader',
        'DatasetIterator', 'DatasetSelectionMap', 'EPOCH', 'FilterOperation', 'FilterTransform',
        'INDEX', 'InMemoryDataSource', 'IndexSampler', 'IterDataset', 'META_FEATURES',
        'MapDataset', 'MapOperation', 'MapTransform', 'MapWithIndexTransform',
        'MultiprocessingOptions', 'NoSharding', 'Operation', 'PyGrainCheckpointHandler',
        'PyGrainDatasetIterator', 'RECORD', 'RECORD_KEY', 'RandomAccessDataSource',
        'RandomMapOperation', 'RandomMapTransform', 'RangeDataSource', 'ReadOptions', 'Record',
        'RecordMetadata', 'SEED', 'Sampler', 'SequentialSampler', 'ShardByJaxProcess',
        'ShardOptions', 'SharedMemoryArray', 'Transformation', 'Transformations', 'config',
        'experimental', 'load',
    ],
    'grain.experimental': [
        'BOSHandling', 'BestFitPackIterDataset', 'CacheIterDataset', 'ConcatThenSplitIterDataset',
        'DatasetOptions', 'ElasticIterator', 'ExecutionTrackingMode', 'FirstFitPackIterDataset',
        'FlatMapIterDataset', 'FlatMapMapDataset', 'FlatMapTransform', 'InterleaveIterDataset',
        'LimitIterDataset', 'MapWithIndexTransform', 'PackAndBatchOperation',
        'ParquetIterDataset', 'PerformanceConfig', 'RebatchIterDataset', 'RepeatIterDataset',
        'RngPool', 'ShapeDtypeStruct', 'ShapeDtypeStructProtocol', 'TFRecordIterDataset',
        'ThreadPrefetchDatasetIterator', 'ThreadPrefetchIterDataset', 'WindowShuffleIterDataset',
        'WindowShuffleMapDataset', 'WithOptionsIterDataset', 'ZipIterDataset', 'ZipMapDataset',
        'apply_transformations', 'assert_equal_output_after_checkpoint', 'batch_and_pad',
        'device_put', 'get_element_spec', 'get_next_index', 'index_shuffle',
        'multithread_prefetch', 'pick_performance_config', 'set_next_index',
    ],
    'grain.transforms': [
        'Batch', 'DatasetSelectionMap', 'Filter', 'Map', 'MapWithIndex', 'RandomMap',
        'TfRandomMap', 'Transformation', 'Transformations',
    ],
    'grain.sources': [
        'ArrayRecordDataSource', 'RandomAccessDataSource', 'RangeDataSource',
        'SharedMemoryDataSource',
    ],
    'grain.samplers': [
        'IndexSampler', 'Sampler', 'SequentialSampler',
    ],
    'grain.sharding': [
        'NoSharding', 'ShardByJaxProcess', 'ShardOptions',
    ],
    'grain.checkpoint': [
        'CheckpointHandler',
    ],
    'grain.multiprocessing': [
        'MultiprocessingOptions', 'SharedMemoryArray', 'SharedMemoryArrayMetadata',
    ],
    'grain.constants': [
        'DATASET_INDEX', 'EPOCH', 'INDEX', 'META_FEATURES', 'RECORD', 'RECORD_KEY', 'SEED',
    ],
    'grain.config': [
        'get_or_default', 'update',
    ],
    'grain.monitoring': [
        'Bucketer', 'Counter', 'EventMetric', 'Metadata', 'Metric', 'Units',
        'get_monitoring_root', 'record_autotune_node_throughput',
        'record_autotune_optimization_latency', 'record_autotune_parameter',
        'record_autotune_usl_coeff', 'record_bytes_read_and_latency', 'record_framework_type',
        'set_debug_server_ports', 'setup_telemetry',
    ],
}

# Members whose signatures we compare, per class (reached as grain.<path>.<member>).
MEMBERS = {
    "MapDataset": [
        "source", "range", "mix", "concatenate", "select_from_datasets", "__getitem__",
        "__len__", "__iter__", "apply", "batch", "filter", "map", "map_with_index", "pipe",
        "random_map", "repeat", "seed", "shuffle", "slice", "to_iter_dataset", "parents",
    ],
    "IterDataset": [
        "mix", "__iter__", "apply", "batch", "filter", "map", "map_with_index", "mp_prefetch",
        "pipe", "prefetch", "random_map", "seed", "parents",
    ],
    "DatasetIterator": [
        "__next__", "__iter__", "close", "get_state", "set_state", "load", "save",
        "start_prefetch",
    ],
    "DataLoader": ["__iter__", "multiprocessing_options"],
    "DataLoaderIterator": [
        "__next__", "__iter__", "get_state", "set_state", "load", "save", "start_prefetch",
    ],
    "experimental.DatasetOptions": ["merge"],
    "experimental.RngPool": ["acquire_rng", "release_rng"],
    "experimental.ElasticIterator": ["__next__", "get_state", "set_state", "close"],
    "samplers.IndexSampler": ["__getitem__", "__len__"],
    "samplers.SequentialSampler": ["__getitem__", "__len__"],
    "multiprocessing.SharedMemoryArray": [
        "from_metadata", "from_shared_memory", "metadata", "unlink_on_del", "close_shm_async",
        "enable_async_del",
    ],
    "sources.SharedMemoryDataSource": ["__getitem__", "__len__", "close", "unlink"],
    "sources.RangeDataSource": ["__getitem__", "__len__"],
    "sources.ArrayRecordDataSource": [
        "__enter__", "__exit__", "__getitem__", "__len__", "__iter__", "paths",
    ],
    "checkpoint.CheckpointHandler": [
        "save", "restore", "metadata", "finalize", "close", "structure", "typestr",
    ],
    "transforms.Map": ["map"],
    "transforms.RandomMap": ["random_map"],
    "transforms.Filter": ["filter"],
    "transforms.MapWithIndex": ["map_with_index"],
    "experimental.FlatMapTransform": ["flat_map"],
    "transforms.DatasetSelectionMap": ["__len__", "__getitem__"],
}
