"""Run one benchmark under our `grain` and under upstream grain==0.2.18, as JSON lines.

Usage: uv run python benchmarks/compare.py [--repeats 5] [--size 200000] [--bench pipeline]
       [--cases a,b] [--case-size CASE=N] [--venv DIR] [--torch]

Upstream lives in a throwaway virtual environment outside the workspace (default
~/.cache/grain-compare/venv-grain-0.2.18), made with `python -m venv` from this
interpreter (so both sides run the same Python) and `pip install grain==0.2.18` with
this interpreter's Pillow version (jpeg.py decodes with it on both sides) and its
`tokenizers` version (llm_tokens.py trains and encodes with it on both sides), plus
torch==2.13.0 with --torch; torch never enters uv.lock or any pyproject. A venv that
already imports the right versions is reused.

benchmarks/<bench>.py runs as a subprocess under both interpreters, from a temporary
directory outside the repository; upstream's gets no PYTHONPATH, so its `import grain`
is the venv's. Rounds interleave, ours then upstream, each with `--repeats 1`, so both
see the same machine load; each case's figure is the median over the rounds. A line per
case gives both rates, ratio = ours / upstream, both `ok` flags and whether both
produced the same order (`same_digest`); a summary line ends the output. Progress and
the subprocesses' stderr go to stderr. Exit status: 1 if a subprocess failed, 2 if
both sides report the same implementation (the venv would be importing ours), 3 if
any run failed its correctness checks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UPSTREAM_VERSION = "0.2.18"
TORCH_VERSION = "2.13.0"
DEFAULT_VENV = Path.home() / ".cache" / "grain-compare" / f"venv-grain-{UPSTREAM_VERSION}"
BENCHMARKS = Path(__file__).resolve().parent
REPOSITORY = BENCHMARKS.parent


def _log(message: str) -> None:
    print(f"compare: {message}", file=sys.stderr, flush=True)


def _clean_env() -> dict[str, str]:
    """The environment for upstream's interpreter: nothing that points into the workspace."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "UV_PROJECT"):
        env.pop(name, None)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _pillow_version() -> str:
    """This interpreter's Pillow: jpeg.py decodes with the same one on both sides."""
    import importlib.metadata

    return importlib.metadata.version("pillow")


def _tokenizers_version() -> str:
    """This interpreter's `tokenizers`: llm_tokens.py trains and encodes with the same one."""
    import importlib.metadata

    return importlib.metadata.version("tokenizers")


def _probe_code(torch: bool) -> str:
    lines = [
        "import importlib.metadata as m, importlib.util as u, grain",
        f"assert m.version('grain') == {UPSTREAM_VERSION!r}, m.version('grain')",
        f"assert m.version('pillow') == {_pillow_version()!r}, m.version('pillow')",
        f"assert m.version('tokenizers') == {_tokenizers_version()!r}, m.version('tokenizers')",
        "assert u.find_spec('grain_dataset') is None, 'imports our workspace'",
        "grain.MapDataset, grain.ReadOptions",
    ]
    if torch:
        lines += ["import torch", f"assert torch.__version__.split('+')[0] == {TORCH_VERSION!r}"]
    return "\n".join(lines)


def _venv_works(venv: Path, torch: bool, cwd: Path) -> bool:
    python = _venv_python(venv)
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", _probe_code(torch)],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0


def _run_logged(command: list[str], cwd: Path) -> None:
    _log("$ " + " ".join(command))
    # Progress goes to stderr: pip's output is passed through there, never to stdout.
    done = subprocess.run(command, cwd=cwd, env=_clean_env(), stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"compare: command failed with status {done.returncode}: {command}")


def ensure_venv(venv: Path, torch: bool, cwd: Path) -> Path:
    """Upstream's interpreter, creating or completing the venv at `venv` if it does not work."""
    venv = venv.expanduser().resolve()
    if venv.is_relative_to(REPOSITORY):
        raise SystemExit(f"compare: --venv must lie outside the repository: {venv}")
    if _venv_works(venv, torch, cwd):
        _log(f"reusing {venv}")
        return _venv_python(venv)
    if venv.exists() and not (venv / "pyvenv.cfg").exists() and any(venv.iterdir()):
        raise SystemExit(f"compare: {venv} exists and is not a virtual environment")
    start = time.perf_counter()
    if not _venv_python(venv).exists():
        _log(f"creating {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        _run_logged([sys.executable, "-m", "venv", str(venv)], cwd)
    packages = [
        f"grain=={UPSTREAM_VERSION}",
        f"pillow=={_pillow_version()}",
        f"tokenizers=={_tokenizers_version()}",
    ]
    packages += [f"torch=={TORCH_VERSION}"] if torch else []
    _log(f"installing {' '.join(packages)} into {venv}")
    python = str(_venv_python(venv))
    _run_logged([python, "-m", "pip", "install", "--disable-pip-version-check", *packages], cwd)
    if not _venv_works(venv, torch, cwd):
        raise SystemExit(f"compare: {venv} still does not import grain=={UPSTREAM_VERSION}")
    _log(f"venv ready in {time.perf_counter() - start:.1f} s")
    return _venv_python(venv)


def run_benchmark(
    python: str, script: Path, arguments: list[str], env: dict[str, str], cwd: Path
) -> tuple[list[dict], float]:
    """One run of the benchmark: its JSON lines and its wall time; exits if it fails."""
    command = [python, str(script), *arguments]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        _log(f"failed with status {done.returncode}: {' '.join(command)}")
        sys.exit(1)
    lines = []
    for text in done.stdout.splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            sys.stderr.write(done.stderr)
            _log(f"not a JSON line on stdout of {' '.join(command)}: {text!r}")
            sys.exit(1)
    if not lines:
        sys.stderr.write(done.stderr)
        _log(f"no JSON lines from {' '.join(command)}")
        sys.exit(1)
    return lines, elapsed


def _key(line: dict) -> tuple[str, object]:
    return line["case"], line.get("threads")


def _check_implementations(ours: list[dict], upstream: list[dict]) -> None:
    sides = (
        {line.get("implementation") for line in ours},
        {line.get("implementation") for line in upstream},
    )
    if sides != ({"ours"}, {"upstream"}):
        _log(
            f"refusing to compare: ours reports {sorted(map(str, sides[0]))}, "
            f"upstream reports {sorted(map(str, sides[1]))} (expected 'ours' and 'upstream')"
        )
        sys.exit(2)


def _summarise(
    key: tuple[str, object], ours: list[dict], upstream: list[dict]
) -> tuple[dict, float]:
    """The case's JSON line, and its unrounded ratio (a rounded one can be 0)."""
    first = ours[0]
    ours_s = statistics.median(line["median_s"] for line in ours)
    upstream_s = statistics.median(line["median_s"] for line in upstream)
    ours_rate = first["elements"] / ours_s
    upstream_rate = upstream[0]["elements"] / upstream_s
    line = {"benchmark": first["benchmark"], "case": key[0]}
    if key[1] is not None:
        line["threads"] = key[1]
    line |= {
        "elements": first["elements"],
        "ours_elements_per_s": round(ours_rate),
        "upstream_elements_per_s": round(upstream_rate),
        "ratio": round(ours_rate / upstream_rate, 3),
        "ours_median_s": round(ours_s, 6),
        "upstream_median_s": round(upstream_s, 6),
        "ours_ok": all(line.get("ok", False) for line in ours),
        "upstream_ok": all(line.get("ok", False) for line in upstream),
        "rounds": len(ours),
    }
    if "digest" in first:
        digests = {line.get("digest") for line in ours + upstream}
        line["same_digest"] = len(digests) == 1
    return line, ours_rate / upstream_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds, each one run per side")
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--bench", default="pipeline", help="benchmarks/<bench>.py")
    parser.add_argument("--cases", default=None, help="comma-separated subset, passed through")
    parser.add_argument("--case-size", default=None, help="CASE=N[,CASE=N], passed through")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--torch", action="store_true", help=f"also install torch=={TORCH_VERSION}")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    script = BENCHMARKS / f"{args.bench}.py"
    if not script.is_file():
        parser.error(f"no such benchmark: {script}")
    arguments = ["--repeats", "1", "--size", str(args.size)]
    if args.cases:
        arguments += ["--cases", args.cases]
    if args.case_size:
        arguments += ["--case-size", args.case_size]

    with tempfile.TemporaryDirectory(prefix="grain-compare-") as scratch:
        cwd = Path(scratch)
        upstream_python = str(ensure_venv(args.venv, args.torch, cwd))
        sides = {
            "ours": (sys.executable, dict(os.environ)),
            "upstream": (upstream_python, _clean_env()),
        }
        results: dict[str, list[list[dict]]] = {"ours": [], "upstream": []}
        for round_ in range(1, args.repeats + 1):
            walls = []
            for side, (python, env) in sides.items():
                lines, elapsed = run_benchmark(python, script, arguments, env, cwd)
                results[side].append(lines)
                walls.append(f"{side} {elapsed:.1f} s")
            _log(f"round {round_}/{args.repeats}: {', '.join(walls)}")
            if round_ == 1:
                _check_implementations(results["ours"][0], results["upstream"][0])

    per_case: dict[tuple[str, object], dict[str, list[dict]]] = {}
    for side, rounds in results.items():
        for lines in rounds:
            for line in lines:
                per_case.setdefault(_key(line), {"ours": [], "upstream": []})[side].append(line)
    summaries, ratios = [], []
    for key, sides_lines in per_case.items():
        if len(sides_lines["ours"]) != args.repeats or len(sides_lines["upstream"]) != args.repeats:
            _log(f"case {key} is missing from some runs")
            sys.exit(1)
        summary, ratio = _summarise(key, sides_lines["ours"], sides_lines["upstream"])
        summaries.append(summary)
        ratios.append(ratio)
        print(json.dumps(summary), flush=True)
    ours_first = results["ours"][0][0]
    upstream_first = results["upstream"][0][0]
    all_ok = all(s["ours_ok"] and s["upstream_ok"] for s in summaries)
    slowest = min(summaries, key=lambda s: s["ratio"])
    print(
        json.dumps(
            {
                "benchmark": ours_first["benchmark"],
                "summary": True,
                "cases": len(summaries),
                "rounds": args.repeats,
                "all_ok": all_ok,
                "geomean_ratio": round(math.exp(statistics.fmean(map(math.log, ratios))), 3),
                "min_ratio": slowest["ratio"],
                "min_ratio_case": slowest["case"],
                "ours_python": ours_first.get("python"),
                "upstream_python": upstream_first.get("python"),
                "upstream_version": upstream_first.get("grain_version"),
                "venv": str(Path(upstream_python).parent.parent),
            }
        ),
        flush=True,
    )
    if ours_first.get("python") != upstream_first.get("python"):
        _log("warning: the two sides ran different Python versions")
    if not all_ok:
        _log("some runs failed their correctness checks (see ours_ok / upstream_ok)")
        sys.exit(3)


if __name__ == "__main__":
    main()
