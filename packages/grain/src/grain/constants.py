"""grain.constants: the metadata feature names of Grain (`META_FEATURES` and its members)."""

from grain_index.constants import DATASET_INDEX as DATASET_INDEX
from grain_index.constants import EPOCH as EPOCH
from grain_index.constants import INDEX as INDEX
from grain_index.constants import META_FEATURES as META_FEATURES
from grain_index.constants import RECORD as RECORD
from grain_index.constants import RECORD_KEY as RECORD_KEY
from grain_index.constants import SEED as SEED

__all__ = ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"]
