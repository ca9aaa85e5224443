"""grain.samplers: which record the DataLoader reads at each step."""

from grain_index import IndexSampler as IndexSampler
from grain_index import Sampler as Sampler
from grain_index import SequentialSampler as SequentialSampler

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]
