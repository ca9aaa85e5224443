"""`grain inspect PATH...`: what ArrayRecord files hold, without writing any code.

Counts and sizes come from the files' own index and the file system; the
writer options (compression, group size) from ``writer_options_string()``,
which ArrayRecord keeps in every file. The first records are decoded by
sniffing their bytes: the .npy magic, a pickle protocol header, UTF-8 JSON,
UTF-8 text, and otherwise a hex preview.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import re
from typing import Any

import numpy as np

import grain
import grain_sources
from grain._cli_common import EXIT_OK, CommandError, UsageError, format_bytes
from grain_convert import manifest as _convert_manifest
from grain_convert.extension import array_record_module

SUMMARY = "show the record counts, size, writer options and first records of ArrayRecord files"
DESCRIPTION = """\
Prints, for each ArrayRecord file, its record count, size on disk and writer
options; then the totals, the compression and group size, and the first
records decoded where their format is recognized:
  npy      np.save bytes (grain convert's .npy input)
  pickle   pickled values (write_array_record(serializer="pickle"), grain
           convert's Parquet and HuggingFace rows); unpickling can run code:
           inspect only files you trust
  json     UTF-8 JSON (grain convert's JSON lines, --row-format json)
  text     other UTF-8 text
  bytes    anything else, as a hex preview

PATH is a file, a glob ('data/train-*', quoted), a sharded name (data/train@4
for train-00000-of-00004 ...) or a directory (its files named *array_record*
or *-NNNNN-of-NNNNN). Records are numbered across all files, in order.

Where grain convert left a manifest beside the files (DEST.manifest.json, or
PATH itself), every shard is read back and its record count and checksum
compared with it (exit status 1 if they differ)."""

# Every ArrayRecord file opens with Riegeli's file signature; its first 8 bytes
# tell "another format" (a usage error) from "a damaged ArrayRecord file".
_SIGNATURE = bytes.fromhex("83af70d10d884a3f")
_SHARD_NAME = re.compile(r"-\d{5}-of-\d{5}$")
_PREVIEW_CHARS = 160
_COMPRESSIONS = ("zstd", "brotli", "snappy", "uncompressed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="ArrayRecord files (see above)")
    parser.add_argument(
        "--num-records",
        type=int,
        default=3,
        metavar="K",
        help="how many of the first records to decode and show (default: 3)",
    )


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.num_records < 0:
        parser.error("--num-records must be >= 0")


def _files(path: str) -> list[str]:
    """The ArrayRecord files `path` names (file, glob, name@N, directory, URL or manifest)."""
    if grain_sources.is_url(path):
        return [path]  # listed and checked by the source, through the object store
    if path.endswith(_convert_manifest.MANIFEST_SUFFIX):
        try:
            return _convert_manifest.shard_paths(path, _convert_manifest.load(path))
        except ValueError as error:
            raise UsageError(str(error)) from None
    if os.path.isdir(path):
        files = [
            os.path.join(path, name)
            for name in sorted(os.listdir(path))
            if not name.startswith(".")
            and os.path.isfile(os.path.join(path, name))
            and ("array_record" in name or _SHARD_NAME.search(name))
        ]
        if not files:
            raise UsageError(
                f"{path} is a directory without ArrayRecord files (names containing "
                "'array_record' or ending in -NNNNN-of-NNNNN): pass the files themselves"
            )
        return files
    if not os.path.exists(path) and not set("*?[@") & set(path):
        raise UsageError(f"no such file or directory: {path}")
    return [path]


def _open(path: str) -> grain.sources.ArrayRecordDataSource:
    try:
        return grain.sources.ArrayRecordDataSource(_files(path))
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    except (ValueError, OSError) as error:
        for file in _files(path):
            _check_signature(file)
        raise CommandError(str(error)) from None


def _check_signature(path: str) -> None:
    """A usage error when `path` is a file of another format (not a damaged ArrayRecord)."""
    if not os.path.isfile(path):
        return
    with open(path, "rb") as file:
        head = file.read(len(_SIGNATURE))
    if head == _SIGNATURE:
        return
    hint = ""
    if path.endswith((".jsonl", ".json", ".parquet", ".npy")):
        hint = f": write ArrayRecord files from it with `grain convert {path} DEST`"
    raise UsageError(f"{path} is not an ArrayRecord file{hint}")


def _writer_options(path: str) -> str:
    reader = array_record_module("`grain inspect` of an ArrayRecord file").ArrayRecordReader(
        path, "readahead_buffer_size:0,max_parallelism:0"
    )
    try:
        return reader.writer_options_string()
    finally:
        reader.close()


def _describe_options(options: str) -> str:
    """``zstd level 3, group_size 1 (...)`` from a writer options string."""
    values = dict(item.partition(":")[::2] for item in options.split(",") if item)
    compression = next((name for name in _COMPRESSIONS if name in values), "unknown")
    if values.get(compression):
        compression += f" level {values[compression]}"
    group = values.get("group_size", "?")
    if group == "1":
        group_note = "group_size 1: each record is read on its own"
    else:
        group_note = (
            f"group_size {group}: a random read decompresses a group of {group} records; "
            "write with group_size:1 for random access"
        )
    return f"{compression}; {group_note}"


# ---------------------------------------------------------------- decoding records


def _clip(text: str, limit: int = _PREVIEW_CHARS) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _preview(value: Any, depth: int = 0) -> str:
    """A one-line look at a decoded value: arrays by dtype, shape and first items."""
    if isinstance(value, np.ndarray):
        shape = ",".join(str(size) for size in value.shape)
        if not value.size:
            return f"{value.dtype}[{shape}]"
        items = np.array2string(value.ravel()[:6], separator=", ", max_line_width=10**6)
        if value.size > 6:
            items = items[:-1] + ", ...]"
        return f"{value.dtype}[{shape}] {items}"
    if depth > 2:
        return _clip(repr(value), 40)
    if isinstance(value, dict):
        inner = ", ".join(f"{key!r}: {_preview(item, depth + 1)}" for key, item in value.items())
        return "{" + inner + "}"
    if isinstance(value, list | tuple) and value:
        inner = ", ".join(_preview(item, depth + 1) for item in value[:8])
        more = ", ..." if len(value) > 8 else ""
        return (
            ("[" if isinstance(value, list) else "(")
            + inner
            + more
            + ("]" if isinstance(value, list) else ")")
        )
    if isinstance(value, bytes | bytearray):
        return f"bytes[{len(value)}] {bytes(value[:16])!r}" + ("..." if len(value) > 16 else "")
    return _clip(repr(value), 60)


def decode(record: bytes) -> tuple[str, str]:
    """The format a record seems to be in, and a one-line preview of it."""
    if record.startswith(b"\x93NUMPY"):
        try:
            return "npy", _clip(_preview(np.load(io.BytesIO(record), allow_pickle=False)))
        except (ValueError, OSError):
            pass
    if len(record) > 2 and record[0] == 0x80 and 2 <= record[1] <= 5:
        try:
            return "pickle", _clip(_preview(pickle.loads(record)))
        except Exception as error:
            return "pickle", f"(cannot unpickle here: {type(error).__name__}: {error})"
    try:
        text = record.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.strip():
        try:
            value = json.loads(text)
        except ValueError:
            pass
        else:
            return "json", _clip(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        if all(char.isprintable() or char in "\t\n\r" for char in text):
            return "text", _clip(repr(text))
    hex_part = record[:24].hex(" ")
    return "bytes", f"{len(record)} bytes: {hex_part}" + (" ..." if len(record) > 24 else "")


_DECODERS = {
    "npy": ".map(lambda b: np.load(io.BytesIO(b)))",
    "pickle": ".map(pickle.loads)",
    "json": ".map(json.loads)",
    "text": ".map(bytes.decode)",
}


# ---------------------------------------------------------------- the command


def run(args: argparse.Namespace) -> int:
    sources: list[grain.sources.ArrayRecordDataSource] = []
    try:
        for path in args.paths:
            sources.append(_open(path))
        rows = []
        for source in sources:
            for number, path in enumerate(source.paths):
                if grain_sources.is_url(path):
                    # Read through range reads: counts from the footer, no C++ reader.
                    size = source.store.size(path)  # type: ignore[attr-defined]
                    rows.append((path, source.num_records(number), size, "(object store)"))
                    continue
                reader_count = _count(path)
                rows.append((path, reader_count, os.path.getsize(path), _writer_options(path)))
        _print_files(rows)
        _print_records(sources, args.num_records)
        for path in args.paths:
            _check_manifest(path)
    finally:
        for source in sources:
            source.close()
    return EXIT_OK


def _check_manifest(path: str) -> None:
    """Checks the files against the manifest `grain convert` wrote beside them, if any."""
    manifest_path = None if grain_sources.is_url(path) else _convert_manifest.find(path)
    if manifest_path is None:
        return
    try:
        problems = _convert_manifest.check(manifest_path)
        manifest = _convert_manifest.load(manifest_path)
    except ValueError as error:
        raise CommandError(str(error)) from None
    if problems:
        raise CommandError(
            f"the files do not match {manifest_path}: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    print(
        f"manifest {manifest_path}: {len(manifest['shards'])} shards, "
        f"{manifest['num_records']:,} records, counts and checksums match"
    )
    if manifest.get("lengths"):
        lengths = manifest["lengths"]
        print(
            f"lengths ({lengths['of']}): total {lengths['total']:,}, mean {lengths['mean']:.1f}, "
            f"min {lengths['min']:,}, max {lengths['max']:,}"
        )


def _count(path: str) -> int:
    reader = array_record_module("`grain inspect` of an ArrayRecord file").ArrayRecordReader(
        path, "readahead_buffer_size:0,max_parallelism:0"
    )
    try:
        return reader.num_records()
    finally:
        reader.close()


def _print_files(rows: list[tuple[str, int, int, str]]) -> None:
    header = ("file", "records", "size", "writer options")
    cells = [(path, f"{n:,}", format_bytes(size), options) for path, n, size, options in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(3)]
    for row in [header, *cells]:
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    records = sum(row[1] for row in rows)
    size = sum(row[2] for row in rows)
    per_record = f" ({size / records:,.0f} B per record on disk)" if records else ""
    files = f"{len(rows)} file" + ("s" if len(rows) != 1 else "")
    print(f"total: {files}, {records:,} records, {format_bytes(size)}{per_record}")
    distinct = sorted({row[3] for row in rows})
    for options in distinct:
        which = "" if len(distinct) == 1 else f" ({sum(row[3] == options for row in rows)} files)"
        print(f"compression: {_describe_options(options)}{which}")


def _print_records(sources: list[grain.sources.ArrayRecordDataSource], wanted: int) -> None:
    total = sum(len(source) for source in sources)
    shown = min(wanted, total)
    if not shown:
        return
    print(f"first {shown} record{'s' if shown != 1 else ''}:")
    formats = set()
    index = 0
    for source in sources:
        for local in range(min(len(source), shown - index)):
            record = source[local]
            kind, preview = decode(record)
            formats.add(kind)
            print(f"  [{index}] {kind:<6} {preview}")
            index += 1
        if index >= shown:
            break
    if len(formats) == 1 and (kind := formats.pop()) in _DECODERS:
        print(f"decode them with {_DECODERS[kind]}")
