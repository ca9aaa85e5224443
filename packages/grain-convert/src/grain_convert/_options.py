"""ArrayRecord writer options for a conversion: "auto" resolved from the input, checked early."""

from __future__ import annotations

import os
import tempfile

from grain_sources import write_array_record

AUTO = "auto"
# Below this mean size (bytes) a record compressed on its own grows: zstd's frame
# costs more than it saves (measured on JSON lines of 25, 260 and 2 800 bytes).
SMALL_RECORD = 128
# How much larger than its records a file may be before the summary explains why.
OVERHEAD_NOTE = 1.5


def check_writer_options(options: str) -> None:
    """Raises ValueError (ArrayRecord's message) for options its writer refuses."""
    if options == AUTO:
        return
    with tempfile.TemporaryDirectory() as scratch:
        write_array_record([], os.path.join(scratch, "probe"), options=options)


def resolve_writer_options(options: str, mean_record: float) -> str:
    """`options`, or for "auto": group_size:1 (random access), uncompressed for small records."""
    if options != AUTO:
        return options
    return "group_size:1" + (",uncompressed" if mean_record < SMALL_RECORD else "")


def overhead_note(on_disk: int, nbytes: int, files: int, options: str) -> str | None:
    """Why the files are much larger than their records, when they are."""
    if nbytes == 0 or on_disk <= OVERHEAD_NOTE * nbytes:
        return None
    per_record = "every record is its own chunk (about 70 bytes of headers and index)"
    if "group_size:1," not in f"{options},":
        per_record = "every group of records has its headers and index"
    return (
        f"note: the files are {on_disk / nbytes:.1f}x the size of the records: {per_record}, "
        f"and each of the {files} file(s) grows in 64 KiB blocks. Fewer shards, or a larger "
        "group_size in --writer-options (random reads then decompress a whole group), "
        "make them smaller."
    )
