"""Differential runner: every case in ours and in upstream Grain 0.2.18, compared.

    python tools/differential/run.py                 # all cases
    python tools/differential/run.py --only 'map.*'  # a subset (fnmatch, repeatable)
    python tools/differential/run.py --list          # the case names

Each implementation runs in its own worker subprocess (worker.py), many cases
per process, each case under its own timer. A worker that hangs beyond a case's
timeout (plus grace) or dies is killed and restarted on the remaining cases,
and that case is recorded as "hang" or "crash". The two sides run at the same
time. Writes tools/differential/results.jsonl (one line per case) and prints a
markdown summary. Standard library only: run it with any Python 3.11.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fnmatch
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "worker.py")
sys.path.insert(0, HERE)

from bydesign import classify  # noqa: E402
from compare import compare, is_missing  # noqa: E402

GRACE_S = float(os.environ.get("GRAINDIFF_GRACE_S", "15"))
STARTUP_S = 180.0


class Side:
    def __init__(self, label: str, cmd: list[str], cwd: str, log_dir: str) -> None:
        self.label = label
        self.cmd = cmd
        self.cwd = cwd
        self.log_dir = log_dir
        self.hello: dict[str, Any] | None = None
        self.launches = 0
        self.restarts = 0  # relaunches after a hang or a crash

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["JAX_PLATFORMS"] = "cpu"
        env["PYTHONHASHSEED"] = "0"
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        env.pop("PYTHONPATH", None)
        if self.label == "upstream":
            env.pop("VIRTUAL_ENV", None)
            env.pop("UV_PROJECT_ENVIRONMENT", None)
        return env

    def list_cases(self) -> list[dict[str, Any]]:
        p = subprocess.run(
            [*self.cmd, WORKER, "--list"],
            cwd=self.cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=STARTUP_S,
        )
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                ev = json.loads(line)
                if ev.get("event") == "list":
                    return ev["cases"]
        raise RuntimeError(f"{self.label}: could not list cases:\n{p.stderr[-3000:]}")

    def run(self, metas: list[dict[str, Any]], results: dict[str, Any], chunk: int) -> None:
        timeouts = {m["case"]: float(m.get("timeout", 10.0)) for m in metas}
        batches = [[m["case"] for m in metas if not m.get("isolated")]]
        batches += [[m["case"]] for m in metas if m.get("isolated")]
        for batch in batches:
            remaining = batch
            while remaining:
                self._run_once(remaining, timeouts, results, chunk)
                remaining = [n for n in remaining if n not in results]
                if remaining:
                    self.restarts += 1

    def _run_once(
        self, names: list[str], timeouts: dict[str, float], results: dict[str, Any], chunk: int
    ) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, f"{self.label}-{chunk}-{self.launches}.stderr")
        self.launches += 1
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [*self.cmd, WORKER, "--run"],
                cwd=self.cwd,
                env=self.env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
            q: queue.Queue[Any] = queue.Queue()

            def reader() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    q.put(line)
                q.put(None)

            t = threading.Thread(target=reader, daemon=True)
            t.start()
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(names))
            proc.stdin.close()
            current: str | None = None
            deadline = time.monotonic() + STARTUP_S
            try:
                while True:
                    try:
                        line = q.get(timeout=max(0.1, deadline - time.monotonic()))
                    except queue.Empty:
                        if current is not None:
                            results[current] = {"status": "hang", "case": current}
                        else:
                            # Startup or between cases: blame the next unfinished case.
                            nxt = next((n for n in names if n not in results), None)
                            if nxt:
                                results[nxt] = {
                                    "status": "hang",
                                    "case": nxt,
                                    "note": "between cases",
                                }
                        break
                    if line is None:
                        proc.wait(timeout=30)
                        if current is not None:
                            results[current] = {
                                "status": "crash",
                                "case": current,
                                "returncode": proc.returncode,
                                "stderr_tail": _tail(log_path),
                            }
                        elif any(n not in results for n in names):
                            nxt = next(n for n in names if n not in results)
                            results[nxt] = {
                                "status": "crash",
                                "case": nxt,
                                "returncode": proc.returncode,
                                "note": "worker exited before the case started",
                                "stderr_tail": _tail(log_path),
                            }
                        break
                    line = line.strip()
                    if not line.startswith("{"):
                        continue
                    ev = json.loads(line)
                    kind = ev.get("event")
                    if kind == "hello":
                        self.hello = ev
                        deadline = time.monotonic() + STARTUP_S
                    elif kind == "start":
                        current = ev["case"]
                        deadline = time.monotonic() + timeouts.get(current, 10.0) + GRACE_S
                    elif kind == "result":
                        ev.pop("event", None)
                        results[ev["case"]] = ev
                        current = None
                        deadline = time.monotonic() + STARTUP_S
                    elif kind == "done":
                        break
            finally:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    try:
        proc.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        pass
    # The process group this runner created for the worker (start_new_session).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


# --------------------------------------------------------------------------- reporting


def brief(o: dict[str, Any], limit: int = 300) -> str:
    st = o.get("status")
    if st == "ok":
        s = json.dumps(o.get("value"), sort_keys=True)
        return "ok " + (s if len(s) <= limit else s[:limit] + "...")
    if st == "raised":
        e = o["exc"]
        stage = f" at {e['stage']}" if e.get("stage") else ""
        msg = e.get("msg", "").replace("\n", " ")
        if len(msg) > limit:
            msg = msg[:limit] + "..."
        return f"raises {e['type']}{stage}: {msg}"
    extra = o.get("note") or o.get("returncode") or ""
    return f"{st} {extra}".strip()


def summarize(records: list[dict[str, Any]], sides: dict[str, Side], secs: float) -> str:
    counts = collections.Counter(r["class"] for r in records)
    out = ["# Differential run: ours vs upstream Grain 0.2.18", ""]
    for label, side in sides.items():
        h = side.hello or {}
        out.append(
            f"- {label}: grain from `{h.get('grain_file')}` (python {h.get('python')}, "
            f"{side.launches} worker processes, {side.restarts} restarted after a hang or crash)"
        )
    out += [
        f"- wall time: {secs:.0f} s",
        "",
        "| calls compared | agree | differ-by-design | differ |",
        "|---:|---:|---:|---:|",
        "| "
        + " | ".join(
            str(x)
            for x in (len(records), counts["agree"], counts["differ-by-design"], counts["differ"])
        )
        + " |",
        "",
        "## By area",
        "",
        "| area | cases | agree | by design | differ | of which ours missing a name |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    by_area: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in records:
        c = by_area[r["area"]]
        c["n"] += 1
        c[r["class"]] += 1
        if r["class"] == "differ" and r.get("why") == "missing":
            c["missing"] += 1
    for area in sorted(by_area):
        c = by_area[area]
        cells = (c["n"], c["agree"], c["differ-by-design"], c["differ"], c["missing"])
        out.append(f"| {area} | " + " | ".join(str(x) for x in cells) + " |")
    out += ["", "## Unexplained differences", ""]
    differ = [r for r in records if r["class"] == "differ"]
    if not differ:
        out.append("None.")
    for area in sorted({r["area"] for r in differ}):
        out += [f"### {area}", ""]
        for r in differ:
            if r["area"] != area:
                continue
            call = r["call"].strip().replace("\n", "\n      ")
            out.append(f"- **{r['case']}** [{r.get('why')}] {r.get('detail') or ''}".rstrip())
            out.append(
                f"    - call: `{call}`"
                if "\n" not in call
                else f"    - call:\n      ```\n      {call}\n      ```"
            )
            out.append(f"    - upstream: {brief(r['upstream'])}")
            out.append(f"    - ours:     {brief(r['ours'])}")
        out.append("")
    out += ["## Differences by design", ""]
    reasons: dict[str, list[str]] = collections.defaultdict(list)
    for r in records:
        if r["class"] == "differ-by-design":
            reasons[r["reason"]].append(r["case"])
    for reason, names in reasons.items():
        out.append(f"- {reason}: {len(names)} case(s): " + ", ".join(f"`{n}`" for n in names))
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--ours", default="uv run python", help="command for our interpreter (cwd = repo root)"
    )
    ap.add_argument(
        "--upstream", default="/tmp/upstream/bin/python", help="command for upstream's (cwd = /tmp)"
    )
    ap.add_argument("--upstream-cwd", default="/tmp")
    ap.add_argument("--only", action="append", default=[], help="fnmatch pattern of case names")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes per side")
    ap.add_argument("--out", default=os.path.join(HERE, "results.jsonl"))
    ap.add_argument("--summary", default=None, help="also write the markdown summary here")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()

    log_dir = os.path.join(HERE, ".logs")
    sides = {
        "upstream": Side("upstream", shlex.split(args.upstream), args.upstream_cwd, log_dir),
        "ours": Side("ours", shlex.split(args.ours), REPO, log_dir),
    }
    metas = sides["upstream"].list_cases()
    if args.only:
        metas = [m for m in metas if any(fnmatch.fnmatchcase(m["case"], p) for p in args.only)]
    if args.list:
        for m in metas:
            print(m["case"])
        return 0

    t0 = time.monotonic()
    results: dict[str, dict[str, Any]] = {"upstream": {}, "ours": {}}
    threads = []
    jobs = max(1, args.jobs)
    for label, side in sides.items():
        for j in range(jobs):
            part = metas[j::jobs]
            th = threading.Thread(target=side.run, args=(part, results[label], j), daemon=True)
            th.start()
            threads.append(th)
    for th in threads:
        th.join()
    secs = time.monotonic() - t0

    records = []
    for m in metas:
        name = m["case"]
        up = results["upstream"].get(name, {"status": "not-run"})
        ours = results["ours"].get(name, {"status": "not-run"})
        cmp = compare(m, ours, up)
        cls, reason = classify(name, cmp, ours, up)
        rec = {
            "case": name,
            "area": m["area"],
            "call": m["call"],
            "shuffled": m["shuffled"],
            "kind": m["kind"],
            "class": cls,
            "why": cmp.get("why"),
            "detail": cmp.get("detail"),
            "reason": reason,
            "ours_missing_name": is_missing(ours),
            "upstream": _strip(up),
            "ours": _strip(ours),
        }
        records.append(rec)
    with open(args.out, "w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    text = summarize(records, sides, secs)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(text)
    for label, side in sides.items():
        gf = (side.hello or {}).get("grain_file") or ""
        if label == "upstream" and REPO in gf:
            print(
                f"WARNING: upstream side imported grain from the repository: {gf}", file=sys.stderr
            )
        if label == "ours" and "/tmp/upstream" in gf:
            print(f"WARNING: our side imported upstream grain: {gf}", file=sys.stderr)
    return 0


def _strip(o: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in o.items() if k not in ("case", "event")}


if __name__ == "__main__":
    sys.exit(main())
