"""What SRC holds, from metadata only: its format, its files and each file's record count.

The counts are what the plan cuts into shards. Parquet's come from the
footers, a HuggingFace dataset's from its Arrow files' batch headers (memory
mapped, no data read), a .npy file is one record. JSON lines and TFRecord
files carry no count, so they are scanned once: newlines found with numpy
over 16 MB blocks, TFRecord length headers hopped over. The scan also keeps a
sparse seek index (the byte offset, and for JSON lines the line number, of
every `SEEK_STRIDE`-th record), so that a task starts reading a file near its
first record instead of at byte 0. The TFRecord pass finds every record's
offset anyway, so it leaves them beside each input as the sidecar index that
`grain_sources.TFRecordDataSource` reads (``<file>.offsets.npy``): a later
random-access source over the same files opens without a pass. An input whose
directory cannot be written is left as it is (one logged line says so).
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grain_convert._errors import InputError

FORMAT_NAMES = {
    "jsonl": "JSON lines",
    "parquet": "Parquet",
    "npy": ".npy files",
    "hf": "HuggingFace dataset",
    "tfrecord": "TFRecord",
}
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".npy": "npy",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
}
SEEK_STRIDE = 4096
_BLOCK = 1 << 24
# What bytes.strip() removes: a line of only these is blank and holds no record.
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True
_TFRECORD_HEADER = struct.Struct("<QI")
# The sidecar index grain_sources keeps beside a TFRecord file: not an input itself.
TFRECORD_SIDECAR = ".offsets.npy"
_log = logging.getLogger(__name__)


@dataclass
class InputFile:
    """One input file: its identity (so a changed file changes the plan) and record count.

    `seek` holds ``[byte offset, record number, line number]`` of every
    SEEK_STRIDE-th record, for the formats read sequentially from a byte offset.
    """

    path: str
    size: int
    mtime_ns: int
    records: int
    seek: list[list[int]] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "mtime_ns": self.mtime_ns}


def detect(src: str, fmt: str = "auto") -> tuple[str, list[str]]:
    """SRC's format and its files (the dataset's directory for a HuggingFace dataset)."""
    if not os.path.exists(src):
        raise FileNotFoundError(f"no such file or directory: {src}")
    if not os.path.isdir(src):
        kind = _SUFFIXES.get(os.path.splitext(src)[1].lower()) if fmt == "auto" else fmt
        if kind is None:
            raise InputError(
                f"cannot tell the format of {src} from its name: use .jsonl, .json, .parquet "
                "or .tfrecord, a directory of .npy files or of a HuggingFace dataset, or pass "
                "--format"
            )
        if kind in ("npy", "hf"):
            raise InputError(f"--format {kind} reads a directory, and {src} is a file")
        return kind, [src]
    if os.path.exists(os.path.join(src, "dataset_dict.json")):
        splits = sorted(name for name in os.listdir(src) if os.path.isdir(os.path.join(src, name)))
        example = os.path.join(src, splits[0]) if splits else src
        raise InputError(
            f"{src} holds a HuggingFace DatasetDict (splits: {', '.join(splits)}): "
            f"convert one split at a time, e.g. {example}"
        )
    is_hf = any(os.path.exists(os.path.join(src, name)) for name in _HF_MARKERS)
    if fmt in ("auto", "hf") and is_hf:
        return "hf", [src]
    if fmt == "hf":
        raise InputError(
            f"{src} is not a dataset saved by HuggingFace save_to_disk "
            "(it holds neither state.json nor dataset_info.json)"
        )
    by_kind: dict[str, list[str]] = {}
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        kind = _SUFFIXES.get(os.path.splitext(name)[1].lower())
        if name.endswith(TFRECORD_SIDECAR) and os.path.isfile(path[: -len(TFRECORD_SIDECAR)]):
            continue  # the offset index of the TFRecord file beside it
        if kind and not name.startswith(".") and os.path.isfile(path):
            by_kind.setdefault(kind, []).append(path)
    if fmt != "auto":
        if fmt not in by_kind:
            raise InputError(f"{src} holds no {FORMAT_NAMES[fmt]} input files")
        return fmt, by_kind[fmt]
    if not by_kind:
        raise InputError(
            f"{src} holds no .jsonl, .json, .parquet, .tfrecord or .npy files and is not a "
            "HuggingFace dataset (no dataset_info.json or state.json)"
        )
    if len(by_kind) > 1:
        found = ", ".join(f"{len(files)} {FORMAT_NAMES[kind]}" for kind, files in by_kind.items())
        raise InputError(f"{src} holds inputs of several formats ({found}): pass --format")
    ((kind, files),) = by_kind.items()
    return kind, files


_HF_MARKERS = ("state.json", "dataset_info.json")


def scan(kind: str, files: list[str]) -> list[InputFile]:
    """The files of the input with their record counts (see the module docstring)."""
    if kind == "hf":
        files = huggingface_files(files[0])
    scanned = []
    unwritable: list[str] = []
    for path in files:
        stat = os.stat(path)
        entry = InputFile(os.path.abspath(path), stat.st_size, stat.st_mtime_ns, 0)
        if kind == "jsonl":
            entry.records, entry.seek = _scan_json_lines(path)
        elif kind == "tfrecord":
            entry.records, entry.seek, offsets = _scan_tfrecord(path)
            unwritable += _keep_tfrecord_index(path, offsets)
        elif kind == "parquet":
            entry.records = _parquet_rows(path)
        elif kind == "hf":
            entry.records = _arrow_stream_rows(path)
        else:
            entry.records = 1
        scanned.append(entry)
    if unwritable:
        _log.warning(
            "no offset index written beside %d TFRecord input(s) (%s): a "
            "grain_sources.TFRecordDataSource over them builds it with one pass",
            len(unwritable),
            unwritable[0],
        )
    return scanned


def _keep_tfrecord_index(path: str, offsets: np.ndarray) -> list[str]:
    """Writes the sidecar index of `path` unless an identical one is there; [] or why not."""
    import grain_sources

    try:
        with open(path + TFRECORD_SIDECAR, "rb") as file:
            if np.array_equal(np.load(file, allow_pickle=False), offsets):
                return []
    except (OSError, ValueError, EOFError):
        pass  # missing or damaged: written below
    try:
        grain_sources.write_tfrecord_index(path, offsets=offsets)
    except OSError as error:
        return [f"{path}: {error.strerror or error}"]
    except ValueError:
        pass  # its last record's header is damaged: the conversion names it when read
    return []


# ---------------------------------------------------------------- JSON lines


def _scan_json_lines(path: str) -> tuple[int, list[list[int]]]:
    """The number of non-blank lines, and the seek index (offset, record, line) of every
    SEEK_STRIDE-th one; vectorized over each block, carrying the unfinished last line."""
    count = 0
    seek: list[list[int]] = []
    position = 0  # the file offset of the block
    line_start = 0  # the offset of the line not finished yet
    line_number = 1  # its number (1-based, blank lines counted)
    has_text = False  # whether it holds a non-whitespace byte so far
    with open(path, "rb") as file:
        while block := file.read(_BLOCK):
            data = np.frombuffer(block, dtype=np.uint8)
            text = ~_WHITESPACE[data]
            if position == 0 and block.startswith(codecs.BOM_UTF8):
                text[: len(codecs.BOM_UTF8)] = False
            newlines = np.flatnonzero(data == 10)
            before = np.concatenate(([0], np.cumsum(text, dtype=np.int64)))
            if len(newlines):
                starts = np.concatenate(([0], newlines[:-1] + 1))
                nonblank = before[newlines] - before[starts] > 0
                nonblank[0] |= has_text
                offsets = position + starts
                offsets[0] = line_start
                numbers = line_number + np.arange(len(newlines))
                count = _keep_seek_points(seek, count, offsets[nonblank], numbers[nonblank])
                line_start = position + int(newlines[-1]) + 1
                line_number += len(newlines)
                has_text = bool(before[-1] - before[newlines[-1] + 1] > 0)
            else:
                has_text = has_text or bool(before[-1] > 0)
            position += len(block)
    if has_text:  # a last line without a newline
        count = _keep_seek_points(seek, count, np.array([line_start]), np.array([line_number]))
    return count, seek


def _keep_seek_points(
    seek: list[list[int]], count: int, offsets: np.ndarray, numbers: np.ndarray
) -> int:
    """Appends the seek points among records count.. (at offsets, on lines numbers)."""
    records = np.arange(count, count + len(offsets))
    picked = np.flatnonzero(records % SEEK_STRIDE == 0)
    seek.extend([int(offsets[i]), int(records[i]), int(numbers[i])] for i in picked.tolist())
    return count + len(offsets)


# ---------------------------------------------------------------- TFRecord


def _scan_tfrecord(path: str) -> tuple[int, list[list[int]], np.ndarray]:
    """The record count from the length headers (checksums are checked when read), the
    seek index, and every record's offset followed by the file size (the sidecar index)."""
    count = 0
    seek: list[list[int]] = []
    offsets = [0]
    size = os.path.getsize(path)
    offset = 0
    with open(path, "rb", buffering=1 << 16) as file:
        while offset < size:
            header = file.read(_TFRECORD_HEADER.size)
            length = _TFRECORD_HEADER.unpack(header)[0] if len(header) == 12 else size
            end = offset + _TFRECORD_HEADER.size + length + 4
            if end > size:
                raise InputError(
                    f"{path} is not a complete TFRecord file: record {count} at byte offset "
                    f"{offset} ends past the end of the file (cut short, or not TFRecord)"
                )
            if count % SEEK_STRIDE == 0:
                seek.append([offset, count, 0])
            count += 1
            offset = end
            offsets.append(end)
            file.seek(offset)
    return count, seek, np.array(offsets, dtype=np.int64)


# ---------------------------------------------------------------- Parquet and Arrow


def pyarrow_module(name: str = "pyarrow") -> Any:
    """`pyarrow` (or a submodule), with an install hint when it is missing."""
    try:
        import importlib

        return importlib.import_module(name)
    except ImportError:
        raise InputError(
            "reading Parquet or HuggingFace datasets needs pyarrow: pip install pyarrow"
        ) from None


def _parquet_rows(path: str) -> int:
    pq = pyarrow_module("pyarrow.parquet")
    try:
        return int(pq.read_metadata(path).num_rows)
    except Exception as error:  # a damaged footer raises many pyarrow error types
        raise InputError(f"{path} is not a readable Parquet file: {error}") from None


def huggingface_files(directory: str) -> list[str]:
    """The Arrow files of a dataset saved by `save_to_disk`, in order."""
    state_path = os.path.join(directory, "state.json")
    try:
        with open(state_path, encoding="utf-8") as file:
            state = json.load(file)
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"cannot read the file list of the HuggingFace dataset {directory} from "
            f"{state_path} ({error}): save it again with Dataset.save_to_disk"
        ) from None
    if state.get("_indices_data_files"):
        raise InputError(
            f"{directory} holds an indices mapping (a select/shuffle not flattened): save it "
            "with dataset.flatten_indices().save_to_disk(...)"
        )
    return [os.path.join(directory, name) for name in names]


def _arrow_stream_rows(path: str) -> int:
    pa = pyarrow_module()
    try:
        with pa.memory_map(path) as source:
            reader = pa.ipc.open_stream(source)
            return sum(batch.num_rows for batch in reader)
    except Exception as error:
        raise InputError(f"{path} is not a readable Arrow stream file: {error}") from None
