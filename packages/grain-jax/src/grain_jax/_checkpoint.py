"""Saving data iterators in Orbax checkpoints, next to the model.

Why: a training job that restores its model but restarts its data pipeline
trains on the first examples again. With this handler the iterator's position
goes into the same Orbax step as the parameters and comes back with them::

    mngr = ocp.CheckpointManager(path)
    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(params), data_iter=CheckpointSave(it)))
    mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_params),
        data_iter=CheckpointRestore(fresh_it)))

It works for `DatasetIterator`s (state: a dict) and DataLoader iterators
(state: JSON bytes), and for anything else with ``get_state``/``set_state``
whose state is a JSON-serializable dict, JSON bytes or a JSON str.

Each process writes its own ``process_<i>-of-<n>.json`` (the layout of
`grain_dataset._runtime._state_file`, shared with `DatasetIterator.save`): hosts read
different shards, so their positions differ. The state is read inside `save`,
which Orbax runs before `CheckpointManager.save` returns even with async
checkpointing; advancing the iterator right after the save does not change
what was saved. Restoring with another process count, or into a pipeline of
another shape, raises a ValueError naming the file and the mismatch instead of
resuming somewhere else.

This module imports orbax and jax; `import grain_jax` does not import it.
orbax-checkpoint is the `orbax` extra of grain-jax: it needs tensorstore, which
has no wheel for free-threaded CPython, so there this module raises an
ImportError that says so (see docs/freethreaded.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

try:
    import orbax.checkpoint as ocp
except ModuleNotFoundError as error:
    if (error.name or "").partition(".")[0] != "orbax":
        raise  # orbax is there but broken (e.g. tensorstore missing): that error, unchanged
    # An ImportError, not ModuleNotFoundError: grain's JAX-extra hint must not replace it.
    raise ImportError(
        "grain's Orbax handler (CheckpointSave, CheckpointRestore, CheckpointHandler) needs "
        f"orbax-checkpoint (no module named {error.name!r}): pip install 'grain-jax[orbax]'. "
        "orbax-checkpoint needs tensorstore, which has no wheel for free-threaded CPython; "
        "there, save the iterator's state with DatasetIterator.save or get_state().",
        name="orbax",
    ) from None

from grain_dataset.extension import read_state_into, state_to_text, write_state


def _process() -> tuple[int, int]:
    return jax.process_index(), jax.process_count()


def _check_item(item: Any, where: str) -> Any:
    if item is None:
        raise ValueError(
            f"{where} needs the iterator: pass it as CheckpointSave(iterator) / "
            "CheckpointRestore(iterator)."
        )
    if not (
        callable(getattr(item, "get_state", None)) and callable(getattr(item, "set_state", None))
    ):
        raise TypeError(
            f"{where} takes a data iterator with get_state() and set_state() (a DatasetIterator "
            f"or a DataLoader iterator), got {type(item).__name__}. Checkpoint arrays with "
            "ocp.args.StandardSave instead."
        )
    return item


class CheckpointHandler(ocp.CheckpointHandler):
    """An Orbax handler for data iterators; one JSON file per process.

    Use it through `CheckpointSave` / `CheckpointRestore`, which are
    registered with it, so a `CheckpointManager` finds it by itself.
    """

    def save(self, directory: Any, item: Any = None, args: CheckpointSave | None = None) -> None:
        """Writes the state of the iterator (``args.item``, or legacy `item`) into `directory`."""
        iterator = _check_item(args.item if args is not None else item, "CheckpointHandler.save")
        # The state is taken here, while Orbax's save() still blocks its caller.
        write_state(directory, state_to_text(iterator.get_state(), iterator), _process())

    def restore(
        self, directory: Any, item: Any = None, args: CheckpointRestore | None = None
    ) -> Any:
        """Sets the state saved in `directory` on the iterator and returns the iterator.

        Raises:
          ValueError: the checkpoint was written by another number of processes,
            or its state does not fit this iterator's pipeline.
          FileNotFoundError: `directory` holds no iterator state.
        """
        iterator = _check_item(args.item if args is not None else item, "CheckpointHandler.restore")
        read_state_into(directory, iterator, _process())
        return iterator

    def metadata(self, directory: Any) -> None:
        """Iterator checkpoints have no metadata to report."""
        return None

    def structure(self, directory: Any) -> None:
        """Iterator checkpoints have no tree structure to report (Orbax's legacy hook)."""
        return None

    def finalize(self, directory: Any) -> None:
        """Nothing to finalize: the file is complete when `save` returns."""

    def close(self) -> None:
        """Holds no resources."""


@ocp.args.register_with_handler(CheckpointHandler, for_save=True)
@dataclasses.dataclass
class CheckpointSave(ocp.args.CheckpointArgs):
    """Orbax save arguments for a data iterator: ``mngr.save(step, args=CheckpointSave(it))``.

    Attributes:
      item: the iterator (a DatasetIterator or a DataLoader iterator).
    """

    item: Any


@ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
@dataclasses.dataclass
class CheckpointRestore(ocp.args.CheckpointArgs):
    """Orbax restore arguments: ``mngr.restore(step, args=CheckpointRestore(it))``.

    The state is set on `item`, which the restore returns.

    Attributes:
      item: a fresh iterator of the same pipeline that saved the checkpoint.
    """

    item: Any
