"""The names of the metadata features Grain attaches to records (`grain.constants`).

Grain's TensorFlow data loaders add these keys to each element; pipelines here
never do, but code that names them (to drop them, or to pass them to packing as
`meta_features`) finds them with Grain's values.
"""

INDEX = "_index"
"""The record's global position in the sampler's order."""
RECORD_KEY = "_record_key"
"""The record's key in its data source."""
DATASET_INDEX = "_dataset_index"
"""Which dataset of a mixture the record came from."""
EPOCH = "_epoch"
"""The epoch the record belongs to (from 1)."""
SEED = "_seed"
"""The record's random seed."""
RECORD = "_record"
"""The record's data."""

META_FEATURES = frozenset((INDEX, RECORD_KEY, DATASET_INDEX, EPOCH, SEED, RECORD))
"""All of the above."""

__all__ = ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"]
