"""ArrayRecordDataSource from object stores: real servers on 127.0.0.1 (see conftest.py).

Every read is compared with the C++ reader on the same file through a local path.
"""

from __future__ import annotations

import pickle
import random
import time

import numpy as np
import pytest

from grain_sources import ArrayRecordDataSource, write_array_record
from grain_sources._array_record_remote import RemoteArrayRecordDataSource
from grain_sources._checks import NoSuchFileError, UnreadableFileError
from grain_sources._object_store import (
    ObjectAccessDeniedError,
    ObjectStore,
    ObjectStoreError,
    RetryPolicy,
)

pytestmark = pytest.mark.timeout(120)


def _records(count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 300)) + b"%d" % i for i in range(count)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three local shards (group_size:1, zstd) and their records."""
    records = _records(300)
    base = tmp_path_factory.mktemp("shards") / "data"
    paths = write_array_record(records, base, num_shards=3, options="group_size:1,zstd:3")
    return paths, records


@pytest.fixture(scope="module")
def s3_shards(moto_s3, shards):
    paths, records = shards
    urls = [moto_s3.put(path, path.rsplit("/", 1)[1]) for path in paths]
    return urls, records


def test_reads_every_record_from_s3_in_any_order(moto_s3, s3_shards):
    urls, records = s3_shards
    source = ArrayRecordDataSource("s3://bkt/data@3", filesystem=moto_s3.filesystem())
    assert isinstance(source, ArrayRecordDataSource)
    assert isinstance(source, RemoteArrayRecordDataSource)
    assert source.paths == urls
    assert len(source) == len(records)
    order = np.random.default_rng(0).permutation(len(records))
    assert source.__getitems__(order) == [records[i] for i in order]
    assert source[-1] == records[-1]
    assert source[5] == records[5]
    assert list(source) == records


def test_globs_list_the_bucket(moto_s3, s3_shards):
    urls, _ = s3_shards
    source = ArrayRecordDataSource("s3://bkt/data-*", filesystem=moto_s3.filesystem())
    assert source.paths == urls


def test_the_pickled_source_carries_the_index_and_reads_without_reopening(moto_s3, s3_shards):
    urls, records = s3_shards
    source = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem())
    copy = pickle.loads(pickle.dumps(source))
    assert len(copy) == len(records)
    before = copy.store.requests
    assert copy.__getitems__([0, 150, 299]) == [records[0], records[150], records[299]]
    # One range read per record of a group_size:1 file, nothing else (no footer, no size).
    assert copy.store.requests - before == 3


def test_reads_from_threads_at_once(moto_s3, s3_shards):
    import concurrent.futures

    urls, records = s3_shards
    source = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem())
    chunks = np.array_split(np.random.default_rng(1).permutation(len(records)), 16)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(source.__getitems__, chunks))
    for chunk, got in zip(chunks, results, strict=True):
        assert got == [records[i] for i in chunk]


def test_reads_from_gcs(fake_gcs, shards):
    paths, records = shards
    urls = [fake_gcs.put(path, "g-" + path.rsplit("/", 1)[1]) for path in paths]
    source = ArrayRecordDataSource(urls)
    order = np.random.default_rng(2).permutation(len(records))[:100]
    assert source.__getitems__(order) == [records[i] for i in order]


def test_a_worker_started_without_the_emulator_variable_reads_the_same_server(
    fake_gcs, shards, tmp_path
):
    import os
    import subprocess
    import sys

    paths, records = shards
    url = fake_gcs.put(paths[0], "w-" + paths[0].rsplit("/", 1)[1])
    (tmp_path / "source.pkl").write_bytes(pickle.dumps(ArrayRecordDataSource(url)))
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    script = (
        "import pickle, sys; source = pickle.load(open(sys.argv[1], 'rb')); "
        "sys.stdout.buffer.write(source[7])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "source.pkl")],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == records[7]


@pytest.mark.parametrize(
    "options",
    ["group_size:7,brotli:3", "group_size:16,snappy", "group_size:4,uncompressed"],
)
def test_grouped_and_compressed_files_from_s3_match_the_cpp_reader(moto_s3, tmp_path, options):
    records = _records(120, seed=3)
    (path,) = write_array_record(records, tmp_path / "g.ar", options=options)
    url = moto_s3.put(path, f"grouped-{abs(hash(options))}.ar")
    source = ArrayRecordDataSource(url, filesystem=moto_s3.filesystem())
    local = ArrayRecordDataSource(path)
    order = np.random.default_rng(4).permutation(len(records))
    assert source.__getitems__(order) == local.__getitems__(order)
    before = source.store.requests
    source.__getitems__(order)  # every chunk is cached now
    assert source.store.requests == before


# -- errors -----------------------------------------------------------------------------


def _fast_policy() -> RetryPolicy:
    return RetryPolicy(attempts=4, deadline_s=3.0, attempt_timeout_s=1.0, backoff_s=0.05)


def test_a_missing_object_or_bucket_is_named(moto_s3):
    fs = moto_s3.filesystem()
    for url in ("s3://bkt/no-such-object", "s3://no-such-bucket/x.ar", "s3://bkt/none@2"):
        with pytest.raises(NoSuchFileError, match=r"does not exist") as error:
            ArrayRecordDataSource(url, filesystem=fs)
        assert url.split("@")[0] in str(error.value)
    with pytest.raises(NoSuchFileError, match=r"no object matches the pattern 's3://bkt/zz-\*'"):
        ArrayRecordDataSource("s3://bkt/zz-*", filesystem=fs)


def test_a_file_of_another_format_is_named_never_zero_records(moto_s3, tmp_path):
    (tmp_path / "text").write_bytes(b"hello, world\n" * 10000)
    (tmp_path / "empty").write_bytes(b"")
    fs = moto_s3.filesystem()
    with pytest.raises(UnreadableFileError, match=r"'s3://bkt/text' is not a readable ArrayRecord"):
        ArrayRecordDataSource(moto_s3.put(tmp_path / "text", "text"), filesystem=fs)
    with pytest.raises(UnreadableFileError, match=r"'s3://bkt/empty' is empty"):
        ArrayRecordDataSource(moto_s3.put(tmp_path / "empty", "empty"), filesystem=fs)


def test_a_wrong_url_protocol_is_named():
    with pytest.raises(ValueError, match=r"unknown URL protocol 'nosuchproto'"):
        ArrayRecordDataSource("nosuchproto://bucket/x.ar")


def test_a_corrupt_chunk_is_caught_by_its_hash(moto_s3, tmp_path):
    records = _records(20, seed=5)
    (path,) = write_array_record(records, tmp_path / "c.ar")
    data = bytearray((tmp_path / "c.ar").read_bytes())
    local = ArrayRecordDataSource(path)
    del local
    data[64 + 40 + 5] ^= 0xFF  # inside the data of the first chunk
    (tmp_path / "bad.ar").write_bytes(bytes(data))
    source = ArrayRecordDataSource(
        moto_s3.put(tmp_path / "bad.ar", "bad.ar"), filesystem=moto_s3.filesystem()
    )
    assert source[1] == records[1]
    with pytest.raises(UnreadableFileError, match=r"'s3://bkt/bad.ar'.*wrong hash"):
        source[0]
    # A batch verifies its chunks together: the bad one is still named.
    with pytest.raises(UnreadableFileError, match=r"'s3://bkt/bad.ar': the data of the chunk at"):
        source.__getitems__(np.arange(20)[::-1])


def test_denied_access_is_named_at_once(moto_s3, fault_proxy, s3_shards):
    fault_proxy.plan = lambda n: "403"
    start = time.monotonic()
    with pytest.raises(ObjectAccessDeniedError, match=r"access to 's3://bkt/data-00000-of-00003'"):
        ArrayRecordDataSource(
            s3_shards[0][0],
            filesystem=moto_s3.filesystem(fault_proxy.endpoint),
            retry=RetryPolicy(attempts=50, deadline_s=20),
        )
    # Not retried until the deadline (s3fs itself asks a few ways, HEAD then listings).
    assert time.monotonic() - start < 8


@pytest.mark.parametrize("fault", ["503", "reset", 5.0])
def test_a_server_that_keeps_failing_is_named_within_the_deadline(
    moto_s3, fault_proxy, s3_shards, fault
):
    fault_proxy.plan = lambda n: fault
    policy = _fast_policy()
    start = time.monotonic()
    with pytest.raises(ObjectStoreError, match=r"'s3://bkt/data-00000-of-00003' failed") as error:
        ArrayRecordDataSource(
            s3_shards[0][0], filesystem=moto_s3.filesystem(fault_proxy.endpoint), retry=policy
        )
    elapsed = time.monotonic() - start
    assert elapsed < policy.deadline_s + 2, elapsed
    assert "deadline 3 s" in str(error.value)
    if fault != 5.0:
        assert fault_proxy.requests >= 2  # retried


def test_nothing_listening_is_named_within_the_deadline(moto_s3):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fs = moto_s3.filesystem(f"http://127.0.0.1:{port}")
    policy = _fast_policy()
    start = time.monotonic()
    with pytest.raises(ObjectStoreError, match=r"'s3://bkt/x.ar' failed"):
        ArrayRecordDataSource("s3://bkt/x.ar", filesystem=fs, retry=policy)
    # The policy's 3 s deadline, with room for a loaded machine (6.1 s was seen beside
    # other test runs); a request that ignored it would take the default 60 s.
    assert time.monotonic() - start < policy.deadline_s + 5


def test_transient_faults_are_retried_and_every_record_is_right(moto_s3, fault_proxy, s3_shards):
    urls, records = s3_shards
    faults = ["503", "reset", 0.2]
    fault_proxy.plan = lambda n: faults[n % 3] if n % 2 else None
    source = ArrayRecordDataSource(
        urls,
        filesystem=moto_s3.filesystem(fault_proxy.endpoint),
        retry=RetryPolicy(attempts=8, deadline_s=30, attempt_timeout_s=5, backoff_s=0.01),
    )
    order = np.random.default_rng(6).permutation(len(records))[:60]
    got = []
    for chunk in np.array_split(order, 6):
        got += source.__getitems__(chunk)
    assert got == [records[i] for i in order]
    assert fault_proxy.faults >= 20


def test_the_store_rebuilds_its_filesystem_in_a_new_process(moto_s3):
    store = ObjectStore("s3", filesystem=moto_s3.filesystem())
    copy = pickle.loads(pickle.dumps(store))
    copy._pid = -1  # as after a fork
    assert copy._filesystem() is not store._filesystem()


@pytest.mark.slow
def test_reads_from_seaweedfs(seaweed_s3, shards):
    paths, records = shards
    urls = [seaweed_s3.put(path, path.rsplit("/", 1)[1]) for path in paths]
    source = ArrayRecordDataSource(urls, filesystem=seaweed_s3.filesystem())
    order = np.random.default_rng(7).permutation(len(records))
    assert source.__getitems__(order) == [records[i] for i in order]


# -- the same pipelines as on local files --------------------------------------------------


def _pipeline(source, other, threads=0):
    import grain

    shuffled = grain.MapDataset.source(source).shuffle(seed=3)
    mixed = grain.MapDataset.mix([shuffled, grain.MapDataset.source(other)], [0.7, 0.3])
    iterable = mixed.to_iter_dataset(grain.ReadOptions(num_threads=threads))
    return iterable.filter(lambda r: r[-1] % 2 == 0).map(len).batch(4)


@pytest.mark.timeout(180)
def test_pipelines_from_a_bucket_give_the_elements_of_local_files(moto_s3, s3_shards, shards):
    import grain
    import grain.experimental as ge

    urls, _ = s3_shards
    paths, _ = shards
    bucket = ArrayRecordDataSource(urls[:2], filesystem=moto_s3.filesystem())
    bucket_other = ArrayRecordDataSource(urls[2], filesystem=moto_s3.filesystem())
    local = ArrayRecordDataSource(paths[:2])
    local_other = ArrayRecordDataSource(paths[2])
    expected = [batch.tolist() for batch in _pipeline(local, local_other)]
    assert len(expected) > 20
    got = [batch.tolist() for batch in _pipeline(bucket, bucket_other, threads=8)]
    assert got == expected

    workers = _pipeline(bucket, bucket_other, threads=8).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)
    )
    local_workers = _pipeline(local, local_other).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)
    )
    assert [b.tolist() for b in workers] == [b.tolist() for b in local_workers]
    # A restore in the middle of the first dozen batches (each pass re-reads the bucket).
    ge.assert_equal_output_after_checkpoint(workers, max_steps=12, steps=[7])


# -- read-ahead, coalescing, block shuffle -----------------------------------------------


def test_read_ahead_walks_the_index_stream_within_the_budget(moto_s3, s3_shards):
    urls, records = s3_shards
    source = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem())
    order = np.random.default_rng(8).permutation(len(records))
    budget = 8 << 10
    reads = []
    real = source.__getitems__

    def spy(indices):
        reads.append(len(indices))
        return real(indices)

    source.__getitems__ = spy
    assert list(source.read_ahead(order, budget_bytes=budget)) == [records[i] for i in order]
    assert len(reads) > 5
    # Each window holds about budget / 2 of chunk bytes (chunks of ~200 bytes here).
    assert max(reads) * 100 < budget
    partial = source.read_ahead(order, budget_bytes=budget)
    assert next(partial) == records[order[0]]
    partial.close()  # stops reading ahead; no thread is left behind


def test_neighbouring_chunks_are_read_in_one_request(moto_s3, s3_shards):
    urls, records = s3_shards
    source = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem())
    before = source.store.requests
    assert source.__getitems__(np.arange(10, 60)) == records[10:60]
    assert source.store.requests - before == 1
    apart = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem(), coalesce_gap_bytes=None)
    before = apart.store.requests
    assert apart.__getitems__(np.arange(10, 60)) == records[10:60]
    assert apart.store.requests - before == 50
    # Records two apart: a 1 KiB gap allows merging them, with the bytes between dropped.
    gapped = ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem(), coalesce_gap_bytes=1024)
    before = gapped.store.requests
    assert gapped.__getitems__(np.arange(10, 60, 2)) == records[10:60:2]
    assert gapped.store.requests - before == 1


def test_block_shuffle_keeps_blocks_together_and_every_record_once(moto_s3, s3_shards):
    from grain_sources import BlockShuffle
    from grain_sources._block_shuffle import block_permutation

    urls, records = s3_shards
    source = BlockShuffle(ArrayRecordDataSource(urls, filesystem=moto_s3.filesystem()), 16, 3)
    assert len(source) == len(records)
    before = source._source.store.requests
    got = source.__getitems__(np.arange(32))
    assert source._source.store.requests - before <= 2  # two blocks, one request each
    order = block_permutation(len(records), 16, 3)
    assert got == [records[i] for i in order[:32]]
    for seed in range(5):
        perm = block_permutation(301, 16, seed)
        assert sorted(perm.tolist()) == list(range(301))
        blocks = perm // 16
        # Each block's records are consecutive positions of the output.
        assert (np.diff(np.flatnonzero(np.diff(blocks) != 0)) <= 16).all()
    assert not np.array_equal(block_permutation(301, 16, 0), block_permutation(301, 16, 1))
    copy = pickle.loads(pickle.dumps(source))
    assert copy[5] == source[5]


# -- Parquet and TFRecord from buckets ---------------------------------------------------


def test_parquet_rows_from_a_bucket_match_the_local_file(moto_s3, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from grain_sources import ParquetReader

    table = pa.table({"x": list(range(500)), "s": [str(i) * 3 for i in range(500)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=100)
    url = moto_s3.put(tmp_path / "t.parquet", "t.parquet")
    fs = moto_s3.filesystem()
    local = list(ParquetReader(tmp_path / "t.parquet"))
    remote = ParquetReader(url, filesystem=fs, row=250)
    assert remote.num_row_groups == 5
    assert list(remote) == local[250:]
    assert (
        pickle.loads(pickle.dumps(ParquetReader(url, filesystem=fs, row=7))).__next__() == local[7]
    )
    with pytest.raises(NoSuchFileError, match=r"'s3://bkt/none.parquet' does not exist"):
        ParquetReader("s3://bkt/none.parquet", filesystem=fs)


def test_tfrecords_from_a_bucket_by_index_with_and_without_a_sidecar(moto_s3, tmp_path, caplog):
    from grain_sources import (
        TFRecordDataSource,
        TFRecordReader,
        write_tfrecord,
        write_tfrecord_index,
    )

    records = _records(80, seed=9)
    write_tfrecord(records, tmp_path / "a.tfrecord")
    url = moto_s3.put(tmp_path / "a.tfrecord", "a.tfrecord")
    fs = moto_s3.filesystem()
    assert list(TFRecordReader(url, filesystem=fs, buffer_size=1000)) == records
    with caplog.at_level("WARNING"):
        built = TFRecordDataSource(url, filesystem=fs)
    assert "has no offset index" in caplog.text
    order = np.random.default_rng(10).permutation(len(records))
    assert built.__getitems__(order) == [records[i] for i in order]
    sidecar = write_tfrecord_index(url, filesystem=fs)
    assert sidecar == url + ".offsets.npy"
    caplog.clear()
    with caplog.at_level("WARNING"):
        indexed = TFRecordDataSource(url, filesystem=fs)
    assert caplog.text == ""
    before = indexed._store.requests
    assert indexed.__getitems__(order[:10]) == [records[i] for i in order[:10]]
    assert indexed._store.requests - before == 10
    copy = pickle.loads(pickle.dumps(indexed))
    assert copy[3] == records[3]
    local = TFRecordDataSource(tmp_path / "a.tfrecord")
    assert local[-1] == records[-1]


# -- grain convert / grain inspect with bucket URLs ----------------------------------------


def _grain_cli(endpoint: str):
    """Runs the `grain` command against the S3 server at `endpoint`."""
    import os
    import shutil
    import subprocess
    import sys

    grain_command = shutil.which("grain", path=os.path.dirname(sys.executable))
    assert grain_command is not None
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }

    def grain_cli(*args):
        return subprocess.run(
            [grain_command, *args], env=env, capture_output=True, text=True, timeout=90
        )

    return grain_cli


def test_grain_convert_and_inspect_take_bucket_urls(moto_s3, tmp_path):
    grain_cli = _grain_cli(moto_s3.endpoint)
    lines = [f'{{"i": {i}}}' for i in range(50)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    src = moto_s3.put(tmp_path / "in.jsonl", "cli/in.jsonl")
    done = grain_cli("convert", src, "s3://bkt/cli/out", "--num-shards", "2")
    assert done.returncode == 0, done.stderr
    assert "read 50 records back from the bucket" in done.stdout
    source = ArrayRecordDataSource("s3://bkt/cli/out@2", filesystem=moto_s3.filesystem())
    assert [r.decode() for r in source] == lines
    done = grain_cli("inspect", "s3://bkt/cli/out-00000-of-00002")
    assert done.returncode == 0, done.stderr
    assert "s3://bkt/cli/out-00000-of-00002" in done.stdout
    assert "25" in done.stdout
    done = grain_cli("inspect", "s3://bkt/cli/missing")
    assert done.returncode != 0
    assert "does not exist" in done.stderr


def test_grain_convert_leaves_the_tfrecord_index_beside_a_bucket_input(
    moto_s3, fault_proxy, tmp_path, caplog
):
    from grain_sources import TFRecordDataSource, write_tfrecord

    records = _records(120, seed=4)
    write_tfrecord(records, tmp_path / "a.tfrecord")
    src = moto_s3.put(tmp_path / "a.tfrecord", "cli-tf/a.tfrecord")
    done = _grain_cli(moto_s3.endpoint)("convert", src, str(tmp_path / "out" / "x"))
    assert done.returncode == 0, done.stderr
    assert moto_s3.fs.exists("bkt/cli-tf/a.tfrecord.offsets.npy")
    fs = moto_s3.filesystem()
    with caplog.at_level("WARNING"):
        source = TFRecordDataSource(src, filesystem=fs)
    assert caplog.text == ""  # no pass over the object: the sidecar was there and right
    order = np.random.default_rng(5).permutation(len(records))
    assert source.__getitems__(order) == [records[i] for i in order]

    # A bucket that refuses writes: the conversion goes on, one line says what was skipped.
    other = moto_s3.put(tmp_path / "a.tfrecord", "cli-tf-refused/a.tfrecord")
    fault_proxy.writes = "403"
    done = _grain_cli(fault_proxy.endpoint)("convert", other, str(tmp_path / "out" / "y"))
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if "not written to the bucket" in line]
    assert len(refused) == 1, done.stdout
    assert "denied" in refused[0]
    moto_s3.fs.invalidate_cache()
    assert not moto_s3.fs.exists("bkt/cli-tf-refused/a.tfrecord.offsets.npy")
