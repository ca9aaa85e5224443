"""grain_dataset.extension: what the packages built on grain_dataset use from it.

A pipeline's users need only `grain_dataset` (or `grain`). The packages above
it, grain-mp (worker processes, the DataLoader) and grain-jax (device
prefetch, Orbax checkpoints), build new stages and iterators that must behave
like the built-in ones; these are the pieces of the dataset layer they share:

  contract     StageTraits, MapTraits, IterStageTraits, IteratorTraits: every
               hook other modules read off a stage or an iterator (fingerprint,
               position-wise work, index mapping, interrupt, statistics,
               checkpoint files, fork safety...), each with its default and
               its rule, in one module (grain_dataset._common._contract). The bases
               below inherit them; a stage overrides a trait in its class body.
               DataLoader-like iterators that the guard serializes inherit
               IteratorTraits.
  stages       MapStage, the base of the built-in MapDataset stages: a stage
               writes ``_getitem(index)`` for one index >= 0 and gets
               `__getitem__` (negative indices, slices, checks) from it;
               IterStage and StageIterator, the bases of the IterDataset
               stages: a stage class and an iterator class marked
               ``@iterator_of(stage)``; both kinds describe their arguments
               in ``_describe()``, which their repr shows. `register(name)`
               attaches a builder to a base-class method (as
               `IterDataset.mp_prefetch` is attached); INFINITE, the length of
               an infinite MapDataset.
  resuming     Anchor (the parent's state where a stage last held nothing:
               save it with a count, restore it and replay), restore_all
               (every parent takes its state, or none does), check_below.
  states       check_state / check_parents_state: a state that is not the one
               the stage saved fails loudly (WrongTypeError, OutOfRangeError
               are the errors of these checks and of the stages' arguments).
  the guard    an iterator that its user may call from two threads takes a
               lock around its methods: `serialized` wraps a method,
               `add_lock` gives the iterator the lock; `closed_error` is the
               error of next() on a closed iterator; `interrupt` stops a
               pipeline's threads and workers while another thread waits in
               it; a wait polls every POLL_S seconds, and close() waits at most
               CLOSE_TIMEOUT_S for a call still running (see `_guard`'s design
               note for the whole contract).
  workers      iter_worker_slice(dataset, index, count, sequential): the
               iterator of a worker's pipeline, whose `to_iter_dataset`
               stages (those it creates later included) read the worker's
               slice of the positions; other pipelines of the process read
               everything.
               positional_split(dataset): a pipeline under mp_prefetch cut into
               the units its workers compute position by position (a
               MapDataset) and the stages that run on their merged stream
               (`PositionalSplit.assemble`), None if it is not positional;
               drops_positions(map_dataset): whether a stage can leave a
               position empty (a filter).
  batches      set_batch_allocator(allocator): the memory the default batch_fn
               stacks large arrays into, for this process (grain-mp's workers
               hand out shared memory, so a batch is not copied again to
               travel); batch_allocator() reads it; BatchAllocator, its type.
  sources      reads_in_batches(source): whether a source may be read with
               `__getitems__` (its class declares ``batched_reads = True``);
               every stage that reads a user's source decides with it, once
               per source, so all of them read what ``source[i]`` gives.
  fingerprint  pipeline_fingerprint(dataset): the text a checkpoint file carries
               under "grain_fingerprint" beside the state (states of
               ``iter(dataset)`` have Grain's shapes, without it);
               remember_dataset(iterator, dataset, stamp=True): an iterator
               not made by ``iter(dataset)`` (ElasticIterator, the DataLoader's
               pipeline) gets its fingerprint written into its state files and,
               with `stamp`, into its dict states, and checked on restore.
  registries   WeakRegistry: live objects held weakly, which an exit hook or a
               monitor lists while other threads add more (a WeakSet raises
               there).
  state files  the checkpoint files (one JSON file per process, with a format
               marker): state_to_text, write_state, read_state_into, and the
               Orbax-shaped save_coroutine / load_coroutine, for any
               Checkpointable (get_state/set_state) and a Directory (a path or
               a path object of another library, epath's). An iterator class
               with ``_restores_from_all_shards = True`` (IteratorTraits) is given
               the list of all old processes' states when its own file is
               missing. grain-jax's
               CheckpointHandler and `DatasetIterator.save/load` share them, so
               a checkpoint written by one is read by the other.

Stability: a semi-public extension surface, not part of Grain's API. Its names
and signatures change only in a new minor version of grain-dataset, said in its
changelog, and the packages that use it pin grain-dataset to a compatible
version. Everything else in grain_dataset's ``_private`` modules may change in
any release: another package imports it from here, never from there (a test,
packages/grain/tests/test_layering.py, enforces it).
"""

from grain_dataset._common._batch_memory import BatchAllocator as BatchAllocator
from grain_dataset._common._batch_memory import batch_allocator as batch_allocator
from grain_dataset._common._batch_memory import set_batch_allocator as set_batch_allocator
from grain_dataset._common._contract import IteratorTraits as IteratorTraits
from grain_dataset._common._contract import IterStageTraits as IterStageTraits
from grain_dataset._common._contract import MapTraits as MapTraits
from grain_dataset._common._contract import PositionKind as PositionKind
from grain_dataset._common._contract import StageTraits as StageTraits
from grain_dataset._common._errors import OutOfRangeError as OutOfRangeError
from grain_dataset._common._errors import WrongTypeError as WrongTypeError
from grain_dataset._common._weak_registry import WeakRegistry as WeakRegistry
from grain_dataset._core._base import INFINITE as INFINITE
from grain_dataset._core._base import register as register
from grain_dataset._core._iter_stage import Anchor as Anchor
from grain_dataset._core._iter_stage import IterStage as IterStage
from grain_dataset._core._iter_stage import StageIterator as StageIterator
from grain_dataset._core._iter_stage import check_below as check_below
from grain_dataset._core._iter_stage import iterator_of as iterator_of
from grain_dataset._core._iter_stage import restore_all as restore_all
from grain_dataset._core._stage import MapStage as MapStage
from grain_dataset._core._state import check_parents_state as check_parents_state
from grain_dataset._core._state import check_state as check_state
from grain_dataset._core._worker_slice import iter_worker_slice as iter_worker_slice
from grain_dataset._iter_stages._positional import PositionalSplit as PositionalSplit
from grain_dataset._iter_stages._positional import drops_positions as drops_positions
from grain_dataset._iter_stages._positional import positional_split as positional_split
from grain_dataset._runtime._fingerprint import fingerprint as pipeline_fingerprint
from grain_dataset._runtime._fingerprint import remember_dataset as remember_dataset
from grain_dataset._runtime._guard import CLOSE_TIMEOUT_S as CLOSE_TIMEOUT_S
from grain_dataset._runtime._guard import POLL_S as POLL_S
from grain_dataset._runtime._guard import add_lock as add_lock
from grain_dataset._runtime._guard import closed_error as closed_error
from grain_dataset._runtime._guard import interrupt as interrupt
from grain_dataset._runtime._guard import serialized as serialized
from grain_dataset._runtime._state_file import Checkpointable as Checkpointable
from grain_dataset._runtime._state_file import Directory as Directory
from grain_dataset._runtime._state_file import load_coroutine as load_coroutine
from grain_dataset._runtime._state_file import read_state_into as read_state_into
from grain_dataset._runtime._state_file import save_coroutine as save_coroutine
from grain_dataset._runtime._state_file import state_to_text as state_to_text
from grain_dataset._runtime._state_file import write_state as write_state
from grain_sources import reads_in_batches as reads_in_batches

__all__ = [
    "CLOSE_TIMEOUT_S",
    "INFINITE",
    "POLL_S",
    "Anchor",
    "BatchAllocator",
    "Checkpointable",
    "Directory",
    "IterStage",
    "IterStageTraits",
    "IteratorTraits",
    "MapStage",
    "MapTraits",
    "OutOfRangeError",
    "PositionKind",
    "PositionalSplit",
    "StageIterator",
    "StageTraits",
    "WeakRegistry",
    "WrongTypeError",
    "add_lock",
    "batch_allocator",
    "check_below",
    "check_parents_state",
    "check_state",
    "closed_error",
    "drops_positions",
    "interrupt",
    "iter_worker_slice",
    "iterator_of",
    "load_coroutine",
    "pipeline_fingerprint",
    "positional_split",
    "read_state_into",
    "reads_in_batches",
    "register",
    "remember_dataset",
    "restore_all",
    "save_coroutine",
    "serialized",
    "set_batch_allocator",
    "state_to_text",
    "write_state",
]
