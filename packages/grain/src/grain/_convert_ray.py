"""The `ray` executor: one Ray task per shard of our plan (never Ray's own block layout).

Each task runs the same `run_shard` as the local executor, so the bytes of a
shard do not depend on where it ran. A task whose worker process or node dies
is retried by Ray (`max_retries`); an error of the data (a bad record) is not
retried: it fails the run with the task's own message. The driver connects
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

from grain._convert_errors import ConversionError
from grain._convert_task import run_shard

INSTALL = "pip install 'grain[ray]'"


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
            f"--executor ray needs Ray, which is not installed: {INSTALL} (or pip install ray)"
        ) from None
    return ray


def _task(job: dict[str, Any], shard: dict[str, Any]) -> dict[str, Any]:
    return run_shard(job, shard)


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
    """Runs every shard as a Ray task; ``events.done(index, marker)`` as each finishes."""
    if not shards:
        return
    with connected(address, workers) as (ray, ours):
        remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(_task)
        job_ref = ray.put(job)
        running = {remote.remote(job_ref, shard): shard for shard in shards}
        try:
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    shard = running.pop(ref)
                    events.done(shard["index"], _result(ray, ref, shard))
        finally:
            # An error or Ctrl-C. Our own connection's shutdown ends the job's tasks; a
            # forced cancel racing a task's completion can abort the driver (seen with
            # Ray 2.60), so only tasks on a Ray the caller keeps are cancelled, gently.
            if not ours:
                for ref in running:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref)


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
