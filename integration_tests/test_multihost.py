"""Multi-host input on a localhost JAX cluster of 4 processes (2 CPU devices each).

Each process (`_multihost_worker.py`) reads its shard through a shuffled,
sliced, batched `mp_prefetch` Dataset and through a DataLoader sharded with
ShardByJaxProcess, checkpoints both (with a global jax.Array) through Orbax at
step 3, and keeps reading to the end of the epoch. The test then SIGKILLs the
whole cluster, starts a new one that restores the checkpoint and reads on.

Checked: over all hosts an epoch is exactly the dataset, without overlap, for
both pipelines; each host's restored continuation is exactly what it read after
step 3 before the crash; the parameter comes back sharded as it was saved;
make_global_batch assembles a global batch of the right shape and sum; each
process wrote its own ``process_<i>-of-<n>.json``; a checkpoint of 4 processes
is refused by a cluster of 2, with the error naming both counts.

`jax.distributed` never runs in the pytest process: a missing peer aborts a
process (SIGABRT) instead of raising.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grain_sources import write_array_record

WORKER = Path(__file__).with_name("_multihost_worker.py")
NUM_RECORDS = 96
STEP = 3  # The worker's checkpoint step.
BATCH = 4
TIMEOUT_S = 45

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """N worker processes, each in its own process group (its data workers die with it)."""

    def __init__(self, mode: str, count: int, workdir: Path):
        self.mode, self.count, self.workdir = mode, count, workdir
        env = dict(os.environ)
        # Two host devices per process; replaces the 8 the root conftest asked for.
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        env["JAX_PLATFORMS"] = "cpu"
        port = free_port()
        self.procs = []
        for pid in range(count):
            with open(workdir / f"{mode}_{pid}.log", "w") as log:  # The child keeps its copy.
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, WORKER, mode, str(pid), str(count), str(port), workdir],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )

    def output(self) -> str:
        """The last lines each process wrote, for assertion messages."""
        parts = []
        for pid in range(self.count):
            text = (self.workdir / f"{self.mode}_{pid}.log").read_text()
            lines = [line for line in text.splitlines() if not line.startswith(("I0", "W0"))]
            code = self.procs[pid].poll()
            parts.append(f"--- process {pid} (exit {code}) ---\n" + "\n".join(lines[-30:]))
        return "\n".join(parts)

    def reports(self) -> list[dict]:
        """Waits for every process's report; fails early if one dies."""
        paths = [self.workdir / f"{self.mode}_{pid}.json" for pid in range(self.count)]
        deadline = time.monotonic() + TIMEOUT_S
        while not all(path.exists() for path in paths):
            failed = [p.returncode for p in self.procs if p.poll() not in (None, 0)]
            assert not failed, f"a {self.mode} process failed:\n{self.output()}"
            assert time.monotonic() < deadline, f"{self.mode} timed out:\n{self.output()}"
            time.sleep(0.05)
        return [json.loads(path.read_text()) for path in paths]

    def wait(self) -> None:
        """Waits for a clean exit of every process."""
        deadline = time.monotonic() + TIMEOUT_S
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{self.mode} did not exit:\n{self.output()}")
        codes = [proc.returncode for proc in self.procs]
        assert codes == [0] * self.count, f"{self.mode} exit codes {codes}:\n{self.output()}"

    def kill(self) -> None:
        """SIGKILLs every process group (the cluster and its data workers)."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def elements(batches: list[list[int]]) -> list[int]:
    return [x for batch in batches for x in batch]


# One cluster size: each start of a cluster costs every process its jax and Orbax imports,
# and 2 processes add nothing that 4 (and the mismatched cluster of 2 below) do not check.
@pytest.mark.parametrize("count", [4])
def test_shards_checkpoint_crash_and_restore(tmp_path, count):
    write_array_record([b"%d" % i for i in range(NUM_RECORDS)], tmp_path / "data.array_record")
    per_host_batches = NUM_RECORDS // count // BATCH

    saving = Cluster("save", count, tmp_path)
    try:
        saved = saving.reports()
    finally:
        saving.kill()  # After the checkpoint: a crash, not a clean shutdown.
    restoring = Cluster("restore", count, tmp_path)
    try:
        restored = restoring.reports()
        restoring.wait()
    finally:
        restoring.kill()
        from grain_mp import sweep_dead_segments

        sweep_dead_segments()  # Segments the SIGKILLed workers held.

    context = f"\n{saving.output()}\n{restoring.output()}"
    for pid, report in enumerate(saved):
        assert report["process_index"] == pid, context
        assert report["process_count"] == count
        assert (report["local_devices"], report["global_devices"]) == (2, 2 * count)

    # An epoch over all hosts is exactly the dataset, for both pipelines.
    for pipeline in ("dataset", "loader"):
        all_elements = [x for report in saved for x in elements(report[pipeline])]
        assert sorted(all_elements) == list(range(NUM_RECORDS)), (pipeline, context)
        for report in saved:
            assert len(report[pipeline]) == per_host_batches
        # Shuffled: not just the records in file order.
        assert elements(saved[0][pipeline]) != sorted(elements(saved[0][pipeline]))

    # Every host continues exactly where it was at the checkpoint.
    for pid in range(count):
        assert restored[pid]["step"] == STEP
        for pipeline in ("dataset", "loader"):
            assert restored[pid][pipeline] == saved[pid][pipeline][STEP:], (pid, pipeline, context)

    # The global parameter comes back with each process's shard in place.
    for pid, report in enumerate(restored):
        assert report["w_local"] == [pid + 1]
        assert report["w_sum"] == 2 * sum(range(1, count + 1))

    # make_global_batch: every host's first batch, assembled.
    first_batches_sum = sum(sum(report["dataset"][0]) for report in saved)
    for report in saved:
        assert report["global_shape"] == [BATCH * count]
        assert report["global_sum"] == report["allgathered_sum"] == first_batches_sum

    step_dir = tmp_path / "ckpt" / str(STEP)
    for item in ("dataset", "loader"):
        names = sorted(p.name for p in (step_dir / item).glob("process_*.json"))
        assert names == [f"process_{i}-of-{count}.json" for i in range(count)]

    if count == 4:
        # The 4 processes' checkpoint, restored by 2: refused on every process.
        mismatched = Cluster("mismatch", 2, tmp_path)
        try:
            errors = [report.get("error", "") for report in mismatched.reports()]
            mismatched.wait()
        finally:
            mismatched.kill()
        for error in errors:
            assert "written by 4 processes, this run has 2" in error, mismatched.output()
