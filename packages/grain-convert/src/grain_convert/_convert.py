"""The driver: ArrayRecord shards from big corpora, on this machine or on a Ray cluster.

`convert` (public as ``grain_convert.convert`` and ``grain.convert.convert``) is
what ``grain convert`` runs. It makes a plan from the input's
metadata alone (which input records each output shard holds: record i of the
input, in file order, is index i of ``ArrayRecordDataSource("DEST@N")``),
writes it to ``DEST.plan.json``, runs one idempotent task per shard on an
executor (``"local"``: worker processes here; ``"ray"``: Ray tasks), and
writes ``DEST.manifest.json`` once every shard is done and checked. Both
executors give byte-identical shards from the same plan. A rerun with
``resume=True`` keeps the shards whose marker (``SHARD.done``) matches the plan
and redoes the others. See docs/convert_at_scale.md.

Example::

    from grain_convert import convert  # or: from grain.convert import convert

    result = convert("corpus/", "out/train", num_shards=16, executor="ray",
                     transform=tokenize, lengths="tokens")
    ds = grain.MapDataset.source(
        grain.sources.ArrayRecordDataSource("out/train@16")).map(pickle.loads)
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

from grain_convert import manifest as _manifest
from grain_convert._errors import ConversionError
from grain_convert._inputs import detect
from grain_convert._local import run_local
from grain_convert._options import check_writer_options
from grain_convert._plan import make_plan, shard_names, write_json
from grain_convert._progress import ProgressBar
from grain_convert._ray import run_ray
from grain_convert._read import READ_BACK
from grain_convert._task import LENGTHS_SUFFIX, MARKER_SUFFIX, FieldLength, read_marker

EXECUTORS = ("local", "ray")


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """What `convert` did.

    Attributes:
      pattern: what ``ArrayRecordDataSource`` opens: ``DEST@N`` (or DEST for one shard).
      shards: the shard paths, in order.
      num_records: records in all shards.
      num_bytes: bytes of the records (before ArrayRecord's framing and compression).
      disk_bytes: bytes of the shard files.
      written: how many shards this run wrote; the others were kept from an
        earlier run (``resume=True``).
      plan_path, manifest_path: the plan and the manifest.
      input_format: "jsonl", "parquet", "hf", "tfrecord" or "npy".
      writer_options: the ArrayRecordWriter options the shards were written with.
      num_files: how many input files were read.
      seconds: the wall time of the run, planning included.
      read_back: the ``.map`` that decodes a record.
    """

    pattern: str
    shards: list[str]
    num_records: int
    num_bytes: int
    disk_bytes: int
    written: int
    plan_path: str
    manifest_path: str
    input_format: str
    writer_options: str
    num_files: int
    seconds: float
    read_back: str


def convert(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    num_shards: int = 1,
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    resume: bool = False,
    overwrite: bool = False,
    input_format: str = "auto",
    row_format: str = "pickle",
    transform: Callable[[Any], Any] | None = None,
    lengths: str | Callable[[Any], int] | None = None,
    writer_options: str = "group_size:1",
    max_retries: int = 3,
    progress: bool | None = None,
    on_plan: Callable[[dict[str, Any]], None] | None = None,
) -> ConversionResult:
    """Converts SRC into `num_shards` ArrayRecord shards named after DEST.

    Args:
      src: a JSON lines, Parquet or TFRecord file; a directory of such files
        (read in name order) or of .npy files; or a directory written by
        HuggingFace ``Dataset.save_to_disk``.
      dest: the shards' base name: DEST for one shard, else ``DEST-00000-of-
        0000N`` ..., opened by ``ArrayRecordDataSource("DEST@N")``. The plan
        and the manifest are ``DEST.plan.json`` and ``DEST.manifest.json``.
      num_shards: how many shards.
      executor: ``"local"`` (worker processes on this machine) or ``"ray"``.
      workers: local worker processes (default: the CPU count); with Ray and
        no `ray_address`, the CPUs of the local cluster it starts.
      ray_address: a Ray cluster to use ("auto", "host:port", "ray://...");
        None starts a local one (or uses Ray if this process initialized it).
      resume: keep the shards whose marker matches the plan; redo the rest.
      overwrite: replace existing outputs (without it, existing shards are an error).
      input_format: "auto" (from names), "jsonl", "parquet", "hf", "tfrecord" or "npy".
      row_format: how a table row (or a transform's result that is not bytes)
        is stored: "pickle" (any value) or "json".
      transform: a function applied to each record (a JSON line's value, a
        row dict, a TFRecord's or .npy file's bytes); its result is stored as
        is if bytes, else encoded by `row_format`. Pickled to the workers with
        cloudpickle, so lambdas and closures work.
      lengths: per-record lengths written beside each shard
        (``SHARD.lengths.npy``, int64): a field name (``len(record[field])``
        of the transformed record) or a function of the record.
      writer_options: ArrayRecordWriter options; keep group_size:1 for random
        access. "auto" is group_size:1, uncompressed when the input's records
        average under 128 bytes (compressing one record at a time only adds
        bytes there), else ArrayRecord's default zstd:3.
      max_retries: how often a shard whose worker died is tried again.
      progress: progress on stderr (a bar on a terminal, else a line every 5 s);
        None is True.
      on_plan: called with the plan (a dict) once it is written, before any shard.

    Raises:
      FileNotFoundError: SRC does not exist.
      FileExistsError: outputs exist and neither `resume` nor `overwrite` is set.
      InputError: SRC's format cannot be told or read (a ValueError).
      ValueError: bad options (`writer_options` ArrayRecord refuses, ...),
        found before anything is written.
      ConversionError: a record or a task failed; finished shards stay, no
        manifest is written.
    """
    start = time.perf_counter()
    _check_options(num_shards, executor, row_format, resume, overwrite)
    check_writer_options(writer_options)
    src, dest = os.fspath(src), os.path.abspath(os.fspath(dest))
    kind, files = detect(src, input_format)
    finals = _prepare_outputs(dest, num_shards, resume, overwrite)
    job, transform_id, lengths_id = _job(dest, transform, lengths)
    plan = make_plan(
        kind,
        files,
        dest,
        num_shards,
        row_format=row_format,
        writer_options=writer_options,
        transform_id=transform_id,
        lengths_id=lengths_id,
    )
    job["settings"] = plan["settings"]
    plan_path = dest + _manifest.PLAN_SUFFIX
    write_json(plan_path, plan)
    if on_plan is not None:
        on_plan(plan)
    markers: list[dict[str, Any] | None] = [
        _kept_marker(shard, final) if resume else None
        for shard, final in zip(plan["shards"], finals, strict=True)
    ]
    todo = [shard for shard, marker in zip(plan["shards"], markers, strict=True) if not marker]
    events = _Events(plan, markers, progress)
    try:
        if executor == "local":
            run_local(job, todo, events, workers=workers, max_retries=max_retries)
        else:
            run_ray(
                job, todo, events, address=ray_address, workers=workers, max_retries=max_retries
            )
    finally:
        events.close()
        # Tasks stopped by an error or Ctrl-C may leave temporary files: they are no shard.
        _remove_temporaries(finals)
    done = [marker for marker in markers if marker is not None]
    if len(done) != len(finals):
        raise ConversionError(f"{len(finals) - len(done)} shards were not written")
    pattern = dest if num_shards == 1 else f"{dest}@{num_shards}"
    manifest_path = dest + _manifest.MANIFEST_SUFFIX
    write_json(manifest_path, _manifest.build(plan, done, os.path.basename(pattern)))
    return ConversionResult(
        pattern=pattern,
        shards=finals,
        num_records=plan["num_records"],
        num_bytes=sum(marker["record_bytes"] for marker in done),
        disk_bytes=sum(marker["bytes"] for marker in done),
        written=len(todo),
        plan_path=plan_path,
        manifest_path=manifest_path,
        input_format=kind,
        writer_options=plan["settings"]["writer_options"],
        num_files=len(plan["files"]),
        seconds=time.perf_counter() - start,
        read_back=_read_back(kind, row_format, transform),
    )


def _check_options(
    num_shards: int, executor: str, row_format: str, resume: bool, overwrite: bool
) -> None:
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"`num_shards` must be an int >= 1, got {num_shards!r}")
    if executor not in EXECUTORS:
        raise ValueError(f"`executor` must be one of {EXECUTORS}, got {executor!r}")
    if row_format not in ("pickle", "json"):
        raise ValueError(f"`row_format` must be 'pickle' or 'json', got {row_format!r}")
    if resume and overwrite:
        raise ValueError("pass `resume` (keep finished shards) or `overwrite`, not both")


def _prepare_outputs(dest: str, num_shards: int, resume: bool, overwrite: bool) -> list[str]:
    """The shard paths; removes what a run must not trust (temporary files, the manifest)."""
    if os.path.isdir(dest):
        raise IsADirectoryError(
            f"{dest} is a directory: pass a base name for the shards, e.g. "
            f"{os.path.join(dest, 'data')}"
        )
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    finals = shard_names(dest, num_shards)
    manifest = dest + _manifest.MANIFEST_SUFFIX
    if not (resume or overwrite):
        existing = [name for name in [*finals, manifest] if os.path.exists(name)]
        if existing:
            raise FileExistsError(
                f"{existing[0]} already exists: pass --overwrite to replace it (or --resume "
                "to finish an interrupted conversion)"
            )
    stale = [manifest]
    if overwrite:
        stale += [final + suffix for final in finals for suffix in (MARKER_SUFFIX, LENGTHS_SUFFIX)]
    for path in stale:
        if os.path.exists(path):
            os.remove(path)
    _remove_temporaries(finals)
    return finals


def _remove_temporaries(finals: list[str]) -> None:
    """Removes what killed tasks left: temporary shard, lengths and marker files."""
    for final in finals:
        for suffix in ("", MARKER_SUFFIX, LENGTHS_SUFFIX):
            for path in glob.glob(glob.escape(final + suffix) + ".tmp-*"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def _job(
    dest: str,
    transform: Callable[[Any], Any] | None,
    lengths: str | Callable[[Any], int] | None,
) -> tuple[dict[str, Any], str | None, str | None]:
    """What every task gets (the transform and length function pickled), and the lengths' id."""
    import cloudpickle  # type: ignore[import-untyped]

    if transform is not None and not callable(transform):
        raise TypeError(f"`transform` must be a function, got {type(transform).__name__}")
    length_of = FieldLength(lengths) if isinstance(lengths, str) else lengths
    if length_of is not None and not callable(length_of):
        raise TypeError(f"`lengths` must be a field name or a function, got {lengths!r}")
    job: dict[str, Any] = {"directory": os.path.dirname(dest), "transform": None, "lengths": None}
    transform_id = lengths_id = None
    if transform is not None:
        job["transform"] = cloudpickle.dumps(transform)
        name = getattr(transform, "__qualname__", type(transform).__name__)
        transform_id = f"{name} sha256:{hashlib.sha256(job['transform']).hexdigest()[:16]}"
    if length_of is not None:
        job["lengths"] = cloudpickle.dumps(length_of)
        lengths_id = (
            repr(length_of)
            if isinstance(length_of, FieldLength)
            else f"sha256:{hashlib.sha256(job['lengths']).hexdigest()[:16]}"
        )
    return job, transform_id, lengths_id


def _kept_marker(shard: dict[str, Any], final: str) -> dict[str, Any] | None:
    """The shard's marker, if it matches the plan and the file is still the one it describes."""
    marker = read_marker(final)
    if marker is None or marker.get("hash") != shard["hash"]:
        return None
    try:
        if os.path.getsize(final) != marker["bytes"] or "record_bytes" not in marker:
            return None
        lengths = marker.get("lengths")
        if lengths and not os.path.exists(os.path.join(os.path.dirname(final), lengths["file"])):
            return None
    except (OSError, KeyError, TypeError):
        return None
    return marker


def _read_back(kind: str, row_format: str, transform: Callable[[Any], Any] | None) -> str:
    if transform is None and kind in READ_BACK:
        return READ_BACK[kind]
    note = " (a transform's bytes are stored as they are)" if transform is not None else ""
    return f".map({row_format}.loads){note}"


class _Events:
    """Collects the markers as shards finish and draws the progress bar."""

    def __init__(
        self, plan: dict[str, Any], markers: list[dict[str, Any] | None], progress: bool | None
    ):
        self._markers = markers
        self._running: dict[int, int] = {}
        self._kept = sum(marker["records"] for marker in markers if marker)
        self._bar = _ShardBar(plan["num_records"], len(markers), progress)
        self._bar.shards_done = sum(marker is not None for marker in markers)
        self._bar.update(self._kept)

    @property
    def shows_progress(self) -> bool:
        """Whether a bar is drawn: without one, executors need not collect records."""
        return bool(self._bar.enabled)

    def progress(self, index: int, records: int) -> None:
        self._running[index] = records
        self._bar.update(self._kept + sum(self._running.values()))

    def done(self, index: int, marker: dict[str, Any]) -> None:
        self._running.pop(index, None)
        self._markers[index] = marker
        self._kept += marker["records"]
        self._bar.shards_done += 1
        self._bar.update(self._kept + sum(self._running.values()))

    def close(self) -> None:
        self._bar.close()


class _ShardBar(ProgressBar):
    """The records bar, labelled with the shards done."""

    def __init__(self, records: int, shards: int, enabled: bool | None):
        super().__init__(records, "converting")
        if enabled is not None:
            self.enabled = enabled
        self.shards = shards
        self.shards_done = 0

    def _draw(self, now: float, end: str = "") -> None:
        self._label = f"converting: {self.shards_done}/{self.shards} shards"
        super()._draw(now, end)
