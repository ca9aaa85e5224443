"""Reading one piece of one input file (records [start, stop) of it) inside a task.

Each reader yields ``(number, value)``: the number the error messages use
(a JSON line's line number, a Parquet or Arrow row number, a TFRecord record
number) and the record as read: a JSON line's stripped bytes, a row as a dict
of Python values, a TFRecord record's bytes, a .npy file's bytes. `WHERE`
turns a number into "line 3 of FILE".
"""

from __future__ import annotations

import codecs
import io
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from grain_convert._errors import ConversionError
from grain_convert._inputs import pyarrow_module
from grain_sources import ParquetReader, TFRecordReader

WHERE = {
    "jsonl": "line {} of {}",
    "parquet": "row {} of {}",
    "hf": "row {} of {}",
    "tfrecord": "record {} of {}",
    "npy": "{1}",
}

Piece = dict[str, Any]  # {"file": index, "start": first record, "stop": end, "seek": [...]}


def read_piece(kind: str, path: str, piece: Piece) -> Iterator[tuple[int, Any]]:
    """The records [start, stop) of the file at `path` (see the module docstring)."""
    start, stop = piece["start"], piece["stop"]
    if kind == "jsonl":
        return _json_lines(path, start, stop, piece["seek"])
    if kind == "tfrecord":
        return _tfrecord(path, start, stop, piece["seek"])
    if kind == "parquet":
        return _parquet(path, start, stop)
    if kind == "hf":
        return _arrow_stream(path, start, stop)
    return _npy(path)


def _json_lines(path: str, start: int, stop: int, seek: list[int]) -> Iterator[tuple[int, Any]]:
    offset, record, line_number = seek
    with open(path, "rb") as file:
        file.seek(offset)
        for line in file:
            if line_number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8) :]
            text = line.strip()
            if text:
                if record >= start:
                    if record >= stop:
                        return
                    yield line_number, text
                record += 1
            line_number += 1
    if record < stop:
        raise ConversionError(
            f"{path} ends after {record} records, and the plan expects {stop}: the file "
            "changed since the plan was made; convert it again"
        )


def _tfrecord(path: str, start: int, stop: int, seek: list[int]) -> Iterator[tuple[int, Any]]:
    offset, record, _ = seek
    with TFRecordReader(path, offset=offset, index=record) as reader:
        try:
            records = itertools.islice(reader, start - record, stop - record)
            yield from enumerate(records, start)
        except ValueError as error:  # CorruptRecordError names the file and offset
            raise ConversionError(f"record {reader.index} of {path}: {error}") from None


def _parquet(path: str, start: int, stop: int) -> Iterator[tuple[int, Any]]:
    try:
        with ParquetReader(path, row=start) as reader:
            for number in range(start, stop):
                yield number, next(reader)
    except ValueError as error:  # names the file and the row
        raise ConversionError(str(error)) from None


def _arrow_stream(path: str, start: int, stop: int) -> Iterator[tuple[int, Any]]:
    pa = pyarrow_module()
    first = 0  # the number of the batch's first row
    with pa.memory_map(path) as source:
        for batch in pa.ipc.open_stream(source):
            end = first + batch.num_rows
            if end > start and first < stop:
                low, high = max(start, first) - first, min(stop, end) - first
                rows = batch.slice(low, high - low).to_pylist()
                yield from enumerate(rows, first + low)
            first = end
            if first >= stop:
                return


def _npy(path: str) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as file:
        data = file.read()
    try:
        np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as error:
        raise ConversionError(f"{path} is not a numeric .npy array: {error}") from None
    yield 0, data


# ---------------------------------------------------------------- what a record becomes


def row_encoder(row_format: str) -> Callable[[Any, Callable[[], str]], bytes]:
    """Encodes a value that is not bytes already: pickled, or as compact JSON."""
    if row_format == "pickle":
        import pickle

        return lambda value, where: pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def encode(value: Any, where: Callable[[], str]) -> bytes:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            for column, item in value.items() if isinstance(value, dict) else ():
                try:
                    json.dumps(item)
                except (TypeError, ValueError):
                    raise ConversionError(
                        f"{where()}: column {column!r} holds {type(item).__name__}, which "
                        "JSON cannot store: use --row-format pickle"
                    ) from None
            raise ConversionError(
                f"{where()}: {type(value).__name__} cannot be stored as JSON: use "
                "--row-format pickle"
            ) from None

    return encode


def decode_json_line(text: bytes, where: Callable[[], str]) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ConversionError(
            f"{where()} is not JSON ({error}): each line must hold one JSON value"
        ) from None


READ_BACK = {
    "jsonl": ".map(json.loads)",
    "tfrecord": "(raw TFRecord record bytes)",
    "npy": ".map(lambda b: np.load(io.BytesIO(b)))",
}
