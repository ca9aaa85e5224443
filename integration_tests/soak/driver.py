"""Preemption soak: SIGKILL `train_loop.py` at random moments, restart it, compare the stream.

    uv run python integration_tests/soak/driver.py --kills 100

1. Writes the ArrayRecord data and runs `train_loop.py` once without
   interruption: the reference stream of batches.
2. Runs it again in a fresh work directory, and kills its whole process group
   (the script, its 2 worker processes, multiprocessing's resource tracker)
   with SIGKILL, `--kills` times, each time restarting it from the latest
   complete Orbax checkpoint. Each kill picks a random moment of one of three
   kinds: while the script starts (imports, restore, worker start), a random
   point inside a random step, or right after a checkpoint save began.
3. Lets the last restart run to the end, then compares. For every step the
   last line written to the log is the one that counts (the steps after the
   restored checkpoint are consumed again, and logged again, by design).

Printed as one JSON line (exit status 0 when every check passed):

    kills / kills_survived / kills_by_moment   how many kills, and of what kind
    kills_during_save      kills sent between "save-begin" and "save-end"
    interrupted_saves      kills after which Orbax had an unfinished save on disk
    elements_compared      elements of the final stream compared with the reference
    elements_lost          reference elements missing from the final stream (must be 0)
    elements_duplicated    elements of the final stream beyond their count in the
                           reference: duplicates other than the replay (must be 0)
    steps_mismatched       steps whose final batch differs from the reference's
    replayed_elements      elements consumed again after a restore (the allowed replay)
    replay_mismatches      logged batches, replays included, differing from the
                           reference: a resumed run must retrace the same batches
    restore_gaps           runs whose first step was not the restored step + 1
    torn_log_lines         log lines cut by a kill (skipped)
    shm_left_by_kills      grain /dev/shm segments of a killed run present right after
                           its kill (what the next start's sweep must reclaim)
    shm_left_after_soak    grain segments of any of our runs left at the end (must be 0)
    processes_left_after_soak  our processes alive at the end (must be 0)
    seconds                wall time of the whole soak

Every run starts in a new session (``start_new_session=True``), so ``os.killpg``
reaches all of its processes; the driver makes itself a child subreaper, so the
orphaned workers of a killed run are reparented to it and reaped.

Workers start as grain chooses by default (``--start-method auto``, i.e.
``GRAIN_MP_START_METHOD`` unset): from the fork server, because the pipeline
reads ArrayRecord files. Forked from the training script, which has opened those
files, they crash or hang inside riegeli, ArrayRecord's C++ reader (this soak
found it: about one run in 300 hung); ``--start-method fork`` forces that, and
integration_tests/test_resilience_regressions.py pins the cause down.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import itertools
import json
import os
import pathlib
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE / "train_loop.py"
SHM_DIR = "/dev/shm"
RUN_TIMEOUT_S = 120.0  # one run of the script; a hang is reported, not waited out
MOMENTS = (("startup", 0.2), ("step", 0.5), ("save", 0.3))


class SoakFailureError(Exception):
    """A run crashed, hung or produced wrong data: the soak cannot go on."""


def _set_child_subreaper() -> None:
    """Orphans of our runs (workers of a killed script) become our children."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap_orphans() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _session_processes(sessions: set[int]) -> list[tuple[int, str]]:
    """(pid, state) of the processes whose session is one of `sessions`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, session, ...
        if int(fields[3]) in sessions:
            found.append((int(entry), fields[0].decode()))
    return found


def _alive(sessions: set[int]) -> list[int]:
    return [pid for pid, state in _session_processes(sessions) if state not in ("Z", "X")]


def _our_segments(pids: set[int]) -> list[str]:
    """grain segments in /dev/shm owned or created by one of `pids` (see grain_mp._sweep)."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    ours = []
    for name in names:
        parts = name.split("_")
        if name.startswith("grain_") and len(parts) == 6:
            with contextlib.suppress(ValueError):
                if int(parts[2]) in pids or int(parts[3]) in pids:
                    ours.append(name)
    return ours


def _unfinished_saves(checkpoints: pathlib.Path, since: float) -> int:
    """Orbax's temporary step directories (saves not committed) written since `since`."""
    if not checkpoints.exists():
        return 0
    found = 0
    for path in checkpoints.iterdir():
        with contextlib.suppress(FileNotFoundError):
            found += "orbax-checkpoint-tmp" in path.name and path.stat().st_mtime >= since
    return found


_RUN_NUMBERS = itertools.count()


class Run:
    """One launch of the training script, its events read by a thread."""

    def __init__(self, workdir: pathlib.Path, data: pathlib.Path, args: argparse.Namespace):
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_offset = _size(workdir / "log.jsonl")
        self.number = next(_RUN_NUMBERS)
        self.stderr_path = workdir / f"run-{self.number}.err"
        command = [
            sys.executable,
            str(SCRIPT),
            "--workdir",
            str(workdir),
            "--data",
            str(data),
            "--steps",
            str(args.steps),
            "--checkpoint-every",
            str(args.checkpoint_every),
            "--seed",
            str(args.data_seed),
        ]
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "PYTHONUNBUFFERED": "1",
            # "" leaves the choice to grain.
            "GRAIN_MP_START_METHOD": "" if args.start_method == "auto" else args.start_method,
        }
        self.started = time.monotonic()
        self.started_wall = time.time()
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                env=env,
                text=True,
            )
        self.events: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self.restored: int | None = None
        self.ready_s: float | None = None  # from the launch to "ready"
        self.last_step = 0
        self.saving: int | None = None  # a save began and has not ended
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            words = line.split()
            if len(words) == 2 and words[1].isdigit():
                self.events.put((words[0], int(words[1])))
        self.events.put(None)

    def next_event(self, deadline: float, wait_until: float | None = None) -> Any:
        """The next event, or None when the script's stdout ended.

        Returns "timeout" at `wait_until`; raises when there is no event by `deadline`.
        """
        until = deadline if wait_until is None else min(deadline, wait_until)
        try:
            item = self.events.get(timeout=max(until - time.monotonic(), 0.0001))
        except queue.Empty:
            if wait_until is not None and wait_until < deadline:
                return "timeout"
            self.dump_stacks()
            raise SoakFailureError(
                f"the training script made no progress for {RUN_TIMEOUT_S:.0f} s "
                f"(run {self.number}, restored {self.restored}, last step {self.last_step}): "
                f"a hang. {self.stderr_tail()}"
            ) from None
        if item is not None:
            kind, value = item
            if kind == "ready":
                self.restored = value
                self.ready_s = time.monotonic() - self.started
            elif kind == "step":
                self.last_step = value
            elif kind == "save-begin":
                self.saving = value
            elif kind == "save-end":
                self.saving = None
            elif kind == "wrong-data":
                raise SoakFailureError(f"the script got wrong data at step {value}")
        return item

    def dump_stacks(self) -> None:
        """Has the script and its workers write every thread's stack to stderr (faulthandler).

        Forked workers inherit the script's faulthandler; the resource tracker, which has
        none, ends on the signal (it is killed next anyway).
        """
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGUSR1)
            time.sleep(1)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def finish(self) -> int:
        """Waits for the script, then takes the events it sent; returns its exit status."""
        code = self.process.wait()
        self._reader.join(5)
        self.process.stdout.close()  # type: ignore[union-attr]
        while not self.events.empty():
            self.next_event(time.monotonic())
        return code

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "stderr: " + self.stderr_path.read_text()[-6000:]
        return ""


def _size(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_log(path: pathlib.Path) -> tuple[list[tuple[int, list[int], int]], int]:
    """[(step, ids, byte offset)] of the complete lines, and the number of torn lines."""
    entries, torn, offset = [], 0, 0
    with open(path, "rb") as log:
        for raw in log:
            start, offset = offset, offset + len(raw)
            try:
                line = json.loads(raw)
                entries.append((int(line["step"]), [int(i) for i in line["ids"]], start))
            except (ValueError, KeyError, TypeError):
                torn += 1
    return entries, torn


# Every run launched and not finished yet: killed on the way out, whatever happens.
_LIVE: list[Run] = []


def _launch(workdir: pathlib.Path, data: pathlib.Path, args: argparse.Namespace) -> Run:
    run = Run(workdir, data, args)
    _LIVE.append(run)
    return run


def _kill_live_runs() -> None:
    while _LIVE:
        run = _LIVE.pop()
        run.kill()
        with contextlib.suppress(Exception):
            run.process.wait(10)


def _run_to_end(workdir: pathlib.Path, data: pathlib.Path, args: argparse.Namespace) -> Run:
    run = _launch(workdir, data, args)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while run.next_event(deadline) is not None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
    code = run.finish()
    _LIVE.remove(run)
    if code != 0:
        raise SoakFailureError(f"the training script exited with {code}. {run.stderr_tail()}")
    return run


def _kill_at_random(
    run: Run, rng: random.Random, args: argparse.Namespace, kills_left: int, ready_s: float
) -> str:
    """Kills `run` at a random moment; returns the kind of moment.

    The first kills take each kind in turn, so that even a short soak has them all.
    """
    done = args.kills - kills_left
    if done < len(MOMENTS):
        moment = MOMENTS[done][0]
    else:
        moment = rng.choices([m for m, _ in MOMENTS], [w for _, w in MOMENTS])[0]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    if moment == "startup":
        # Anywhere from the imports to the first step (restore, workers starting),
        # but never later: a run that got going could otherwise reach the end.
        kill_at = time.monotonic() + rng.uniform(0.3, 1.05) * ready_s
        while (event := run.next_event(deadline, kill_at)) != "timeout":
            if event is None:
                raise SoakFailureError(f"the training script ended at start. {run.stderr_tail()}")
            if event[0] == "ready":
                time.sleep(rng.uniform(0, args.step_s))
                break
        run.kill()
        return moment
    while (event := run.next_event(deadline)) is not None and event[0] != "ready":
        pass
    if event is None:
        raise SoakFailureError(
            f"the training script ended before it was ready. {run.stderr_tail()}"
        )
    restored = run.restored or 0
    # Aim at a step so that the kills left spread over the steps left, and far
    # enough from the last step that the run never completes before its kill.
    span = max(2, round(2 * (args.steps - restored) / (kills_left + 1)))
    target = max(restored + 1, min(args.steps - 3, restored + rng.randint(1, span)))
    saves = range(args.checkpoint_every, args.steps, args.checkpoint_every)
    if moment == "save" and not any(s >= target for s in saves):
        moment = "step"
    want = "step" if moment == "step" else "save-begin"
    while True:
        event = run.next_event(deadline)
        if event is None:
            raise SoakFailureError(
                f"the training script ended before its kill. {run.stderr_tail()}"
            )
        kind, step = event
        if moment == "step" and kind == "step" and step >= target - 1:
            break
        if moment == "save" and kind == want and step >= target:
            break
    # A step takes a few ms, a save's blocking part ~10-20 ms: land anywhere inside.
    time.sleep(rng.uniform(0, args.step_s if moment == "step" else 0.02))
    run.kill()
    return moment


def soak(args: argparse.Namespace, root: pathlib.Path) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    import train_loop

    began = time.monotonic()
    data = root / "data"
    train_loop.write_data(data)
    reference_run = _run_to_end(root / "reference", data, args)
    ready_s = reference_run.ready_s or 2.0
    reference, _ = _read_log(root / "reference" / "log.jsonl")
    want = {step: ids for step, ids, _ in reference}
    if sorted(want) != list(range(1, args.steps + 1)):
        raise SoakFailureError("the reference run did not log every step once")
    del reference_run

    rng = random.Random(args.seed)
    workdir = root / "soak"
    sessions: set[int] = set()
    kills_by_moment: collections.Counter[str] = collections.Counter()
    kills_during_save = interrupted_saves = shm_left_by_kills = 0
    runs: list[tuple[int, int | None]] = []  # (log offset at start, restored step)
    for done in range(args.kills):
        run = _launch(workdir, data, args)
        sessions.add(run.process.pid)
        moment = _kill_at_random(run, rng, args, args.kills - done, ready_s)
        code = run.finish()  # takes every event the script wrote before its death
        saving = run.saving is not None
        _LIVE.remove(run)
        if code != -signal.SIGKILL:
            raise SoakFailureError(
                f"run {done} ended with {code} before its kill. {run.stderr_tail()}"
            )
        if run.ready_s is not None:
            # The next kill of the startup kind lands within a run's start-up time.
            ready_s = 0.5 * ready_s + 0.5 * run.ready_s
        runs.append((run.log_offset, run.restored))
        kills_by_moment[moment] += 1
        kills_during_save += saving
        interrupted_saves += _unfinished_saves(workdir / "checkpoints", run.started_wall) > 0
        shm_left_by_kills += len(_our_segments({run.process.pid}))
        _reap_orphans()
    final = _run_to_end(workdir, data, args)
    sessions.add(final.process.pid)
    runs.append((final.log_offset, final.restored))

    # Compare: the last write of each step is the stream; every write must match.
    entries, torn = _read_log(workdir / "log.jsonl")
    last: dict[int, list[int]] = {}
    replay_mismatches = 0
    writes: collections.Counter[int] = collections.Counter()
    for step, ids, _ in entries:
        last[step] = ids
        writes[step] += 1
        replay_mismatches += want.get(step) != ids
    replayed_elements = sum((count - 1) * len(want.get(step, ())) for step, count in writes.items())
    starts = [offset for offset, _ in runs]
    restore_gaps = 0
    for index, (offset, restored) in enumerate(runs):
        end = starts[index + 1] if index + 1 < len(runs) else float("inf")
        first = next((step for step, _, at in entries if offset <= at < end), None)
        if first is not None and (restored is None or first != restored + 1):
            restore_gaps += 1
    wanted = collections.Counter(i for ids in want.values() for i in ids)
    got = collections.Counter(i for step in sorted(last) for i in last[step])
    lost = sum((wanted - got).values())
    duplicated = sum((got - wanted).values())
    steps_mismatched = sum(last.get(step) != ids for step, ids in want.items())
    steps_mismatched += sum(step not in want for step in last)

    # Leftovers: give the kernel a moment to finish the killed processes.
    pids = set(sessions)
    deadline = time.monotonic() + 5
    while _alive(sessions) and time.monotonic() < deadline:
        _reap_orphans()
        time.sleep(0.05)
    _reap_orphans()
    processes_left = len(_alive(sessions))
    shm_left = len(_our_segments(pids | {pid for pid, _ in _session_processes(sessions)}))
    figures = {
        "kills": args.kills,
        "kills_survived": args.kills,  # the final run resumed after the last one and finished
        "kills_by_moment": dict(sorted(kills_by_moment.items())),
        "kills_during_save": kills_during_save,
        "interrupted_saves": interrupted_saves,
        "steps": args.steps,
        "elements_compared": sum(len(ids) for ids in last.values()),
        "elements_lost": lost,
        "elements_duplicated": duplicated,
        "steps_mismatched": steps_mismatched,
        "replayed_elements": replayed_elements,
        "replay_mismatches": replay_mismatches,
        "restore_gaps": restore_gaps,
        "torn_log_lines": torn,
        "shm_left_by_kills": shm_left_by_kills,
        "shm_left_after_soak": shm_left,
        "processes_left_after_soak": processes_left,
        "seed": args.seed,
        "start_method": args.start_method,
        "seconds": round(time.monotonic() - began, 1),
    }
    figures["ok"] = not any(
        figures[key]
        for key in (
            "elements_lost",
            "elements_duplicated",
            "steps_mismatched",
            "replay_mismatches",
            "restore_gaps",
            "shm_left_after_soak",
            "processes_left_after_soak",
        )
    ) and figures["elements_compared"] == sum(wanted.values())
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="at most 213 (one epoch)")
    parser.add_argument("--checkpoint-every", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None, help="of the kill schedule")
    parser.add_argument("--data-seed", type=int, default=0, help="of the pipeline's shuffle")
    parser.add_argument("--step-s", type=float, default=0.004, help="about one step's time")
    parser.add_argument("--workdir", type=pathlib.Path, default=None, help="kept if given")
    parser.add_argument(
        "--start-method",
        default="auto",
        choices=["auto", "fork", "forkserver", "spawn"],
        help="how the workers start (GRAIN_MP_START_METHOD); see the module docstring",
    )
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**31)
    _set_child_subreaper()
    # A SIGTERM (a test's timeout) unwinds through the finally below, killing our runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="grain-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        figures = soak(args, root)
    except SoakFailureError as failure:
        figures = {"ok": False, "error": str(failure), "seed": args.seed}
    finally:
        _kill_live_runs()
        _reap_orphans()
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures), flush=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
