"""Runs cases in one interpreter and reports each outcome as a JSON line.

    python worker.py --list            # the case table (metadata only)
    python worker.py --run < names.json

The protocol goes to the process's original stdout; anything the library or a
case prints is redirected to stderr so it cannot corrupt the protocol. Events:

    {"event": "hello", "grain_file": ..., "grain_version": ..., "python": ...}
    {"event": "start", "case": name}
    {"event": "result", "case": name, "status": "ok"|"raised"|"timeout"|"harness-error", ...}
    {"event": "done"}

Each case runs under a SIGALRM timer (raising a BaseException the case cannot
swallow with `except Exception`). A hang the timer cannot break (in C code,
say) is the runner's to handle: it kills this process and starts another on
the remaining cases.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
import traceback
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

CASE_MODULES = [
    "cases_api",
    "cases_map",
    "cases_iter",
    "cases_experimental",
    "cases_transforms",
    "cases_loader",
    "cases_sources",
    "cases_sources_read",
    "cases_misc",
    "cases_misc7",
    "cases_bad",
    "cases_mix_epochs",
    "cases_subclass",
    "cases_errors",
    "cases_loader_state",
    "cases_state_shapes",
]


class CaseTimeout(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def load_cases() -> dict[str, Any]:
    import importlib

    import _registry

    extra = [m for m in os.environ.get("GRAINDIFF_EXTRA_CASES", "").split(",") if m]
    for m in CASE_MODULES + extra:  # extra: e.g. a module of harness self-checks
        importlib.import_module(m)
    return _registry.CASES


def exc_record(e: BaseException) -> dict[str, Any]:
    tb = traceback.extract_tb(e.__traceback__)
    where = [f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in tb[-3:]]
    return {
        "type": type(e).__name__,
        "module": type(e).__module__,
        "mro": [c.__name__ for c in type(e).__mro__ if c not in (object, BaseException)],
        "msg": str(e)[:600],
        "stage": getattr(e, "_diff_stage", None),
        "where": where,
    }


def run_case(c: Any) -> dict[str, Any]:
    import _registry
    from _normalize import normalize

    rec: dict[str, Any] = {"case": c.name}
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        signal.setitimer(signal.ITIMER_REAL, c.timeout)
        try:
            value = c.fn()
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                rec["value"] = normalize(value)
                json.dumps(rec["value"])
                rec["status"] = "ok"
            except Exception as e:  # a harness bug, not an outcome of the library
                rec["status"] = "harness-error"
                rec["exc"] = exc_record(e)
        except CaseTimeout:
            rec["status"] = "timeout"
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec["status"] = "raised"
            rec["exc"] = exc_record(e)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _registry.cleanup_tmpdirs()
    rec["warnings"] = sorted({w.category.__name__ for w in got})
    rec["secs"] = round(time.perf_counter() - t0, 4)
    return rec


def _mark_absl_flags_parsed() -> None:
    """Upstream reads absl flags (multiprocessing); a script that is not an absl app
    must mark them parsed with their defaults, as any user script would."""
    try:
        from absl import flags
    except ImportError:
        return
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints of the library and of cases go to stderr

    def emit(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj, default=repr) + "\n")
        proto.flush()

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import grain

    _mark_absl_flags_parsed()

    cases = load_cases()
    if "--list" in sys.argv:
        emit({"event": "list", "cases": [c.meta() for c in cases.values()]})
        proto.flush()
        os._exit(0)

    emit(
        {
            "event": "hello",
            "grain_file": getattr(grain, "__file__", None),
            "grain_version": getattr(grain, "__version__", None),
            "python": sys.version.split()[0],
            "pid": os.getpid(),
        }
    )
    names = json.loads(sys.stdin.read())
    signal.signal(signal.SIGALRM, _on_alarm)
    done = 0
    for name in names:
        c = cases.get(name)
        emit({"event": "start", "case": name})
        if c is None:
            emit(
                {
                    "event": "result",
                    "case": name,
                    "status": "harness-error",
                    "exc": {"type": "KeyError", "mro": [], "msg": "no such case"},
                }
            )
            continue
        rec = run_case(c)
        rec["event"] = "result"
        emit(rec)
        done += 1
        if done % 50 == 0:
            gc.collect()  # reap cycles (iterators with threads) now and then, not per case:
            # a full collection costs ~0.1 s once jax/orbax are imported
    emit({"event": "done"})
    proto.flush()
    sys.stderr.flush()
    # Skip interpreter shutdown: a stray non-daemon thread of some case must not
    # hold the process; the runner has everything it needs.
    os._exit(0)


if __name__ == "__main__":
    main()
