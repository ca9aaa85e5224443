"""How mp_prefetch starts its workers: fork, or a clean process when fork is unsafe.

Fork is the fast default: a worker inherits the imported modules and the
pipeline, so the first element does not wait for a fresh interpreter. It is
unsafe for a few native libraries whose background threads do not exist in the
child while their locks and wait lists do. ArrayRecord's reader (riegeli) is
the one our users meet: once the parent has opened an ArrayRecord file (which
building an `ArrayRecordDataSource` already does), a forked worker that reads
one crashes with SIGSEGV or hangs, almost always when it reads from threads.

So with ``GRAIN_MP_START_METHOD`` unset, a pipeline that reads ArrayRecord
files starts its workers from Python's fork server (a process started early,
that never opened a file), and every other pipeline forks. The variable forces
one method for every pipeline: ``fork``, ``forkserver`` or ``spawn``.

Without fork the pipeline travels pickled, by cloudpickle: lambdas and
functions and classes of the main script travel by value. So a worker needs
nothing of the main script, and a worker started by the fork server does not
import it again (multiprocessing's default, which makes a script without an
``if __name__ == "__main__":`` guard start its pipeline once more in every
worker and fail): the fork server preloads this module, whose hook on
`multiprocessing.spawn.prepare` leaves the main script out for processes named
as our workers, and no other. The preload also makes a worker start in
milliseconds after the server's first start. Workers started by ``spawn``
(only when asked for) import the main script as multiprocessing always does.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from grain_dataset import IterDataset, MapDataset
from grain_dataset.extension import StageTraits

START_METHOD_ENV = "GRAIN_MP_START_METHOD"
WORKER_NAME = "grain-worker"
"""The name of every worker process, followed by "-<index>"."""
# Imported once by the fork server, so that the workers it forks find them loaded.
# Not "__main__" (multiprocessing's default): a script's top level must not run there.
_SERVER_PRELOAD = ["grain_mp._mp_prefetch", "grain_sources"]
_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
# Attributes of a source object looked into for a fork-unsafe reader (TFDS wraps one).
_MAX_SCAN = 64


def _install_prepare_hook() -> None:
    """Our workers skip re-importing the main script (see the module docstring)."""
    from multiprocessing import spawn

    original = getattr(spawn, "prepare", None)
    if original is None or getattr(original, "_grain_hook", False):
        return

    def prepare(data: Mapping[str, Any]) -> None:
        if str(data.get("name", "")).startswith(WORKER_NAME + "-"):
            data = {key: value for key, value in data.items() if key not in _MAIN_KEYS}
        original(data)

    prepare._grain_hook = True  # type: ignore[attr-defined]
    spawn.prepare = prepare


# Only matters in the fork server (which preloads this module) and its children.
_install_prepare_hook()


def requested_method() -> str | None:
    """The start method ``GRAIN_MP_START_METHOD`` names, checked; None when unset."""
    method = os.environ.get(START_METHOD_ENV)
    if not method:
        return None
    if method not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"{START_METHOD_ENV}={method!r} is not a start method here: use one of "
            f"{multiprocessing.get_all_start_methods()}, or unset it."
        )
    return method


# Readers of packages we do not own, which cannot declare `_grain_fork_unsafe`: the
# array-record package's own reader and data source (TFDS's data sources hold them).
_FORK_UNSAFE_PACKAGES = ("array_record.",)


def _is_fork_unsafe(value: Any) -> bool:
    """Whether `value` is a reader that does not survive fork: its class declares
    ``_grain_fork_unsafe = True`` (grain_sources.ArrayRecordDataSource does), or it
    comes from one of `_FORK_UNSAFE_PACKAGES`."""
    cls = type(value)
    if getattr(cls, "_grain_fork_unsafe", False) is True:
        return True
    return (getattr(cls, "__module__", None) or "").startswith(_FORK_UNSAFE_PACKAGES)


def _nodes(dataset: Any) -> Iterator[Any]:
    """`dataset` and every dataset it is built from (parents, and datasets it holds)."""
    seen: set[int] = set()
    pending = [dataset]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        pending.extend(getattr(node, "_parents", ()))
        # E.g. the MapDataset that to_iter_dataset reads.
        pending.extend(
            value
            for value in getattr(node, "__dict__", {}).values()
            if isinstance(value, (MapDataset, IterDataset))
        )


def fork_unsafe_reader(dataset: Any) -> str | None:
    """The type name of a reader in `dataset` that does not survive fork, or None."""
    for node in _nodes(dataset):
        for value in getattr(node, "__dict__", {}).values():
            if _is_fork_unsafe(value):
                return type(value).__name__
            if isinstance(value, (MapDataset, IterDataset)):
                continue
            # A source that wraps another one (TFDS's data sources wrap ArrayRecord's).
            inner = getattr(value, "__dict__", None)
            if isinstance(inner, dict) and len(inner) <= _MAX_SCAN:
                for member in inner.values():
                    if _is_fork_unsafe(member):
                        return f"{type(value).__name__} (over {type(member).__name__})"
    return None


def choose_method(dataset: Any) -> tuple[str, str | None]:
    """(start method, the fork-unsafe reader that chose it or None) for `dataset`."""
    method = requested_method()
    if method is not None:
        return method, None
    reader = fork_unsafe_reader(dataset)
    if reader is None or "forkserver" not in multiprocessing.get_all_start_methods():
        return "fork", None
    return "forkserver", reader


def dumps(payload: Any) -> bytes:
    """`payload` pickled for a worker that did not fork (lambdas included)."""
    return cloudpickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def _unpicklable_stage(dataset: Any) -> tuple[Any, BaseException] | None:
    for stage in reversed(list(_nodes(dataset))):  # sources first: the first failure is it
        try:
            dumps(stage)
        except Exception as error:
            return stage, error
    return None


def pickled(dataset: Any, worker_init_fn: Any, why: str) -> bytes:
    """`(dataset, worker_init_fn)` pickled for the workers, once for all their starts.

    Raises a TypeError naming the first stage (from the source) that cannot be
    pickled; `why` says why the pipeline must be (the start method and its cause).
    """
    try:
        return dumps((dataset, worker_init_fn))
    except Exception as error:  # pickling raises many types: name the culprit instead
        first_error = error
    found = _unpicklable_stage(dataset)
    if found is None:
        raise TypeError(
            f"mp_prefetch cannot pickle `worker_init_fn` {worker_init_fn!r} ({why}): "
            f"{type(first_error).__name__}: {first_error}"
        ) from first_error
    stage, cause = found
    raise TypeError(
        f"mp_prefetch must pickle the pipeline for its worker processes ({why}), but the "
        f"stage {stage!r} cannot be pickled ({type(cause).__name__}: {cause}). Keep open "
        "files, locks and generators out of the pipeline's transformations (open them "
        "lazily, in the worker), or fork the workers: "
        f"{START_METHOD_ENV}=fork."
    ) from cause


def context(method: str) -> Any:
    """The multiprocessing context for `method`; the fork server preloads grain."""
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        # Only takes effect when the server starts (once per process).
        ctx.set_forkserver_preload(_SERVER_PRELOAD)
    return ctx


def check_not_nested(parent: Any) -> None:
    """Refuses to build mp_prefetch over a pipeline that already has one.

    Its workers would run the inner mp_prefetch, whose workers they cannot start
    (see `check_can_start_workers`); said here, the error comes when the
    pipeline is built, in the user's process, not from inside a worker.
    """
    for node in _nodes(parent):
        if isinstance(node, StageTraits) and node._starts_worker_processes:
            raise ValueError(
                f"mp_prefetch over a pipeline that already has an mp_prefetch ({node!r}): "
                "its worker processes would have to start worker processes of their own, "
                "which Python does not allow (workers are daemon processes). Use one "
                "mp_prefetch: move the stages between the two before it and give it the "
                "workers of both (MultiprocessingOptions(num_workers=...)); to run the "
                "later stages beside the workers, use threads instead: "
                "grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=...)."
            )


def check_can_start_workers() -> None:
    """Raises a clear error where Python would fail to start a worker process.

    A daemon process may not have children (multiprocessing asserts it, with a
    message that names neither grain nor the fix). Our workers are daemons, so
    this is what a pipeline iterated inside a worker (in a map function, say)
    meets when it has workers of its own.
    """
    process = multiprocessing.current_process()
    if not process.daemon:
        return
    if process.name.startswith(WORKER_NAME + "-"):
        where = f"inside the grain worker process {process.name!r}"
        how = (
            "a pipeline run by mp_prefetch (or by a DataLoader with worker_count > 0) "
            "iterates, in one of its functions, another pipeline with mp_prefetch or a "
            "DataLoader with workers"
        )
    else:
        where = f"inside the daemon process {process.name!r}"
        how = (
            "a pipeline with workers is iterated in a daemon process (a "
            "multiprocessing.Pool worker, say)"
        )
    raise RuntimeError(
        f"mp_prefetch cannot start worker processes {where}: daemon processes may not "
        f"have children. This happens when {how}. Give the inner pipeline no workers "
        "(MultiprocessingOptions(num_workers=0), or DataLoader(worker_count=0)), or read "
        "ahead with threads there (grain.experimental.ThreadPrefetchIterDataset)."
    )


def start_failed(error: BaseException, method: str, cause: str) -> RuntimeError:
    """The error for workers that the `method` start method (chosen `cause`) could not start."""
    return RuntimeError(
        f"mp_prefetch could not start its worker processes with the {method!r} start "
        f"method ({cause}): {type(error).__name__}: {error}. Workers started without "
        "fork import the main script again: build and iterate the pipeline under "
        "`if __name__ == '__main__':` in your script."
    )


def warn_forking_anyway(reader: str, error: BaseException) -> None:
    warnings.warn(
        f"mp_prefetch forks its workers although the pipeline reads {reader}, whose "
        "native reader can crash or hang in forked workers: the pipeline cannot be "
        f"pickled for the fork server ({error}).",
        RuntimeWarning,
        stacklevel=4,
    )
