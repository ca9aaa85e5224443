"""`grain convert SRC DEST`: ArrayRecord shards from JSON lines, Parquet, .npy or HuggingFace.

Every input is streamed: it is counted first (lines, Parquet metadata, files,
the dataset's length), then its records flow one at a time into
`grain_sources.write_array_record`, which cuts them into contiguous shards
(record i of the input is index i of ``ArrayRecordDataSource("DEST@N")``) and
leaves no file behind if anything fails. Afterwards the shards are opened with
`grain.sources.ArrayRecordDataSource` and their count (and first and last
records) compared with the input's.

Rows of tables (Parquet, HuggingFace) are pickled dicts by default: pickle
keeps every column type as the table reader gives it, binary columns (encoded
images, audio) included, which JSON cannot hold; ``--row-format json`` writes
portable JSON instead and names the column when a value does not fit.
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import grain
import grain_sources
from grain._cli_common import (
    EXIT_OK,
    CommandError,
    ProgressBar,
    UsageError,
    format_bytes,
    format_rate,
)
from grain_sources import write_array_record

SUMMARY = "write ArrayRecord shards from JSON lines, Parquet, .npy files or a HuggingFace dataset"
DESCRIPTION = """\
Writes the records of SRC into ArrayRecord shards named after DEST, then reads
the shards back with grain.sources.ArrayRecordDataSource and checks that they
hold as many records as SRC (exit status 1 if not).

SRC, and what each record becomes (decode it with the .map shown):
  FILE.jsonl, FILE.json
      each non-blank line (one JSON value), as its UTF-8 bytes: .map(json.loads)
  FILE.parquet
      each row as a dict {column: value}, pickled (the default:
      .map(pickle.loads)) or as JSON bytes (--row-format json: .map(json.loads))
  DIR of *.npy files
      each file (one array; files in name order), as its np.save bytes:
      .map(lambda b: np.load(io.BytesIO(b)))
  DIR written by HuggingFace datasets' save_to_disk (holding dataset_info.json
  or state.json)
      each row, like Parquet's, with its values as Arrow stores them (an Image
      column gives {"bytes": ..., "path": ...})
  DIR of *.jsonl/*.json files, or of *.parquet files
      all of them, in name order

Rows are pickled by default because pickle keeps every value type, binary
columns such as encoded images included, which JSON cannot hold; unpickle only
data you trust. DEST is the output's base name: with --num-shards 1 the file
DEST, else DEST-00000-of-0000N ..., read by ArrayRecordDataSource("DEST@N").
Record i of SRC is index i there. A progress bar shows on stderr when it is a
terminal, a progress line every 5 s when it is not; the summary goes to stdout.

Size: with group_size:1 every record is its own ArrayRecord chunk, with about
70 bytes of headers and index, and a file grows in 64 KiB blocks. Small records
therefore take several times their size on disk (25-byte JSON lines: about 3x);
the summary says so when it happens. A larger group_size shrinks that, at the
cost of decompressing the whole group for each random read."""

# Below this mean size (bytes) a record compressed on its own grows: zstd's frame
# costs more than it saves (measured on JSON lines of 25, 260 and 2 800 bytes).
_SMALL_RECORD = 128
# How much larger than its records a file may be before the summary explains why.
_OVERHEAD_NOTE = 1.5

_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".npy": "npy"}
_FORMAT_NAMES = {
    "jsonl": "JSON lines",
    "parquet": "Parquet",
    "npy": ".npy files",
    "hf": "HuggingFace dataset",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="the input file or directory (see above)")
    parser.add_argument(
        "dest", metavar="DEST", help="base name of the output shards (parent directories are made)"
    )
    parser.add_argument(
        "--num-shards",
        type=int,
        default=1,
        metavar="N",
        help="how many ArrayRecord files to write (default: 1)",
    )
    parser.add_argument(
        "--format",
        choices=("auto", *_FORMAT_NAMES),
        default="auto",
        help="the input's format (default: auto, from the name and the directory's files)",
    )
    parser.add_argument(
        "--row-format",
        choices=("pickle", "json"),
        default="pickle",
        help="how a Parquet or HuggingFace row is stored (default: pickle)",
    )
    parser.add_argument(
        "--writer-options",
        default="auto",
        metavar="OPTIONS",
        help='ArrayRecordWriter options, e.g. "group_size:1,zstd:9". The default, auto, '
        "keeps group_size:1 (every record read on its own, which random access needs) and "
        f"picks the compression from the input: uncompressed for records under "
        f"{_SMALL_RECORD} bytes on average, where compressing one record at a time only adds "
        "bytes, else ArrayRecord's zstd:3",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace output files that already exist"
    )


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.num_shards < 1:
        parser.error("--num-shards must be >= 1")


# ---------------------------------------------------------------- finding the input


def _detect(src: str, fmt: str) -> tuple[str, list[str]]:
    """The input's format and its files (the directory itself for a HuggingFace dataset)."""
    if not os.path.exists(src):
        raise UsageError(f"no such file or directory: {src}")
    if not os.path.isdir(src):
        kind = _SUFFIXES.get(os.path.splitext(src)[1].lower()) if fmt == "auto" else fmt
        if kind is None:
            raise UsageError(
                f"cannot tell the format of {src} from its name: use .jsonl, .json or .parquet, "
                "a directory of .npy files or of a HuggingFace dataset, or pass --format"
            )
        if kind in ("npy", "hf"):
            raise UsageError(f"--format {kind} reads a directory, and {src} is a file")
        return kind, [src]
    if os.path.exists(os.path.join(src, "dataset_dict.json")):
        splits = sorted(name for name in os.listdir(src) if os.path.isdir(os.path.join(src, name)))
        example = os.path.join(src, splits[0]) if splits else src
        raise UsageError(
            f"{src} holds a HuggingFace DatasetDict (splits: {', '.join(splits)}): "
            f"convert one split at a time, e.g. {example}"
        )
    markers = ("state.json", "dataset_info.json")
    is_hf = any(os.path.exists(os.path.join(src, name)) for name in markers)
    if fmt in ("auto", "hf") and is_hf:
        return "hf", [src]
    if fmt == "hf":
        raise UsageError(
            f"{src} is not a dataset saved by HuggingFace save_to_disk "
            "(it holds neither state.json nor dataset_info.json)"
        )
    by_kind: dict[str, list[str]] = {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        kind = _SUFFIXES.get(os.path.splitext(name)[1].lower())
        if kind and not name.startswith(".") and os.path.isfile(path):
            by_kind.setdefault(kind, []).append(path)
    if fmt != "auto":
        if fmt not in by_kind:
            raise UsageError(f"{src} holds no {_FORMAT_NAMES[fmt]} input files")
        return fmt, by_kind[fmt]
    if not by_kind:
        raise UsageError(
            f"{src} holds no .jsonl, .json, .parquet or .npy files and is not a HuggingFace "
            "dataset (no dataset_info.json or state.json)"
        )
    if len(by_kind) > 1:
        found = ", ".join(f"{len(files)} {_FORMAT_NAMES[kind]}" for kind, files in by_kind.items())
        raise UsageError(f"{src} holds inputs of several formats ({found}): pass --format")
    ((kind, files),) = by_kind.items()
    return kind, files


# ---------------------------------------------------------------- reading records


@dataclass
class _Input:
    """The records of SRC: how many there are, and a generator of their bytes."""

    count: int
    records: Callable[[], Iterator[bytes]]
    read_back: str  # the .map that decodes a record


def _json_lines(files: list[str]) -> _Input:
    count = 0
    for path in files:
        with open(path, "rb") as file:
            count += sum(1 for line in file if line.strip())

    def records() -> Iterator[bytes]:
        for path in files:
            with open(path, "rb") as file:
                for number, line in enumerate(file, 1):
                    record = line.strip()
                    if number == 1 and record.startswith(codecs.BOM_UTF8):
                        record = record[len(codecs.BOM_UTF8) :].strip()
                    if not record:
                        continue
                    try:
                        json.loads(record)
                    except ValueError as error:
                        raise CommandError(
                            f"line {number} of {path} is not JSON ({error}): each line must "
                            "hold one JSON value"
                        ) from None
                    yield record

    return _Input(count, records, ".map(json.loads)")


def _row_encoder(row_format: str) -> Callable[[dict[str, Any], str], bytes]:
    if row_format == "pickle":
        return lambda row, where: pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)

    def encode(row: dict[str, Any], where: str) -> bytes:
        try:
            return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            for column, value in row.items():
                try:
                    json.dumps(value)
                except (TypeError, ValueError):
                    raise CommandError(
                        f"{where}: column {column!r} holds {type(value).__name__}, which JSON "
                        "cannot store: use --row-format pickle"
                    ) from None
            raise

    return encode


def _import_pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CommandError("reading Parquet needs pyarrow: pip install pyarrow") from None
    return pq


def _parquet(files: list[str], row_format: str) -> _Input:
    pq = _import_pyarrow_parquet()
    count = 0
    for path in files:
        try:
            with pq.ParquetFile(path) as table:
                count += table.metadata.num_rows
        except Exception as error:
            raise UsageError(f"{path} is not a readable Parquet file: {error}") from None
    encode = _row_encoder(row_format)

    def records() -> Iterator[bytes]:
        for path in files:
            row_number = 0
            with pq.ParquetFile(path) as table:
                for batch in table.iter_batches(batch_size=1024):
                    for row in batch.to_pylist():
                        yield encode(row, f"row {row_number} of {path}")
                        row_number += 1

    return _Input(count, records, f".map({row_format}.loads)")


def _huggingface(directory: str, row_format: str) -> _Input:
    try:
        import datasets
    except ImportError:
        raise CommandError(
            f"reading {directory} needs HuggingFace datasets: pip install datasets"
        ) from None
    try:
        dataset = datasets.load_from_disk(directory)
    except Exception as error:
        raise CommandError(f"cannot load the HuggingFace dataset {directory}: {error}") from None
    if not isinstance(dataset, datasets.Dataset):
        raise UsageError(f"{directory} holds a {type(dataset).__name__}: convert one split")
    encode = _row_encoder(row_format)

    def records() -> Iterator[bytes]:
        row_number = 0
        # Arrow tables, not the formatted rows: values as stored (no image decoding).
        for table in dataset.with_format("arrow").iter(batch_size=1024):
            for row in table.to_pylist():
                yield encode(row, f"row {row_number} of {directory}")
                row_number += 1

    return _Input(len(dataset), records, f".map({row_format}.loads)")


def _npy_files(files: list[str]) -> _Input:
    def records() -> Iterator[bytes]:
        for path in files:
            with open(path, "rb") as file:
                data = file.read()
            try:
                np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError as error:
                raise CommandError(f"{path} is not a numeric .npy array: {error}") from None
            yield data

    return _Input(len(files), records, ".map(lambda b: np.load(io.BytesIO(b)))")


class _Counted:
    """The input's records with a length (so shards are contiguous) and a progress bar."""

    def __init__(self, source: _Input, bar: ProgressBar):
        self._source = source
        self._bar = bar
        self.written = 0
        self.nbytes = 0
        self.first: bytes | None = None
        self.last: bytes | None = None

    def __len__(self) -> int:
        return self._source.count

    def __iter__(self) -> Iterator[bytes]:
        for record in self._source.records():
            if self.first is None:
                self.first = record
            self.last = record
            self.written += 1
            self.nbytes += len(record)
            self._bar.update(self.written)
            yield record


# ---------------------------------------------------------------- the command


def _outputs(dest: str, num_shards: int, overwrite: bool) -> list[str]:
    if os.path.isdir(dest):
        raise UsageError(
            f"{dest} is a directory: pass a base name for the shards, e.g. "
            f"{os.path.join(dest, 'data')}"
        )
    names = (
        [dest]
        if num_shards == 1
        else [f"{dest}-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]
    )
    existing = [name for name in names if os.path.exists(name)]
    if existing and not overwrite:
        raise UsageError(f"{existing[0]} already exists: pass --overwrite to replace it")
    return names


def _input_bytes(files: list[str]) -> int:
    """The size of the input files (a directory: every file under it)."""
    total = 0
    for path in files:
        if os.path.isdir(path):
            for folder, _, names in os.walk(path):
                total += sum(os.path.getsize(os.path.join(folder, name)) for name in names)
        else:
            total += os.path.getsize(path)
    return total


def _writer_options(requested: str, mean_record: float) -> str:
    """The options to write with: `requested`, or for "auto" the ones that fit the
    records; a bad value is a usage error, found before anything is written."""
    options = requested
    if requested == "auto":
        options = "group_size:1" + (",uncompressed" if mean_record < _SMALL_RECORD else "")
    with tempfile.TemporaryDirectory() as scratch:
        try:
            write_array_record([], os.path.join(scratch, "probe"), options=options)
        except ValueError as error:
            raise UsageError(f"--writer-options {requested!r}: {error}") from None
    return options


def _overhead_note(on_disk: int, nbytes: int, files: int, options: str) -> str | None:
    """Why the files are much larger than their records, when they are."""
    if nbytes == 0 or on_disk <= _OVERHEAD_NOTE * nbytes:
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


def run(args: argparse.Namespace) -> int:
    if grain_sources.is_url(args.src) or grain_sources.is_url(args.dest):
        return _run_with_buckets(args)
    kind, files = _detect(args.src, args.format)
    outputs = _outputs(args.dest, args.num_shards, args.overwrite)
    if kind == "jsonl":
        source = _json_lines(files)
    elif kind == "parquet":
        source = _parquet(files, args.row_format)
    elif kind == "npy":
        source = _npy_files(files)
    else:
        source = _huggingface(files[0], args.row_format)
    options = _writer_options(args.writer_options, _input_bytes(files) / max(source.count, 1))
    pattern = args.dest if args.num_shards == 1 else f"{args.dest}@{args.num_shards}"
    if kind == "hf":
        detail = "saved with save_to_disk"
    else:
        detail = f"{len(files)} file" + ("s" if len(files) > 1 else "")
    print(
        f"converting {args.src} ({_FORMAT_NAMES[kind]}, {detail}, {source.count:,} records) "
        f"to {pattern}"
    )
    parent = os.path.dirname(os.path.abspath(args.dest))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as error:
        raise CommandError(f"cannot make the directory {parent}: {error}") from None

    bar = ProgressBar(source.count, "converting")
    counted = _Counted(source, bar)
    start = time.perf_counter()
    try:
        write_array_record(
            counted,
            args.dest,
            num_shards=args.num_shards,
            options=options,
            progress=False,
        )
    except (ValueError, OSError) as error:
        raise CommandError(f"writing {pattern} failed: {error}") from None
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    size = sum(os.path.getsize(name) for name in outputs)
    shards = "1 ArrayRecord file" if len(outputs) == 1 else f"{len(outputs)} ArrayRecord shards"
    print(
        f"wrote {counted.written:,} records ({format_bytes(counted.nbytes)}) into {shards} "
        f"({format_bytes(size)} on disk) in {seconds:.2f} s: "
        f"{format_rate(counted.written / max(seconds, 1e-9), 'records')}"
    )
    for name in outputs[:2] + (["..."] if len(outputs) > 3 else []) + outputs[2:][-1:]:
        print(f"  {name}")
    print(f"writer options: {options}")
    note = _overhead_note(size, counted.nbytes, len(outputs), options)
    if note:
        print(note)

    with grain.sources.ArrayRecordDataSource(outputs) as written:
        found = len(written)
        ends_match = found == 0 or (written[0] == counted.first and written[-1] == counted.last)
    if not (found == counted.written == source.count and ends_match):
        raise CommandError(
            f"the input has {source.count:,} records, {counted.written:,} were written and "
            f"{found:,} read back from {pattern}"
            + ("" if ends_match else "; the first or last record read back differs")
        )
    print(
        f"read back {found:,} records with grain.sources.ArrayRecordDataSource: "
        "the count matches the input"
    )
    print("read them with:")
    print(
        "  grain.MapDataset.source(grain.sources.ArrayRecordDataSource("
        f"{pattern!r})){source.read_back}"
    )
    return EXIT_OK


def _run_with_buckets(args: argparse.Namespace) -> int:
    """`run` for a SRC or DEST in an object store (s3://, gs://, ...).

    A SRC object (or the objects a glob names) is downloaded into a temporary
    directory and converted from there; shards for a DEST URL are written to a
    temporary directory, uploaded, and read back from the bucket.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="grain-convert-") as tmp:
        local = argparse.Namespace(**vars(args))
        try:
            if grain_sources.is_url(args.src):
                store = grain_sources.ObjectStore(args.src.split("://", 1)[0])
                names = store.glob(args.src) if set("*?[") & set(args.src) else [args.src]
                if not names:
                    raise UsageError(f"no object matches {args.src}")
                os.makedirs(os.path.join(tmp, "src"))
                for name in names:
                    store.get_file(name, os.path.join(tmp, "src", name.rsplit("/", 1)[-1]))
                one = os.path.join(tmp, "src", names[0].rsplit("/", 1)[-1])
                local.src = one if len(names) == 1 else os.path.join(tmp, "src")
            if grain_sources.is_url(args.dest):
                local.dest = os.path.join(tmp, "out", args.dest.rsplit("/", 1)[-1])
                local.overwrite = True
            status = run(local)
            if grain_sources.is_url(args.dest):
                store = grain_sources.ObjectStore(args.dest.split("://", 1)[0])
                outputs = _outputs(local.dest, args.num_shards, True)
                urls = [args.dest + name[len(local.dest) :] for name in outputs]
                for name, url in zip(outputs, urls, strict=True):
                    store.put_file(name, url)
                with grain.sources.ArrayRecordDataSource(urls) as uploaded:
                    found = len(uploaded)
                print(f"uploaded to {args.dest} and read {found:,} records back from the bucket")
        except (grain_sources.ObjectStoreError, PermissionError, FileNotFoundError) as error:
            raise CommandError(str(error)) from None
    return status
