"""The environment our worker processes start with: accelerators hidden.

A worker runs the data pipeline on CPUs. But once a transformation imports
JAX (or torch, or TensorFlow) and touches it, the runtime in that worker
claims the accelerator like any other process: on a GPU that is a CUDA context
of about half a gigabyte per worker, taken from the trainer; on a TPU, the
worker can take the chips' lock. So every worker process this library starts
(`mp_prefetch`, the DataLoader's and ElasticIterator's workers, `grain
convert`'s local workers) sets, before it unpickles or runs any user code:

  JAX_PLATFORMS=cpu        JAX creates only its CPU client: no CUDA, ROCm or
                           TPU client, which is what holds device memory or
                           the TPU's lock (a plugin's library may still load)
  CUDA_VISIBLE_DEVICES=""  the CUDA runtime sees no GPU (torch, TensorFlow,
                           CuPy; HIP reads it too)
  HIP_VISIBLE_DEVICES=""   the same for AMD's HIP runtime

and, where jax is already imported in the worker (a forked worker of a parent
that imported it, or a module that imports it at unpickling), sets
``jax.config.jax_platforms`` to "cpu" as well, since jax reads the variable
only when it is imported.

These values win over the parent's: a trainer's ``JAX_PLATFORMS=cuda`` or
``CUDA_VISIBLE_DEVICES=0`` says which devices the trainer uses, not that its
data workers should take a share of them. The parent's environment is never
changed.

Opt out with ``GRAIN_WORKERS_SEE_ACCELERATORS=1`` (in the parent's
environment, read each time workers start): the workers then inherit the
parent's values of these variables, whatever they say (also under forkserver,
whose server may have started with an older environment). An environment variable,
because it reaches every place workers start from (mp_prefetch, DataLoader,
ElasticIterator, the conversion engine) without adding arguments to Grain's
signatures, and is set where deployments are configured, as
``GRAIN_MP_START_METHOD`` is.

Limits. A forked worker copies its parent: if jax in the parent had already
created its backends (a GPU client, say) before the workers forked, the worker
holds those, and no setting changes them; it creates no new client (so it
takes no more device memory), but jax calls in it use a client that does not
survive fork. A pipeline that calls jax in its workers should start them with
``GRAIN_MP_START_METHOD=forkserver`` (or ``spawn``). With ``spawn``, the main
script runs again in each worker before our code: what it does at import time
(outside ``if __name__ == "__main__":``) runs with the parent's environment.

This module is a public extension surface of grain_mp for the packages above
it (the `grain` package's conversion engine); `HIDDEN` and the variable's name
are documented behaviour, the functions may change with grain_mp's minor
versions.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "HIDDEN",
    "SEE_ACCELERATORS_ENV",
    "enter_worker",
    "entry",
    "for_workers",
    "workers_see_accelerators",
]

SEE_ACCELERATORS_ENV = "GRAIN_WORKERS_SEE_ACCELERATORS"
"""Set to 1 (true, yes, on) in the parent to let workers see its accelerators."""

HIDDEN: Mapping[str, str] = {
    "JAX_PLATFORMS": "cpu",
    "CUDA_VISIBLE_DEVICES": "",
    "HIP_VISIBLE_DEVICES": "",
}
"""What every worker sets in its environment unless the user opts out."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def workers_see_accelerators() -> bool:
    """Whether ``GRAIN_WORKERS_SEE_ACCELERATORS`` asks for workers that see accelerators."""
    raw = os.environ.get(SEE_ACCELERATORS_ENV, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{SEE_ACCELERATORS_ENV}={raw!r} is not a yes or no: set it to 1 to let grain's "
        "worker processes use the accelerators (GPU, TPU) that this process sees, or "
        "unset it (or 0) to keep them on the CPU, the default."
    )


def for_workers() -> dict[str, str | None]:
    """The variables a worker started now sets first (None: unset there).

    `HIDDEN`, or, when opted out, this process's own values of those variables:
    a forkserver's children inherit the environment the server started with,
    which may be older than this process's, so the values travel with the call.
    """
    if workers_see_accelerators():
        return {name: os.environ.get(name) for name in HIDDEN}
    return dict(HIDDEN)


def enter_worker(settings: Mapping[str, str | None]) -> None:
    """Applies `settings` (from `for_workers`, read in the parent) in a worker process.

    Call it first in the worker, before anything of the user's runs there.
    """
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    platforms = settings.get("JAX_PLATFORMS")
    jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if platforms is not None and config is not None:
        # Imported before our settings (forked, or by an import at unpickling): jax
        # read JAX_PLATFORMS then. Harmless where its backends already exist.
        config.update("jax_platforms", platforms)


def _run(
    settings: Mapping[str, str | None], target: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    enter_worker(settings)
    return target(*args, **kwargs)


def entry(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target` as a worker's entry point that first applies `for_workers()`.

    The environment is read now, in the parent (a bad opt-out value raises
    here); the result pickles wherever `target` does (a module-level function),
    so it serves every start method::

        process = ctx.Process(target=worker_env.entry(worker_main), args=(...))
    """
    return functools.partial(_run, for_workers(), target)
