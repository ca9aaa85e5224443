"""Elastic resume on a real JAX cluster: 4 processes save, 2 restore and save, 3 finish.

Each phase is a localhost `jax.distributed` cluster (`_elastic_worker.py`, 2 CPU
devices per process) training on global batches built from
`grain.experimental.ElasticIterator` over a filtered MapDataset.mix, with
another number of data worker processes in each phase, and checkpointing params
and the iterator through Orbax (one state file per process). The checkpoint of
4 processes is restored by 2, theirs by 3, which train and then read the rest
of the epoch one element per process and step (so that no partial batch is
dropped).

Checked: every element of the epoch was given to exactly one process of one
phase, none twice, none lost; each checkpoint holds one file per process; the
trained parameter went through both restores.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_elastic_worker.py")
PHASES = (("first", 4), ("second", 2), ("last", 3))
TIMEOUT_S = 90

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_cluster(phase: str, count: int, workdir: Path) -> list[dict]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, phase, str(pid), str(count), port, str(workdir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        for pid in range(count)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=TIMEOUT_S)[0].decode(errors="replace"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
    tails = "\n".join(f"--- {phase} {pid} ---\n{log[-3000:]}" for pid, log in enumerate(logs))
    assert [proc.returncode for proc in procs] == [0] * count, tails
    return [json.loads((workdir / f"{phase}_{pid}.json").read_text()) for pid in range(count)]


def test_four_processes_save_two_restore_then_three_finish_the_epoch(tmp_path):
    sys.path.insert(0, str(WORKER.parent))
    try:
        from _elastic_worker import PER_PROCESS, TRAIN_STEPS, pipeline
    finally:
        sys.path.remove(str(WORKER.parent))
    delivered: list[int] = []
    reports = {}
    for phase, count in PHASES:
        reports[phase] = _run_cluster(phase, count, tmp_path)
        for report in reports[phase]:
            assert len(report["trained"]) == TRAIN_STEPS * PER_PROCESS[phase]
            delivered.extend(report["trained"])
            delivered.extend(report.get("rest", []))
    epoch = collections.Counter(pipeline())
    got = collections.Counter(delivered)
    assert not got - epoch, f"delivered twice, or not in the epoch: {got - epoch}"
    assert not epoch - got, f"lost: {epoch - got}"
    assert sum(got.values()) == sum(epoch.values()) > 200
    ckpt = tmp_path / "ckpt"
    for step, count in ((TRAIN_STEPS, 4), (2 * TRAIN_STEPS, 2)):
        names = sorted(p.name for p in (ckpt / str(step) / "dataset").glob("process_*.json"))
        assert names == [f"process_{i}-of-{count}.json" for i in range(count)]
    # The parameter trained on in every phase came through both restores.
    w = {report["w"] for report in reports["last"]}
    assert len(w) == 1
    assert w.pop() > max(report["w"] for report in reports["second"]) > 0
