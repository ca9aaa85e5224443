"""An LLM pre-training input pipeline written the way MaxText writes its Grain one.

ArrayRecord files of text -> global shuffle -> host sharding by slicing ->
parse -> ``IterDataset.apply(FlatMapTransform)`` that tokenizes and chunks each
document -> first-fit packing -> ``batch(batch_fn=batch_and_pad)`` -> shift for
teacher forcing -> ``mp_prefetch`` with worker processes, all through
``import grain.python as grain``. Checked: every token of the host's documents
arrives exactly once, batches have the static shape a jitted step needs, and a
checkpoint taken mid-epoch resumes to exactly the rest of the epoch.
"""

import dataclasses
import functools
import json

import numpy as np
import pytest

import grain.python as grain

ArrayRecordWriter = pytest.importorskip(
    "array_record.python.array_record_module", reason="array-record has no free-threaded wheel"
).ArrayRecordWriter

pytestmark = pytest.mark.timeout(240)

MAX_LEN, BATCH, HOSTS = 16, 4, 2
PAD = 0


def write_corpus(directory, docs=60, files=3):
    rng = np.random.default_rng(5)
    paths, doc = [], 0
    for f in range(files):
        path = str(directory / f"corpus-{f:05d}-of-{files:05d}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for _ in range(docs // files):
            words = " ".join(f"d{doc}w{w}" for w in range(int(rng.integers(1, 40))))
            writer.write(json.dumps({"id": doc, "text": words}).encode())
            doc += 1
        writer.close()
        paths.append(path)
    return paths


def transforms():
    """The pipeline's transforms, MaxText's shapes of them.

    Defined inside a function: the workers of a pipeline over ArrayRecord files
    start from the fork server, and pickle classes by value only when they
    cannot be imported by name (pytest imports this file by path).
    """

    def token(doc: int, word: int) -> int:
        # Unique per (document, word) so the test can account for every token.
        return doc * 1000 + word + 1

    @dataclasses.dataclass
    class ParseFeatures(grain.MapTransform):
        column: str

        def map(self, record: bytes):
            return {self.column: json.loads(record)[self.column]}

    @dataclasses.dataclass
    class TokenizeAndChunk(grain.experimental.FlatMapTransform):
        """Tokenizes a document and cuts it into pieces of at most `max_len` tokens."""

        column: str
        max_len: int
        max_fan_out: int = 8

        def flat_map(self, element):
            ids = [
                token(int(word[1:].split("w")[0]), int(word.split("w")[1]))
                for word in element[self.column].split()
            ]
            return [
                {"inputs": np.asarray(ids[i : i + self.max_len], np.int32)}
                for i in range(0, len(ids), self.max_len)
            ]

    class ShiftRight(grain.MapTransform):
        """Teacher forcing: targets are the inputs, inputs shifted right by one."""

        def map(self, batch):
            inputs = batch["inputs"]
            batch["targets"] = inputs.copy()
            batch["inputs"] = np.pad(inputs, ((0, 0), (1, 0)))[:, :-1]
            return batch

    return ParseFeatures, TokenizeAndChunk, ShiftRight


ParseFeatures, TokenizeAndChunk, ShiftRight = transforms()


def pipeline(paths, host, workers=2):
    ds = grain.MapDataset.source(grain.ArrayRecordDataSource(paths))
    ds = ds.shuffle(seed=17).repeat(1)
    ds = ds[host::HOSTS]  # sharding, as MaxText does it
    ds = ds.to_iter_dataset()
    ds = ds.map(ParseFeatures("text"))
    ds = ds.apply(TokenizeAndChunk("text", MAX_LEN))
    ds = grain.experimental.FirstFitPackIterDataset(
        ds, length_struct={"inputs": MAX_LEN}, num_packing_bins=BATCH
    )
    batch_fn = functools.partial(grain.experimental.batch_and_pad, batch_size=BATCH, pad_value=PAD)
    ds = ds.batch(BATCH, batch_fn=batch_fn)
    ds = ds.map(ShiftRight())
    return ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)
    )


def host_tokens(paths, host):
    source = grain.ArrayRecordDataSource(paths)
    order = grain.MapDataset.source(source).shuffle(seed=17)[host::HOSTS]
    tokens = []
    for record in order:
        tokens += [
            int(t)
            for chunk in TokenizeAndChunk("text", MAX_LEN).flat_map(
                ParseFeatures("text").map(record)
            )
            for t in chunk["inputs"]
        ]
    return tokens


def delivered_tokens(batches):
    tokens = []
    for batch in batches:
        real = batch["inputs_segment_ids"] > 0
        tokens += batch["targets"][real].tolist()
    return tokens


def test_every_token_once_in_static_shapes(tmp_path):
    paths = write_corpus(tmp_path)
    everything = []
    for host in range(HOSTS):
        batches = list(pipeline(paths, host))
        for batch in batches:
            assert batch["inputs"].shape == (BATCH, MAX_LEN)
            assert batch["targets"].dtype == np.int32
            assert set(batch) >= {"inputs", "targets", "inputs_segment_ids", "inputs_positions"}
        tokens = delivered_tokens(batches)
        assert sorted(tokens) == sorted(host_tokens(paths, host))
        everything += tokens
    all_docs = {t // 1000 for t in everything}
    assert len(all_docs) == 60
    assert len(everything) == len(set(everything))


def test_checkpoint_mid_epoch_resumes_exactly(tmp_path):
    paths = write_corpus(tmp_path)
    expected = list(pipeline(paths, host=1))
    it = iter(pipeline(paths, host=1))
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(it.get_state()))  # as a checkpoint file holds it
    it.close()
    resumed = iter(pipeline(paths, host=1))
    resumed.set_state(state)
    rest = list(resumed)
    assert len(head) + len(rest) == len(expected)
    for got, want in zip(head + rest, expected, strict=True):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
