"""grain_convert: ArrayRecord shards from big corpora, on this machine or on a Ray cluster.

Layout: the conversion layer. It sits above grain-sources (the readers of its
inputs and the ArrayRecord writer) and grain-mp (`worker_env`, so its worker
processes hide accelerators as mp_prefetch's do), and below the `grain` face,
which re-exports it as `grain.convert` and runs it as ``grain convert``. It
imports Ray only inside the `ray` executor (the `ray` extra). One module per
step of a run:

  _convert   the driver: `convert`, its checks, resume, the progress events
  _inputs    what SRC is (format, files) and a metadata-only scan of its records
  _plan      which input records each shard holds, and the plan's hash
  _task      one shard: read its records, write the file, the marker and lengths
  _read      the readers of each input format and the encoders of a row
  _local     the executor of worker processes here; _ray, of Ray tasks
  _options   ArrayRecord writer options ("auto" resolved, checked early)
  manifest   DEST.manifest.json: what a run wrote, and the check of the files
  extension  what the `grain` command-line tool uses besides `convert`

Example::

    from grain_convert import convert

    result = convert("corpus/", "out/train", num_shards=16, transform=tokenize)
    # ArrayRecordDataSource(result.pattern) reads record i of the input as index i.
"""

from grain_convert import manifest as manifest
from grain_convert._convert import EXECUTORS as EXECUTORS
from grain_convert._convert import ConversionResult as ConversionResult
from grain_convert._convert import convert as convert
from grain_convert._errors import ConversionError as ConversionError
from grain_convert._errors import InputError as InputError

__all__ = [
    "EXECUTORS",
    "ConversionError",
    "ConversionResult",
    "InputError",
    "convert",
    "manifest",
]
