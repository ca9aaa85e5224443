"""`grain convert SRC DEST`: ArrayRecord shards from JSON lines, Parquet, TFRecord, .npy or HF.

The work is `grain_convert.convert`'s (public as `grain.convert.convert`): a
plan made from the input's metadata (record i of the input is index i of
``ArrayRecordDataSource("DEST@N")``), one idempotent task per shard on worker
processes (``--executor local``) or on Ray (``--executor ray``), resumable
(``--resume``), and a manifest written last. This module parses the options,
prints the summary, and turns errors into exit statuses. Afterwards the shards are opened with
`grain.sources.ArrayRecordDataSource` and their count compared with the input's.

Rows of tables (Parquet, HuggingFace) are pickled dicts by default: pickle
keeps every column type as the table reader gives it, binary columns (encoded
images, audio) included, which JSON cannot hold; ``--row-format json`` writes
portable JSON instead and names the column when a value does not fit.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import grain
import grain_sources
from grain._cli_common import EXIT_OK, CommandError, UsageError, format_bytes, format_rate
from grain_convert import EXECUTORS, ConversionError, ConversionResult, InputError, convert
from grain_convert.extension import (
    FORMAT_NAMES,
    SMALL_RECORD,
    TFRECORD_SIDECAR,
    check_writer_options,
    overhead_note,
)

SUMMARY = (
    "write ArrayRecord shards from JSON lines, Parquet, TFRecord, .npy files or a HuggingFace "
    "dataset, on this machine or on Ray"
)
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
  FILE.tfrecord, FILE.tfrecords
      each record's bytes, as they are (checksums verified)
  DIR of *.npy files
      each file (one array; files in name order), as its np.save bytes:
      .map(lambda b: np.load(io.BytesIO(b)))
  DIR written by HuggingFace datasets' save_to_disk (holding dataset_info.json
  or state.json)
      each row, like Parquet's, with its values as Arrow stores them (an Image
      column gives {"bytes": ..., "path": ...})
  DIR of *.jsonl/*.json files, of *.parquet files or of *.tfrecord files
      all of them, in name order

With --transform, each record (a JSON line's value, a row dict, a TFRecord's
or .npy file's bytes) goes through your function first; bytes it returns are
stored as they are, anything else is encoded by --row-format.

Rows are pickled by default because pickle keeps every value type, binary
columns such as encoded images included, which JSON cannot hold; unpickle only
data you trust. DEST is the output's base name: with --num-shards 1 the file
DEST, else DEST-00000-of-0000N ..., read by ArrayRecordDataSource("DEST@N").
Record i of SRC is index i there.

The plan (which records each shard holds) is computed from the input's
metadata and written first, to DEST.plan.json. Each shard is then written by
one task, on worker processes here (--executor local, the default) or as Ray
tasks (--executor ray, on the cluster at --ray-address or a local one; needs
pip install 'grainline[ray]'): to a temporary name, read back and checked (count
and checksum), renamed, and marked done (SHARD.done). Both executors write
the same bytes. If a run stops (Ctrl-C, a lost machine), run the same command
with --resume: shards whose marker matches the plan are kept, the rest are
written again. DEST.manifest.json (shards, counts, checksums, the plan's
hash) is written last; "grain inspect DEST@N" checks the files against it.
A progress bar shows on stderr when it is a terminal, a progress line every
5 s when it is not; the summary goes to stdout.

SRC and DEST may be bucket URLs (s3://, gs://, ...): a SRC object (or the
objects a glob names) is downloaded to a temporary directory first; shards for
a DEST URL are written to a temporary directory on this machine, uploaded with
their manifest, and read back from the bucket (so --resume and a remote
--ray-address cannot be used with one).

Size: with group_size:1 every record is its own ArrayRecord chunk, with about
70 bytes of headers and index, and a file grows in 64 KiB blocks. Small records
therefore take several times their size on disk (25-byte JSON lines: about 3x);
the summary says so when it happens. A larger group_size shrinks that, at the
cost of decompressing the whole group for each random read."""


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
        choices=("auto", *FORMAT_NAMES),
        default="auto",
        help="the input's format (default: auto, from the name and the directory's files)",
    )
    parser.add_argument(
        "--row-format",
        choices=("pickle", "json"),
        default="pickle",
        help="how a Parquet or HuggingFace row (or a transform's result) is stored "
        "(default: pickle)",
    )
    parser.add_argument(
        "--writer-options",
        default="auto",
        metavar="OPTIONS",
        help='ArrayRecordWriter options, e.g. "group_size:1,zstd:9". The default, auto, '
        "keeps group_size:1 (every record read on its own, which random access needs) and "
        f"picks the compression from the input: uncompressed for records under "
        f"{SMALL_RECORD} bytes on average, where compressing one record at a time only adds "
        "bytes, else ArrayRecord's zstd:3",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace output files that already exist"
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where the shard tasks run: local worker processes (default) or Ray",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="K",
        help="local worker processes (default: the CPU count); with --executor ray and no "
        "--ray-address, the CPUs of the local Ray cluster",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help='the Ray cluster to use ("auto", HOST:PORT, ray://...); default: start a local one',
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the shards an earlier run of the same command finished; write the rest",
    )
    parser.add_argument(
        "--transform",
        default=None,
        metavar="MODULE:FUNCTION",
        help="apply FUNCTION to each record first (MODULE is importable, or a path to a .py file)",
    )
    parser.add_argument(
        "--lengths",
        default=None,
        metavar="FIELD",
        help="also write each record's len(record[FIELD]) beside each shard (SHARD.lengths.npy)",
    )


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.num_shards < 1:
        parser.error("--num-shards must be >= 1")
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.resume and args.overwrite:
        parser.error("--resume keeps finished shards and --overwrite replaces them: pass one")
    if args.ray_address is not None and args.executor != "ray":
        parser.error("--ray-address needs --executor ray")


def _load_transform(spec: str) -> Callable[[Any], Any]:
    """MODULE:FUNCTION, MODULE importable or a .py file (then pickled by value to workers)."""
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name:
        raise UsageError(f"--transform {spec!r}: expected MODULE:FUNCTION, e.g. mypkg.prep:clean")
    try:
        if module_name.endswith(".py"):
            import cloudpickle  # type: ignore[import-untyped]  # grain-mp's dependency

            name = "grain_convert_transform_" + os.path.basename(module_name)[:-3]
            location = importlib.util.spec_from_file_location(name, module_name)
            if location is None or location.loader is None or not os.path.isfile(module_name):
                raise ImportError(f"no such file: {module_name}")
            module = importlib.util.module_from_spec(location)
            sys.modules[name] = module
            location.loader.exec_module(module)
            # Workers cannot import a file by path: its functions travel by value.
            cloudpickle.register_pickle_by_value(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"--transform {spec!r}: cannot import {module_name}: {error}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"--transform {spec!r}: {module_name} has no function {function_name}")
    return function  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> int:
    try:
        check_writer_options(args.writer_options)
    except ValueError as error:
        raise UsageError(f"--writer-options {args.writer_options!r}: {error}") from None
    if grain_sources.is_url(args.src) or grain_sources.is_url(args.dest):
        return _run_with_buckets(args)
    transform = _load_transform(args.transform) if args.transform else None

    def announce(plan: dict[str, Any]) -> None:
        kind = plan["settings"]["format"]
        files = len(plan["files"])
        if kind == "hf":
            detail = "saved with save_to_disk"
        else:
            detail = f"{files} file" + ("s" if files > 1 else "")
        pattern = args.dest if args.num_shards == 1 else f"{args.dest}@{args.num_shards}"
        where = args.executor + (f" at {args.ray_address}" if args.ray_address else "")
        print(
            f"converting {args.src} ({FORMAT_NAMES[kind]}, {detail}, "
            f"{plan['num_records']:,} records) to {pattern} ({where})",
            flush=True,
        )

    try:
        result = convert(
            args.src,
            args.dest,
            num_shards=args.num_shards,
            executor=args.executor,
            workers=args.workers,
            ray_address=args.ray_address,
            resume=args.resume,
            overwrite=args.overwrite,
            input_format=args.format,
            row_format=args.row_format,
            transform=transform,
            lengths=args.lengths,
            writer_options=args.writer_options,
            on_plan=announce,
        )
    except (FileNotFoundError, FileExistsError, IsADirectoryError, InputError) as error:
        raise UsageError(str(error).strip("'\"")) from None
    except ConversionError as error:
        raise CommandError(str(error)) from None
    except (ValueError, OSError) as error:
        raise CommandError(f"writing {args.dest} failed: {error}") from None
    _print_summary(args, result)
    return EXIT_OK


def _print_summary(args: argparse.Namespace, result: ConversionResult) -> None:
    outputs = result.shards
    shards = "1 ArrayRecord file" if len(outputs) == 1 else f"{len(outputs)} ArrayRecord shards"
    kept = len(outputs) - result.written
    resumed = f" ({kept} kept from an earlier run)" if kept else ""
    print(
        f"wrote {result.num_records:,} records ({format_bytes(result.num_bytes)}) into {shards}"
        f"{resumed} ({format_bytes(result.disk_bytes)} on disk) in {result.seconds:.2f} s: "
        f"{format_rate(result.num_records / max(result.seconds, 1e-9), 'records')}"
    )
    for name in outputs[:2] + (["..."] if len(outputs) > 3 else []) + outputs[2:][-1:]:
        print(f"  {name}")
    print(f"writer options: {result.writer_options}")
    note = overhead_note(result.disk_bytes, result.num_bytes, len(outputs), result.writer_options)
    if note:
        print(note)
    with grain.sources.ArrayRecordDataSource(outputs) as written:
        found = len(written)
    if found != result.num_records:
        raise CommandError(
            f"the input has {result.num_records:,} records and {found:,} were read back from "
            f"{result.pattern}"
        )
    print(
        f"read back {found:,} records with grain.sources.ArrayRecordDataSource: "
        "the count matches the input"
    )
    print(f"manifest: {result.manifest_path} (check it with: grain inspect {result.pattern})")
    print("read them with:")
    print(
        "  grain.MapDataset.source(grain.sources.ArrayRecordDataSource("
        f"{result.pattern!r})){result.read_back}"
    )


def _run_with_buckets(args: argparse.Namespace) -> int:
    """`run` for a SRC or DEST in an object store (s3://, gs://, ...), through a
    temporary directory on this machine (see the description)."""
    if grain_sources.is_url(args.dest):
        if args.resume:
            raise UsageError(
                f"--resume needs the shards of the earlier run, and {args.dest} is written "
                "through a temporary directory: convert to a local DEST (resume there) and "
                "upload the files"
            )
        if args.ray_address is not None:
            raise UsageError(
                f"Ray tasks on {args.ray_address} cannot write {args.dest}: shards for a bucket "
                "are staged on this machine. Convert to a DEST on storage every node shares "
                "and upload it, or drop --ray-address (a local cluster)"
            )
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
            if grain_sources.is_url(args.src):
                _upload_tfrecord_indexes(store, names, os.path.join(tmp, "src"))
            if grain_sources.is_url(args.dest):
                _upload(local.dest, args.dest, args.num_shards)
        except (grain_sources.ObjectStoreError, PermissionError, FileNotFoundError) as error:
            raise CommandError(str(error)) from None
    return status


def _upload_tfrecord_indexes(store: Any, names: list[str], folder: str) -> None:
    """Puts the offset index the scan left beside each downloaded TFRecord object in the
    bucket, beside the object, so a TFRecordDataSource over it opens without a pass.

    A bucket that refuses the write costs one printed line, not the conversion."""
    for number, name in enumerate(names):
        local = os.path.join(folder, name.rsplit("/", 1)[-1]) + TFRECORD_SIDECAR
        if name.endswith(TFRECORD_SIDECAR) or not os.path.exists(local):
            continue
        try:
            store.put_file(local, name + TFRECORD_SIDECAR)
        except (grain_sources.ObjectStoreError, PermissionError, OSError) as error:
            print(f"offset indexes of the TFRecord inputs not written to the bucket from "
                  f"{name} on ({len(names) - number} object(s)): {error}")  # fmt: skip
            return


def _upload(staged: str, dest: str, num_shards: int) -> None:
    """Uploads the shards, their lengths and the manifest; reads the shards back."""
    store = grain_sources.ObjectStore(dest.split("://", 1)[0])
    folder, base = os.path.split(staged)
    names = sorted(name for name in os.listdir(folder) if name.startswith(base))
    for name in names:
        store.put_file(os.path.join(folder, name), dest + name[len(base) :])
    urls = [dest + f"-{i:05d}-of-{num_shards:05d}" for i in range(num_shards)]
    with grain.sources.ArrayRecordDataSource(urls if num_shards > 1 else [dest]) as uploaded:
        found = len(uploaded)
    print(f"uploaded to {dest} and read {found:,} records back from the bucket")
