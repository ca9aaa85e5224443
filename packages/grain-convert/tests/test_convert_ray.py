"""grain_convert.convert on a real local Ray cluster: exact shards, identical to the local
executor's, a killed Ray worker, and a cluster started with `ray start --head`.

One cluster, started with ``ray start --head --num-cpus=2``, serves the module:
starting Ray costs seconds. This process connects to it by address; the `ray
start` test runs its driver as a separate process, as a user would. The
interrupted run's driver starts its own local cluster, which is the executor's
``ray.init(num_cpus=...)`` path.
"""

import json
import os
import pathlib
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import grain_dataset
from grain_convert import convert
from grain_sources import ArrayRecordDataSource

# Before Ray is imported, which reads it once (see RAY_ENV).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

NUM_RECORDS = 200_000
# Token authentication (on by default for `ray start`) needs a token shared with
# the driver; the test cluster on localhost does without. The uv hook would ship
# the work tree to the workers of a cluster on this same machine.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
# The `grain` command of this environment (the face's console script) drives the runs
# that need a driver process of their own, as a user's does.
GRAIN = os.path.join(os.path.dirname(sys.executable), "grain")


@pytest.fixture(scope="module", autouse=True)
def ray_environment():
    """RAY_ENV, and a root for Ray's session files (logs) that is removed afterwards."""
    root = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in {**RAY_ENV, "RAY_TMPDIR": root}.items():
                patch.setenv(name, value)
            yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def head_address(ray_environment):
    """`ray start --head` on 127.0.0.1 and a free port; stopped after the module."""
    port = _free_port()
    ray_command = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen(
        [
            ray_command, "start", "--head", f"--port={port}", "--num-cpus=2",
            "--node-ip-address=127.0.0.1", "--include-dashboard=false",
            "--disable-usage-stats", "--block",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        said = []
        for line in head.stdout:  # ready when it says it blocks
            said.append(line)
            if "block forever" in line:
                break
        else:
            pytest.fail("`ray start --head` ended before it was ready:\n" + "".join(said)[-3000:])
        yield f"127.0.0.1:{port}"
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        head.stdout.close()


@pytest.fixture(scope="module")
def ray_cluster(head_address):
    ray.init(address=head_address, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The same rows as 4 Parquet files and as 2 JSON lines files."""
    root = tmp_path_factory.mktemp("corpus")
    rows = [{"id": i, "text": f"doc {i} " + "ab" * (i % 17)} for i in range(NUM_RECORDS)]
    (root / "parquet").mkdir()
    (root / "jsonl").mkdir()
    quarter = NUM_RECORDS // 4
    for number in range(4):
        part = rows[number * quarter : (number + 1) * quarter]
        pq.write_table(
            pa.Table.from_pylist(part),
            root / "parquet" / f"part-{number}.parquet",
            row_group_size=10_000,
        )
    half = NUM_RECORDS // 2
    for number in range(2):
        with open(root / "jsonl" / f"part-{number}.jsonl", "w") as file:
            for row in rows[number * half : (number + 1) * half]:
                file.write(json.dumps(row) + "\n")
    return root, rows


def _files(result):
    return [pathlib.Path(path).read_bytes() for path in result.shards]


def _through_a_pipeline(pattern, decode):
    dataset = grain_dataset.MapDataset.source(ArrayRecordDataSource(pattern)).map(decode)
    return list(dataset.to_iter_dataset())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_and_local_write_the_same_exact_shards_from_parquet(ray_cluster, corpus, tmp_path):
    # JSON lines through Ray: test_a_cluster_started_with_ray_start_at_its_address.
    root, rows = corpus
    on_ray = convert(root / "parquet", tmp_path / "ray/train", num_shards=16, executor="ray")
    local = convert(root / "parquet", tmp_path / "local/train", num_shards=16, workers=2)
    assert on_ray.written == local.written == 16
    assert _files(on_ray) == _files(local)
    assert _through_a_pipeline(on_ray.pattern, pickle.loads) == rows
    with open(on_ray.manifest_path) as file, open(local.manifest_path) as other:
        assert json.load(file)["shards"] == json.load(other)["shards"]


_GATED_TRANSFORM = """
import os
import time

def gated(row):
    # Rows from {threshold} on wait for the flag: the first run never gets past them.
    while row["id"] >= {threshold} and not os.path.exists({flag!r}):
        time.sleep(0.01)
    return row
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_interrupted_ray_run_is_finished_by_resume_redoing_only_the_rest(
    corpus, tmp_path, interrupt_after_markers
):
    # The driver is its own process (it starts its own local Ray cluster), as a user's is.
    # Rows 100 000 to 150 000 in 16 shards: shards 0-9 end before row 131 250 and finish;
    # 10-15 wait for the flag, which only the resumed run has.
    root, rows = corpus
    flag = tmp_path / "go"
    (tmp_path / "prep.py").write_text(_GATED_TRANSFORM.format(threshold=131_250, flag=str(flag)))
    out = tmp_path / "out"
    command = [
        GRAIN, "convert", str(root / "parquet" / "part-2.parquet"),
        str(out / "x"), "--num-shards", "16", "--transform", f"{tmp_path / 'prep.py'}:gated",
    ]  # fmt: skip
    driver = subprocess.Popen(
        [*command, "--executor", "ray", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    err = interrupt_after_markers(driver, out, 10, timeout=200)
    assert driver.returncode == 130, err[-3000:]
    assert sorted(n for n in os.listdir(out) if n.endswith(".done")) == [
        f"x-{i:05d}-of-00016.done" for i in range(10)
    ]
    assert not (out / "x.manifest.json").exists()
    flag.touch()
    # Both executors write the same bytes, so the local one may finish a Ray run.
    done = subprocess.run(
        [*command, "--resume", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(10 kept from an earlier run)" in done.stdout
    assert _through_a_pipeline(f"{out / 'x'}@16", pickle.loads) == rows[100_000:150_000]


def _kill_once(flag):
    def transform(row):
        if row["id"] == 61_234 and not os.path.exists(flag):
            with open(flag, "w"):
                pass
            os.kill(os.getpid(), signal.SIGKILL)  # the Ray worker process dies mid-shard
        return row

    return transform


@pytest.mark.timeout(300)
def test_a_killed_ray_worker_is_retried_and_the_result_is_exact(ray_cluster, corpus, tmp_path):
    root, rows = corpus
    flag = str(tmp_path / "killed")
    result = convert(
        root / "parquet" / "part-1.parquet",  # rows 50 000 to 100 000
        tmp_path / "out/train",
        num_shards=16,
        executor="ray",
        transform=_kill_once(flag),
    )
    assert os.path.exists(flag)
    assert _through_a_pipeline(result.pattern, pickle.loads) == rows[50_000:100_000]
    assert not [name for name in os.listdir(tmp_path / "out") if ".tmp-" in name]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cluster_started_with_ray_start_at_its_address(head_address, corpus, tmp_path):
    root, rows = corpus
    convert_command = [
        GRAIN, "convert", str(root / "jsonl"),
        str(tmp_path / "out/train"), "--num-shards", "16", "--executor", "ray",
        "--ray-address", head_address,
    ]  # fmt: skip
    done = subprocess.run(convert_command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"to {tmp_path / 'out/train'}@16 (ray at {head_address})" in done.stdout
    assert _through_a_pipeline(f"{tmp_path / 'out/train'}@16", json.loads) == rows


def _slow(row):
    time.sleep(0.0001)  # about 3 s a shard: long enough for several reports
    return row


@pytest.mark.timeout(300)
def test_ray_reports_the_records_of_running_shards(ray_cluster, corpus, tmp_path, monkeypatch):
    from grain_convert._convert import _Events

    root, rows = corpus
    seen = []
    real = _Events.progress

    def spy(self, index, records):
        seen.append((index, records))
        real(self, index, records)

    monkeypatch.setattr(_Events, "progress", spy)
    result = convert(
        root / "parquet" / "part-3.parquet",  # rows 150 000 to 200 000
        tmp_path / "out/train",
        num_shards=2,
        executor="ray",
        transform=_slow,
    )
    assert _through_a_pipeline(result.pattern, pickle.loads) == rows[150_000:]
    # Records within a shard, before its end: the bar moves while shards run.
    assert any(0 < records < 25_000 for _, records in seen), seen
    assert {index for index, _ in seen} <= {0, 1}
