"""grain.convert: ArrayRecord shards from big corpora, on this machine or on a Ray cluster.

The engine is the grain-convert layer (``grain_convert``); this module names
its public API under `grain`, and ``grain convert`` runs it. `convert` makes a
plan from the input's metadata alone (record i of the input, in file order, is
index i of ``ArrayRecordDataSource("DEST@N")``), runs one idempotent task per
shard on worker processes here (``executor="local"``) or on Ray
(``executor="ray"``, the ``grainline[ray]`` extra), and writes
``DEST.manifest.json`` once every shard is done and checked. See
docs/convert_at_scale.md.

Example::

    from grain.convert import convert

    result = convert("corpus/", "out/train", num_shards=16, executor="ray",
                     transform=tokenize, lengths="tokens")
    ds = grain.MapDataset.source(
        grain.sources.ArrayRecordDataSource("out/train@16")).map(pickle.loads)
"""

from grain_convert import EXECUTORS as EXECUTORS
from grain_convert import ConversionError as ConversionError
from grain_convert import ConversionResult as ConversionResult
from grain_convert import InputError as InputError
from grain_convert import convert as convert

__all__ = ["EXECUTORS", "ConversionError", "ConversionResult", "InputError", "convert"]
