"""grain_convert.extension: what the `grain` command-line tool uses from this layer.

Users call `grain_convert.convert` (or `grain.convert.convert`). The `grain`
command (``grain convert``, ``grain inspect``, and the progress of ``grain
demo`` and ``grain bench``) needs a few more pieces, named here so that it
never reaches into this package's private modules:

  inputs          FORMAT_NAMES (input format -> its name in messages) and
                  TFRECORD_SIDECAR, the suffix of a TFRecord file's offset index
  writer options  check_writer_options (ArrayRecord's own error, before any
                  work), SMALL_RECORD (the mean record size below which "auto"
                  stores records uncompressed), overhead_note (why files are
                  much larger than their records)
  ArrayRecord     array_record_module(what): array_record's C++ module, or an
                  ImportError that says what to install
  progress        ProgressBar (the bar `convert` draws) and format_rate

Stability: these follow the `grain` tool's needs and may change with it
between minor versions; `convert`, its result and its errors are the stable API.
"""

from grain_convert._array_record import array_record_module as array_record_module
from grain_convert._inputs import FORMAT_NAMES as FORMAT_NAMES
from grain_convert._inputs import TFRECORD_SIDECAR as TFRECORD_SIDECAR
from grain_convert._options import SMALL_RECORD as SMALL_RECORD
from grain_convert._options import check_writer_options as check_writer_options
from grain_convert._options import overhead_note as overhead_note
from grain_convert._progress import ProgressBar as ProgressBar
from grain_convert._progress import format_rate as format_rate

__all__ = [
    "FORMAT_NAMES",
    "SMALL_RECORD",
    "TFRECORD_SIDECAR",
    "ProgressBar",
    "array_record_module",
    "check_writer_options",
    "format_rate",
    "overhead_note",
]
