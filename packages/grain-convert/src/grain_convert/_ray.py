"""The `ray` executor: one Ray task per shard of our plan (never Ray's own block layout).

Each task runs the same `run_shard` as the local executor, so the bytes of a
shard do not depend on where it ran. A task whose worker process or node dies
is retried by Ray (`max_retries`); an error of the data (a bad record) is not
retried: it fails the run with the task's own message. Tasks report the
records they have written to a small actor (no CPU of its own), which the
driver reads twice a second for the progress bar; without a bar (progress
off) there is no actor, whose process costs seconds to start. The driver connects
to the cluster at `address` (a running cluster, "auto", or ``ray://``), or,
without one, starts a local cluster for the run and shuts it down after it; a
Ray already initialized by the caller is used as it is and left running.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from grain_convert._errors import ConversionError
from grain_convert._task import run_shard

# The face's extra names this one; users of the face know its name best.
INSTALL = "pip install 'grainline[ray]'"
# How often the driver looks at the progress of the running shards.
_PROGRESS_S = 0.5


def import_ray(local: bool = False) -> Any:
    """Ray, imported; for a `local` cluster, without its uv hook where Ray is not loaded yet.

    Ray's uv integration (read once, when ray is imported) ships the working
    directory to workers when the driver runs under `uv run` and starts them
    with `uv run`: seconds of start-up that a cluster on this same machine,
    running this same interpreter, does not need.
    """
    if local and "ray" not in sys.modules:
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError:
        raise ConversionError(
            f"--executor ray needs Ray, which is not installed: {INSTALL} "
            "(or pip install 'grain-convert[ray]', or pip install ray)"
        ) from None
    return ray


def _task(job: dict[str, Any], shard: dict[str, Any], progress: Any) -> dict[str, Any]:
    if progress is None:
        return run_shard(job, shard)
    index = shard["index"]
    # Fire and forget: run_shard reports about twice a second; nothing waits on the actor.
    return run_shard(job, shard, report=lambda records: progress.report.remote(index, records))


class _Progress:
    """A Ray actor holding the records each running shard has written, for the bar."""

    def __init__(self) -> None:
        self._records: dict[int, int] = {}

    def report(self, index: int, records: int) -> None:
        self._records[index] = records

    def take(self) -> dict[int, int]:
        """The reports since the last call."""
        records, self._records = self._records, {}
        return records


@contextlib.contextmanager
def connected(address: str | None, num_cpus: int | None) -> Iterator[tuple[Any, bool]]:
    """Ray, initialized for the run, and whether this started it (then it is shut down
    after the run, which ends the run's tasks)."""
    ray = import_ray(local=address is None)
    if ray.is_initialized():
        yield ray, False
        return
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    try:
        if address is None:
            # "local": a new cluster, even where a stale address file names another.
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **options)
        else:
            ray.init(address=address, **options)
    except ConnectionError as error:
        raise ConversionError(
            f"cannot connect to the Ray cluster at {address}: {error}; start one with "
            "`ray start --head`, or leave out --ray-address to start a local one"
        ) from None
    try:
        yield ray, True
    finally:
        ray.shutdown()


def run_ray(
    job: dict[str, Any],
    shards: list[dict[str, Any]],
    events: Any,
    *,
    address: str | None = None,
    workers: int | None = None,
    max_retries: int = 3,
) -> None:
    """Runs every shard as a Ray task; calls ``events.progress(index, records)`` about twice
    a second per running shard and ``events.done(index, marker)`` as each finishes."""
    if not shards:
        return
    with connected(address, workers) as (ray, ours):
        remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(_task)
        # Only for a bar that is drawn: the actor's process costs 1-3 s of start-up here.
        # No CPU of its own: it must not hold a slot that a shard task could use.
        progress = None
        if getattr(events, "shows_progress", True):
            progress = ray.remote(num_cpus=0)(_Progress).remote()
        job_ref = ray.put(job)
        running = {remote.remote(job_ref, shard, progress): shard for shard in shards}
        pending = None if progress is None else progress.take.remote()
        try:
            while running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=_PROGRESS_S)
                for ref in ready:
                    shard = running.pop(ref)
                    events.done(shard["index"], _result(ray, ref, shard))
                if pending is not None and ray.wait([pending], timeout=0)[0]:
                    pending = _show_progress(ray, progress, pending, running, events)
        finally:
            # An error or Ctrl-C. Our own connection's shutdown ends the job's tasks; a
            # forced cancel racing a task's completion can abort the driver (seen with
            # Ray 2.60), so only tasks on a Ray the caller keeps are cancelled, gently.
            if not ours:
                for ref in running:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)


def _show_progress(
    ray: Any, progress: Any, pending: Any, running: dict[Any, Any], events: Any
) -> Any:
    """Passes the actor's reports on; the next request to it, or None if it is gone."""
    try:
        reports = ray.get(pending)
    except ray.exceptions.RayError:
        return None  # the bar then moves by shards only; the shards are not at stake
    unfinished = {shard["index"] for shard in running.values()}
    for index, records in reports.items():
        if index in unfinished:  # a report can arrive after its shard's end
            events.progress(index, records)
    return progress.take.remote()


def _result(ray: Any, ref: Any, shard: dict[str, Any]) -> dict[str, Any]:
    try:
        return ray.get(ref)  # type: ignore[no-any-return]
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, ConversionError):
            raise ConversionError(str(cause)) from None
        raise ConversionError(f"writing {shard['name']} failed on Ray: {error}") from None
    except ray.exceptions.RayError as error:
        raise ConversionError(
            f"writing {shard['name']} failed on Ray after its retries: {error}"
        ) from None
