"""HFIterDataset: a HuggingFace streaming `datasets.IterableDataset` as an IterDataset.

Sharding. Host h of H (`shard_options`) reads piece h of the HF dataset's
own shards (its files, or, after ``reshard()``, its Parquet row groups):
``hf.shard(H, h)``; worker w of n of `mp_prefetch` (the pipeline's worker
slice) reads piece w of its host's piece, so a host's workers read exactly
the host's piece. Pieces differ by at most one HF shard. Where a piece has
fewer shards than it has readers, each of them reads all of it and keeps
every C-th element; that costs C times the reading, and a warning says so
(record-range sharding of the files themselves is what
`ShardedParquetIterDataset` and its siblings do).

Resume. The state holds the HF dataset's own ``state_dict()`` (a shard number
and an example number in it; with row-group shards that is a row group and an
offset) and the number of elements read. Where the HF state is exact, a fresh
iterator loads it and reads on from there. Where it is not (a shuffle buffer,
whose contents HF drops on resume; a batched map over Arrow-formatted data,
which may skip a batch; datasets older than 5.0.1, which lost elements after
a filter) or when asked with ``resume="replay"``, a restore
reads the stream again from the start and discards the elements before the
saved position, with a warning naming how many: slow, but nothing is lost or
repeated.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

from grain_dataset._core._base import DatasetIterator, IterDataset
from grain_dataset._core._state import check_state
from grain_index import NoSharding, ShardOptions

_RESUME_MODES = ("auto", "state_dict", "replay")
_INSTALL = "pip install datasets"


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as error:
        raise ImportError(
            f"HFIterDataset wraps a HuggingFace datasets.IterableDataset: {_INSTALL}"
        ) from error
    return datasets


def _chain(ex_iterable: Any) -> Iterator[Any]:
    """The HF examples iterables below `ex_iterable`, itself included."""
    stack = [ex_iterable]
    while stack:
        node = stack.pop()
        yield node
        child = getattr(node, "ex_iterable", None)
        if child is not None:
            stack.append(child)
        stack.extend(getattr(node, "ex_iterables", None) or ())


def _inexact_reason(hf: Any) -> str | None:
    """Why HF's state_dict would not resume `hf` exactly, or None where it does."""
    datasets = _datasets()
    nodes = list(_chain(getattr(hf, "_ex_iterable", None)))
    names = {type(node).__name__ for node in nodes}
    if "BufferShuffledExamplesIterable" in names:
        return "the dataset has a shuffle buffer, whose elements HF's state_dict drops"
    for node in nodes:
        formatting = getattr(node, "formatting", None)
        if getattr(node, "batched", False) and getattr(formatting, "format_type", None) == "arrow":
            return "a batched map over Arrow-formatted data may skip a batch on HF's resume"
    version = tuple(int(part) for part in datasets.__version__.split(".")[:3] if part.isdigit())
    if "FilteredExamplesIterable" in names and version < (5, 0, 1):
        return (
            f"datasets {datasets.__version__} loses elements when resuming after a filter "
            "(fixed in 5.0.1)"
        )
    return None


class HFIterDataset(IterDataset[Any]):
    """A HuggingFace streaming dataset, sharded over hosts and workers, resuming exactly.

    Args:
      dataset: a `datasets.IterableDataset` (``load_dataset(..., streaming=True)``
        or ``Dataset.to_iterable_dataset(num_shards=...)``), with any HF
        transformations (map, filter, ...) already applied.
      shard_options: which share this host reads; None reads all of it.
      resume: "auto" restores with HF's own state_dict where that is exact
        and replays otherwise; "state_dict" always uses HF's state (a shuffle
        buffer's elements are then lost, as in HF); "replay" always replays.

    See the module docstring for how it shards and resumes. The state is
    ``{"hf": HF's state_dict or None, "read": elements read}``.

    Example::

        hf = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        ds = grain.experimental.HFIterDataset(hf.filter(keep), shard_options=options)
        ds = ds.map(tokenize).batch(8)
    """

    def __init__(
        self,
        dataset: Any,
        *,
        shard_options: ShardOptions | None = None,
        resume: str = "auto",
    ):
        super().__init__()
        datasets = _datasets()
        if isinstance(dataset, datasets.Dataset):
            raise TypeError(
                "HFIterDataset takes a streaming datasets.IterableDataset; this is a map-style "
                "datasets.Dataset: read it with grain.MapDataset.source(dataset), or stream it "
                "with HFIterDataset(dataset.to_iterable_dataset(num_shards=...))."
            )
        if not isinstance(dataset, datasets.IterableDataset):
            raise TypeError(
                "`dataset` must be a datasets.IterableDataset (load_dataset(..., "
                f"streaming=True)), got {type(dataset).__name__}."
            )
        if shard_options is None:
            shard_options = NoSharding()
        if not isinstance(shard_options, ShardOptions):
            raise TypeError(
                "`shard_options` must be a grain.sharding.ShardOptions, got "
                f"{type(shard_options).__name__}."
            )
        if resume not in _RESUME_MODES:
            raise ValueError(f"`resume` must be one of {_RESUME_MODES}, got {resume!r}.")
        self._hf = dataset
        self._shard_options = shard_options
        reason = _inexact_reason(dataset) if resume == "auto" else None
        if resume == "replay":
            reason = 'resume="replay" was asked for'
        # None: restore with HF's state_dict; else why a restore replays.
        self._replay_reason = reason

    @property
    def hf_dataset(self) -> Any:
        """The wrapped `datasets.IterableDataset`."""
        return self._hf

    @property
    def replays_on_restore(self) -> bool:
        """Whether `set_state` replays the stream instead of loading HF's state."""
        return self._replay_reason is not None

    def _piece(self, shares: list[tuple[int, int]], warn: bool = True) -> tuple[Any, int, int]:
        """(the HF dataset one reader iterates, and the offset and stride of the elements it keeps).

        `shares` are (index, count) pairs, the host's then the worker's: each
        takes its piece of the previous one, so a host's workers together read
        exactly the host's piece.
        """
        hf, offset, stride = self._hf, 0, 1
        for index, count in shares:
            if count == 1:
                continue
            if stride == 1:
                if hf.num_shards < count and hasattr(hf, "reshard"):  # recent datasets only
                    hf = hf.reshard()  # Parquet: one HF shard per row group
                if hf.num_shards >= count:
                    hf = hf.shard(num_shards=count, index=index, contiguous=True)
                    continue
                if warn:
                    self._warn_stride(hf.num_shards, count)
            offset, stride = offset + stride * index, stride * count
        if hf is self._hf:
            hf = copy.deepcopy(hf)  # HF keeps its iteration state on the dataset object
        return hf, offset, stride

    @staticmethod
    def _warn_stride(shards: int, count: int) -> None:
        warnings.warn(
            f"HFIterDataset: the HF dataset has {shards} shard(s) (files, or Parquet "
            f"row groups) for {count} readers (hosts, or mp_prefetch workers of a host), so "
            f"each reads all of it and keeps every {count}-th element: {count} times the "
            "reading. Write more files or row groups, or read the files with "
            "grain.experimental.ShardedParquetIterDataset (record-range shards).",
            stacklevel=3,
        )

    def __iter__(self) -> DatasetIterator[Any]:
        return _HFIterator(self)

    def __repr__(self) -> str:
        options = self._shard_options
        return (
            f"HFIterDataset({self._hf.num_shards} HF shards, shard "
            f"{options.shard_index} of {options.shard_count})"
        )


class _HFIterator(DatasetIterator[Any]):
    def __init__(self, dataset: HFIterDataset):
        super().__init__()
        self._dataset = dataset
        options = dataset._shard_options
        self._shares = [(options.shard_index, options.shard_count)]
        worker_slice = self._ctx.worker_slice
        if worker_slice is not None:
            self._shares.append(worker_slice[:2])
        self._piece, self._offset, self._stride = dataset._piece(self._shares)
        self._stream: Iterator[Any] | None = None
        self._read = 0  # elements of the piece's stream read
        self._loaded: dict[str, Any] | None = None  # HF state loaded, until reading starts

    def _open(self) -> Iterator[Any]:
        if self._stream is None:
            self._stream = iter(self._piece)
        return self._stream

    def __next__(self) -> Any:
        stream = self._open()
        self._loaded = None
        while True:
            element = next(stream)
            self._read += 1
            if self._stride == 1 or (self._read - 1) % self._stride == self._offset:
                return element

    def get_state(self) -> dict[str, Any]:
        hf: dict[str, Any] | None = None
        if self._dataset._replay_reason is None:
            hf = self._loaded if self._stream is None else self._piece.state_dict()
        return {"hf": hf, "read": self._read}

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("hf", "read"), nested=("hf",))
        hf_state, read = state["hf"], state["read"]
        self._close_stream()
        self._piece, _, _ = self._dataset._piece(self._shares, warn=False)
        self._read, self._loaded = 0, None
        reason = self._dataset._replay_reason
        if reason is None and hf_state is None and read:
            reason = "the state holds no HF state_dict (it was saved with a replaying dataset)"
        if reason is None:
            if hf_state is not None:
                if not isinstance(hf_state, dict):
                    raise ValueError(
                        f"state['hf'] of {stage} must be HF's state_dict (a dict), got "
                        f"{type(hf_state).__name__}: restore a state this pipeline saved."
                    )
                self._piece.load_state_dict(hf_state)
                self._loaded = hf_state
            self._read = read
            return
        if read:
            warnings.warn(
                f"HFIterDataset resumes by replay: it reads and discards the {read} element(s) "
                f"before the saved position (reading and every HF map/filter run again for "
                f"them) because {reason}.",
                stacklevel=2,
            )
        stream = self._open()
        for _ in range(read):
            try:
                next(stream)
            except StopIteration:
                raise ValueError(
                    f"state {state!r} does not fit {stage}: its stream ends after "
                    f"{self._read} element(s), before the saved position {read}."
                ) from None
            self._read += 1

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        self._close_stream()
