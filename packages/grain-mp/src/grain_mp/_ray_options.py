"""RayWorkers: where mp_prefetch's workers run when they run on a Ray cluster.

A plain dataclass, importable without Ray: the executor that uses it
(`grain_mp._ray_executor`) imports ray only when a pipeline starts its workers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from grain_index import checks


@dataclasses.dataclass(frozen=True)
class RayWorkers:
    """Runs mp_prefetch's workers on actors of a Ray cluster instead of local processes.

    Give it as ``MultiprocessingOptions(num_workers=n, executor=RayWorkers(...))``:
    worker w of n then runs on a Ray actor, possibly on another machine, and
    computes exactly what local worker process w would. The stream and the
    checkpoints are those of local workers: over a positional pipeline (one
    ``to_iter_dataset``, then per-element stages and batching) a checkpoint
    taken with n actors restores with any number of actors, of local
    processes, or with none. An actor that dies (its process killed, its node
    lost) is replaced and continues from the last element the consumer
    received from it. Needs ``pip install "grain-mp[ray]"``.

    Args:
      address: the cluster to connect to when this process is not connected to
        Ray yet: ``"auto"``, ``"host:port"`` of a ``ray start --head``, or
        ``"ray://host:10001"`` (Ray Client). None: ``RAY_ADDRESS`` if set, else a
        new local cluster. A process already connected (``ray.init`` called)
        keeps its connection.
      num_cpus: CPUs each actor reserves (fractions allowed).
      runtime_env: Ray's runtime environment for the actors (``working_dir``,
        ``py_modules``, ``pip`` ...), which a remote cluster needs to import the
        pipeline's own modules. Its ``env_vars`` are merged under ours, which
        hide accelerators (``grain_mp.worker_env``).
      max_bytes_in_flight: bytes of finished elements requested from the actors
        and not yet handed to the consumer, over all actors (each call asks for
        a share and may overshoot it by one element).
      start_timeout_s: how long the cluster may take to start the actors (or a
        replacement); past it, a RuntimeError says which resources were missing.
      max_restarts: how many times each worker's actor may be replaced in one
        run before the error is raised.
      spread: place the actors on as many nodes as possible (Ray's "SPREAD"
        strategy); False packs them (Ray's default).
      keep_actors_s: how long an actor stays alive, idle, after its iterator
        stops (closed, exhausted, or restored with `set_state`), for the next
        iterator or restore with the same cluster, ``num_cpus``, ``runtime_env``
        and ``spread`` to reuse instead of starting one (seconds saved per start).
        It is reset first: the previous pipeline and all it held are dropped. 0
        kills actors when their iterator stops. Idle actors hold their CPUs:
        `release_idle_actors` frees them at once.

    Example::

        options = grain.MultiprocessingOptions(
            num_workers=8, executor=grain.experimental.RayWorkers(address="auto")
        )
        ds = ds.mp_prefetch(options)
    """

    address: str | None = None
    num_cpus: float = 1.0
    runtime_env: Mapping[str, Any] | None = None
    max_bytes_in_flight: int = 256 * 1024 * 1024
    start_timeout_s: float = 120.0
    max_restarts: int = 3
    spread: bool = True
    keep_actors_s: float = 60.0

    @staticmethod
    def release_idle_actors() -> int:
        """Kills the idle actors kept for reuse (see `keep_actors_s`); returns how many.

        Also done at interpreter exit, and for actors idle longer than their
        ``keep_actors_s``.
        """
        from grain_mp import _ray_pool

        return _ray_pool.release_idle()

    def __post_init__(self) -> None:
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(f"`RayWorkers.address` must be a str or None, got {self.address!r}.")
        if (
            isinstance(self.num_cpus, bool)
            or not isinstance(self.num_cpus, int | float)
            or not self.num_cpus >= 0
        ):
            raise ValueError(
                f"`RayWorkers.num_cpus` must be a number >= 0 (CPUs per actor), "
                f"got {self.num_cpus!r}."
            )
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            raise TypeError(
                f"`RayWorkers.runtime_env` must be a dict (Ray's runtime_env) or None, "
                f"got {self.runtime_env!r}."
            )
        checks.int_in_range(self.max_bytes_in_flight, "RayWorkers.max_bytes_in_flight", 1)
        if (
            isinstance(self.start_timeout_s, bool)
            or not isinstance(self.start_timeout_s, int | float)
            or not (self.start_timeout_s > 0 and math.isfinite(self.start_timeout_s))
        ):
            raise ValueError(
                "`RayWorkers.start_timeout_s` must be a finite number of seconds > 0, "
                f"got {self.start_timeout_s!r}."
            )
        checks.int_in_range(self.max_restarts, "RayWorkers.max_restarts", 0)
        if (
            isinstance(self.keep_actors_s, bool)
            or not isinstance(self.keep_actors_s, int | float)
            or not (self.keep_actors_s >= 0 and math.isfinite(self.keep_actors_s))
        ):
            raise ValueError(
                "`RayWorkers.keep_actors_s` must be a finite number of seconds >= 0 (0: no "
                f"reuse), got {self.keep_actors_s!r}."
            )
        if not isinstance(self.spread, bool):
            raise TypeError(f"`RayWorkers.spread` must be a bool, got {self.spread!r}.")
