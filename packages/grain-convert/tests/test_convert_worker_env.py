"""The conversion's local workers hide the accelerators as mp_prefetch's do.

A transform that returns the environment it runs in writes it into the
records; the parent's environment names a GPU that the workers must not see.
"""

import json
import os

import pytest

from grain_convert import convert
from grain_mp import worker_env
from grain_sources import ArrayRecordDataSource

pytest.importorskip(
    "array_record",
    reason="the conversion writes ArrayRecord files: array-record has no free-threaded wheel",
)

VARIABLES = tuple(worker_env.HIDDEN)
PARENT = {"JAX_PLATFORMS": "cuda", "CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}


def _convert_and_read(tmp_path, name):
    source = tmp_path / "in"
    source.mkdir(exist_ok=True)
    (source / "rows.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(8)))
    result = convert(
        source,
        tmp_path / f"out/{name}",
        num_shards=2,
        workers=2,
        transform=lambda row: {"id": row["id"], "env": [os.environ.get(n) for n in VARIABLES]},
        row_format="json",
    )
    with ArrayRecordDataSource(result.pattern) as records:
        return [json.loads(records[i])["env"] for i in range(len(records))]


@pytest.mark.timeout(120)
def test_convert_workers_hide_the_accelerators_unless_told(tmp_path, monkeypatch):
    monkeypatch.delenv(worker_env.SEE_ACCELERATORS_ENV, raising=False)
    for name, value in PARENT.items():
        monkeypatch.setenv(name, value)
    assert _convert_and_read(tmp_path, "hidden") == [["cpu", "", ""]] * 8
    monkeypatch.setenv(worker_env.SEE_ACCELERATORS_ENV, "1")
    assert _convert_and_read(tmp_path, "seen") == [[PARENT[n] for n in VARIABLES]] * 8
