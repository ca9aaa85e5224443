"""`grain.config`: process-wide settings, by name, as Grain's flags are.

Grain keeps its settings in absl flags (``--grain_py_debug_mode``) read
through ``grain.config``. Here they are plain values with the same names (the
flag name without its ``grain_`` prefix), set three ways, the later winning:

  the default                      shown in `Config.describe()`
  an environment variable          ``GRAIN_PY_DEBUG_MODE=1`` (the flag's name, upper case)
  ``grain.config.update(name, v)``  at run time, from this process

The settings that change behaviour here:

  py_debug_mode              every pipeline records per-stage statistics (as
                             ``ExecutionTrackingMode.STAGE_TIMING`` would), so
                             ``it.stats()`` and `grain.monitoring` see them
  py_traceback_filtering     how an error raised inside a pipeline shows our
                             own frames ("auto" and "remove_frames" drop them
                             and say so in a note, "quiet_remove_frames" and
                             "tracebackhide" drop them silently, "off" keeps all)
  py_worker_executor         what runs mp_prefetch's workers (and the DataLoader's,
                             ElasticIterator's): "processes", "threads", or "auto"
                             (the default: threads on a free-threaded interpreter
                             running without the GIL, processes otherwise). Ours;
                             Grain has no such flag

The others are accepted, checked and stored so that code written for Grain
runs, but change nothing here: they select Grain's TensorFlow backend, relay
SIGTERM from its workers, or write its pipeline graph (``str(ds)`` prints the
pipeline here). `docs/compatibility.md` lists them. The options are
Grain 0.2.18's, plus py_worker_executor: absl flags that are not among them (array_record's
``--grain_num_threads_fetching_records``, ``--grain_enable_multiprocess_worker_profiling``)
are unknown to `grain.config` there too.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from typing import Any


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
    elif isinstance(value, bool | int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"config option {name!r} must be a bool, got {value!r}.")


def _int(value: Any, name: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    exact = isinstance(value, str) or number == value
    if isinstance(value, bool) or number is None or not exact:
        raise ValueError(f"config option {name!r} must be an integer, got {value!r}.")
    return number


def _one_of(*choices: str) -> Callable[[Any, str], str]:
    """A parser of an option whose value is one of `choices` (any case, spaces around)."""

    def parse(value: Any, name: str) -> str:
        lowered = value.strip().lower() if isinstance(value, str) else None
        if lowered not in choices:
            raise ValueError(
                f"config option {name!r} must be one of {', '.join(choices)}, got {value!r}."
            )
        return lowered

    return parse


def _optional_str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str | os.PathLike):
        return None if value in (None, "") else os.fspath(value)
    raise ValueError(f"config option {name!r} must be a path or None, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class _Option:
    default: Any
    parse: Callable[[Any, str], Any]
    help: str
    effect: bool = True  # False: accepted for Grain's sake, changes nothing here


_OPTIONS: dict[str, _Option] = {
    "py_debug_mode": _Option(
        False, _bool, "every pipeline records per-stage statistics (it.stats(), grain.monitoring)"
    ),
    "py_traceback_filtering": _Option(
        "auto",
        _one_of("auto", "off", "tracebackhide", "quiet_remove_frames", "remove_frames"),
        "how errors raised inside a pipeline show the library's frames",
    ),
    "py_worker_executor": _Option(
        "auto",
        _one_of("auto", "processes", "threads"),
        "what runs mp_prefetch's workers: processes, threads or auto",
    ),
    "py_dataset_visualization_output_dir": _Option(
        None, _optional_str, "Grain: writes pipeline graphs (print str(ds) here)", effect=False
    ),
    "py_relay_sigterm_to_main": _Option(
        False, _bool, "Grain: workers relay SIGTERM to the main process", effect=False
    ),
    "tf_interleaved_shuffle": _Option(False, _bool, "Grain's TensorFlow backend", effect=False),
    "tf_interleaved_shuffle_block_size": _Option(
        10, _int, "Grain's TensorFlow backend", effect=False
    ),
    "tf_interleaved_shuffle_parallel_blocks": _Option(
        10, _int, "Grain's TensorFlow backend", effect=False
    ),
    "tf_lookup_batch_size": _Option(100, _int, "Grain's TensorFlow backend", effect=False),
    "tf_lookup_fast_warmup": _Option(False, _bool, "Grain's TensorFlow backend", effect=False),
    "tf_lookup_num_parallel_calls": _Option(-1, _int, "Grain's TensorFlow backend", effect=False),
    "tf_optimized_sequential_read": _Option(
        False, _bool, "Grain's TensorFlow backend", effect=False
    ),
    "tf_prefetch_buffer_size": _Option(-1, _int, "Grain's TensorFlow backend", effect=False),
}


class UnknownOptionError(AttributeError, ValueError):
    """``config.<name>`` of a name `grain.config` does not know.

    A ValueError, as Grain raises; also an AttributeError, so that
    ``hasattr(config, name)`` and ``getattr(config, name, default)`` keep
    working for unknown names. (`update` and `get_or_default` raise a plain
    ValueError, as Grain does.)
    """


def _option(name: Any) -> _Option:
    option = _OPTIONS.get(name) if isinstance(name, str) else None
    if option is None:
        known = ", ".join(sorted(_OPTIONS))
        # Grain's wording first ("Unrecognized config option: <name>"), then what is accepted.
        raise ValueError(f"Unrecognized config option: {name}. Known options: {known}.")
    return option


class Config:
    """Grain's settings: ``update(name, value)``, ``get_or_default(name)``, ``config.<name>``.

    Example::

        import grain

        grain.config.update("py_debug_mode", True)   # or GRAIN_PY_DEBUG_MODE=1
        grain.config.get_or_default("py_debug_mode")  # True
        grain.config.py_traceback_filtering           # "auto"

    Unknown names and values of the wrong kind raise a ValueError that lists
    what is accepted. Options are read as attributes but set only with
    `update`: ``grain.config.py_debug_mode = True`` raises a ValueError, as in
    Grain (an assignment would otherwise look like it worked).
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_listeners", [])

    def update(self, name: str, value: Any) -> None:
        """Sets option `name` to `value` for this process (checked and converted)."""
        option = _option(name)
        parsed = option.parse(value, name)
        with self._lock:
            self._values[name] = parsed
            listeners = list(self._listeners)
        for listener in listeners:
            listener(name, parsed)

    def get_or_default(self, name: str) -> Any:
        """The value of option `name`: set by `update`, else its environment variable, else
        its default."""
        option = _option(name)
        with self._lock:
            if name in self._values:
                return self._values[name]
        raw = os.environ.get(f"GRAIN_{name.upper()}")
        if raw is None:
            return option.default
        try:
            return option.parse(raw, name)
        except ValueError as error:
            raise ValueError(f"environment variable GRAIN_{name.upper()}: {error}") from None

    def reset(self, name: str | None = None) -> None:
        """Forgets `update`s (of `name`, or of every option): the environment or default wins."""
        if name is not None:
            _option(name)
        with self._lock:
            if name is None:
                self._values.clear()
            else:
                self._values.pop(name, None)
        for listener in list(self._listeners):
            listener(name, None)

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every option with its current value, default, help and whether it acts here."""
        return {
            name: {
                "value": self.get_or_default(name),
                "default": option.default,
                "help": option.help,
                "has_effect": option.effect,
            }
            for name, option in sorted(_OPTIONS.items())
        }

    def _on_change(self, listener: Callable[[str | None, Any], None]) -> None:
        # Settings read on hot paths are cached by their users; they refresh here.
        with self._lock:
            self._listeners.append(listener)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in _OPTIONS:
            try:
                _option(name)
            except ValueError as error:
                raise UnknownOptionError(str(error)) from None
        return self.get_or_default(name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Grain's wording ("Please use update().") with the call to make instead.
        raise ValueError(
            f"Please use update(). grain.config options cannot be assigned as attributes: "
            f"call grain.config.update({name!r}, {value!r})."
        )

    def __delattr__(self, name: str) -> None:
        raise ValueError(
            f"grain.config options cannot be deleted: Please use update() to set "
            f"{name!r}, or reset({name!r}) to return to its default."
        )

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *_OPTIONS})

    def __repr__(self) -> str:
        return (
            "grain.config("
            + ", ".join(f"{name}={self.get_or_default(name)!r}" for name in sorted(_OPTIONS))
            + ")"
        )


config = Config()
"""The process-wide settings (`grain.config`)."""

_debug_mode: list[bool] = []  # the cached value of py_debug_mode, empty until read
# Orders filling the cache against forgetting it: without it, a thread could read the
# old value, an `update` clear the cache, and the thread then cache the old value for
# good (or index the cache just after the clear: IndexError).
_debug_mode_lock = threading.Lock()


def _forget_debug_mode(name: str | None, value: Any) -> None:
    if name in (None, "py_debug_mode"):
        with _debug_mode_lock:
            _debug_mode.clear()


config._on_change(_forget_debug_mode)


def debug_mode() -> bool:
    """``py_debug_mode``, read once and then cached until `config.update` or `reset`.

    Every new iterator asks (3.6 us for `get_or_default`, which reads the
    environment); its environment variable is therefore read at the first
    iterator, not at each one.
    """
    try:
        return _debug_mode[0]
    except IndexError:
        pass
    with _debug_mode_lock:
        if not _debug_mode:
            _debug_mode.append(bool(config.get_or_default("py_debug_mode")))
        return _debug_mode[0]
