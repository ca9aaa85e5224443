"""The benchmark report's writer (benchmarks/__main__.py) on a fake result set.

No benchmark runs here: the real run is `uv run python -m benchmarks`.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    pytest.importorskip("matplotlib", reason="matplotlib is a dev dependency of the workspace")
    monkeypatch.syspath_prepend(str(REPOSITORY))
    return importlib.import_module("benchmarks.__main__")


def _cells(markdown: str, prefix: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith(prefix)]
    assert len(rows) == 1, (prefix, rows)
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def _fake_rows(report: ModuleType) -> list:
    row = report.Row
    return [
        row("pipeline", "map_batch_t0", "elements/s", 2_000_000, "upstream", "upstream 0.2.18",
            100_000, ok=True),
        row("pipeline", "filter_batch_tdefault", "elements/s", 50_000, "upstream",
            "upstream 0.2.18", 10_000, ok=True),
        row("mp", "first_batch_workers_2", "s", 0.1, "torch", "PyTorch DataLoader", 0.2,
            higher_is_better=False, ok=True),
        row("mp", "grain_workers_2", "batches/s", 30.0, "torch", "PyTorch DataLoader", None,
            note="not run: torch is not importable"),
        row("source_read", "pipeline_t0", "records/s", 1000.0, "upstream", "upstream 0.2.18",
            500.0, ok=False),
        row("index_shuffle", "scalar (rounds=6)", "calls/s", 600_000.0, note="no peer"),
    ]  # fmt: skip


def test_table_and_chart_from_fake_results(report: ModuleType, tmp_path: Path) -> None:
    rows = _fake_rows(report)
    meta = {"command": "uv run python -m benchmarks", "started": "2026-01-01 00:00 UTC",
            "duration_s": 61.0, "note": "a fake run"}  # fmt: skip
    markdown_path, chart_path = report.write_report(rows, meta, tmp_path)

    markdown = markdown_path.read_text()
    assert markdown_path == tmp_path / "REPORT.md"
    header = _cells(markdown, "| benchmark |")
    assert header[:10] == ["benchmark", "case", "unit", "ours", "peer", "peer's figure",
                           "ratio", "target", "met", "checks"]  # fmt: skip
    assert any(set(line) <= set("|-") for line in markdown.splitlines() if line.startswith("|"))

    cells = _cells(markdown, "| pipeline | map_batch_t0 |")
    assert cells[3:] == ["2 000 000", "upstream 0.2.18", "100 000", "20.0x", ">= 2x upstream",
                         "met", "ok", ""]  # fmt: skip
    cells = _cells(markdown, "| pipeline | filter_batch_tdefault |")
    assert cells[6:9] == ["5.00x", ">= 10x upstream", "**not met**"]
    # A time: the ratio is peer / ours, and the target is on our own figure.
    cells = _cells(markdown, "| mp | first_batch_workers_2 |")
    assert cells[3] == "0.100 s"
    assert cells[6:9] == ["2.00x", "<= 0.15 s", "met"]
    # A peer that did not run: no ratio, the target not measured, the note says why.
    cells = _cells(markdown, "| mp | grain_workers_2 |")
    assert cells[5:9] == ["—", "—", ">= 1.1x PyTorch", "not measured"]
    assert cells[10] == "not run: torch is not importable"
    assert _cells(markdown, "| source_read | pipeline_t0 |")[9] == "**FAILED**"
    assert _cells(markdown, "| index_shuffle | scalar (rounds=6) |")[7:9] == [
        ">= 500 000 calls/s",
        "met",
    ]
    assert "3 of 5 met, 1 not met; not measured: mp/grain_workers_2 vs torch." in markdown
    assert "- pipeline/filter_batch_tdefault vs upstream." in markdown
    assert "a fake run" in markdown
    assert "![ratios of ours to each peer](report_ratios.png)" in markdown

    assert chart_path == tmp_path / "report_ratios.png"
    data = chart_path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 5_000


def test_every_benchmark_script_is_in_the_report(report: ModuleType) -> None:
    assert report.scripts_without_collector() == []
    assert set(report.SIZES) == set(report.BENCHES) == set(report.PEERS)
    for pattern in report.TARGETS:
        assert pattern.split("/")[0] in report.BENCHES, pattern


def test_every_collector_returns_its_rows(report: ModuleType) -> None:
    # A collector that ends without `return` gives None, and the full run (half an hour)
    # failed at it; each must return a value on every path.
    import ast
    import inspect
    import textwrap

    for name, collect in report.BENCHES.items():
        tree = ast.parse(textwrap.dedent(inspect.getsource(collect)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        assert isinstance(body[-1], ast.Return | ast.Raise), f"{name}: no return at its end"
        for node in ast.walk(tree):
            if isinstance(node, ast.Return):
                assert node.value is not None, f"{name}: a bare return"


def test_targets_match_the_readme(report: ModuleType) -> None:
    target = report.target_for
    assert target("pipeline", "map_batch_t0", "upstream").value == 2.0
    assert target("pipeline", "filter_batch_tdefault", "upstream").value == 10.0
    assert target("mp", "grain_workers_2", "serial").value == 1.8
    assert target("mp", "grain_workers_2", "torch").value == 1.1
    assert target("mp", "grain_workers_2", "upstream") is None
    assert target("device_put", "throughput", "plain_loop").value == 0.9
    assert target("stats_overhead", "light", "stats_off") is None


def test_render_saved_rewrites_the_same_table(report: ModuleType, tmp_path: Path) -> None:
    rows = _fake_rows(report)
    meta = {"command": "uv run python -m benchmarks --quick", "partial": True}
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps({"meta": meta, "rows": [row.as_json() for row in rows]}))
    out = tmp_path / "out"
    assert report.render_saved(saved, out) == 0
    assert report.render_table(rows) in (out / "REPORT.md").read_text()
    assert (out / "report_ratios.png").is_file()
