"""Mixing three corpora by tokens, not by documents: `mix(..., costs=...)`.

Run: uv run python docs/examples/mix_by_tokens.py [--workdir DIR]

Three corpora whose documents differ ~10x in mean length are converted with
`grain convert --lengths` (which writes each record's token count beside the
shards), then mixed 50 / 30 / 20 by tokens:

1. `MapDataset.mix(..., costs=[manifest, ...])`: random access, the weights
   hold as shares of tokens; compared with the same weights as record shares.
2. `IterDataset.mix(..., costs=function)`: for streams, the cost is computed
   from each element as it is read; a checkpoint taken midway restores
   exactly.

It prints each mix's token shares and exits with status 1 if the token mix
misses its targets by more than 1 % (an assertion the test relies on).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import pickle
import tempfile

import numpy as np

import grain
from grain.convert import convert

WEIGHTS = {"web": 0.5, "code": 0.3, "books": 0.2}
MEAN_WORDS = {"web": 30, "code": 90, "books": 300}
DOCS = {"web": 3000, "code": 1000, "books": 300}


def write_corpus(directory: pathlib.Path, name: str, seed: int) -> pathlib.Path:
    """A JSON lines corpus of documents with lognormal lengths (in words)."""
    rng = np.random.default_rng(seed)
    path = directory / f"{name}.jsonl"
    lengths = rng.lognormal(np.log(MEAN_WORDS[name]), 0.7, DOCS[name]).astype(int) + 1
    with path.open("w") as file:
        for i, n in enumerate(lengths):
            file.write(json.dumps({"source": name, "id": i, "text": " ".join(["w"] * n)}) + "\n")
    return path


def tokenize(record: dict) -> dict:
    # A stand-in tokenizer: one token per word. Pickled to convert's workers.
    return {"source": record["source"], "id": record["id"], "tokens": record["text"].split()}


def token_shares(elements) -> dict[str, float]:
    counts = dict.fromkeys(WEIGHTS, 0)
    for element in elements:
        counts[element["source"]] += len(element["tokens"])
    total = sum(counts.values())
    return {name: round(count / total, 4) for name, count in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=pathlib.Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="mix_by_tokens_"))
    workdir.mkdir(parents=True, exist_ok=True)

    # 1. Convert each corpus; `lengths="tokens"` writes len(record["tokens"]) per record.
    parts, manifests = [], []
    for seed, name in enumerate(WEIGHTS):
        source = write_corpus(workdir, name, seed)
        result = convert(
            source,
            workdir / name,
            num_shards=2,
            workers=2,
            transform=tokenize,
            lengths="tokens",
            overwrite=True,
            progress=False,
        )
        records = grain.sources.ArrayRecordDataSource(result.pattern)
        parts.append(grain.MapDataset.source(records).map(pickle.loads))  # row_format pickle
        manifests.append(result.manifest_path)

    weights = list(WEIGHTS.values())
    by_records = grain.MapDataset.mix(parts, weights)
    by_tokens = grain.MapDataset.mix(parts, weights, costs=manifests)
    print("targets              ", WEIGHTS)
    print("record weights       ", token_shares(by_records))
    shares = token_shares(by_tokens)
    print("token weights (map)  ", shares, f"{len(by_tokens)} documents")
    assert all(abs(shares[name] - w) < 0.01 for name, w in WEIGHTS.items()), shares

    # Random access is O(1): any position, in any order, without reading the others.
    print("by_tokens[1234]      ", by_tokens[1234]["source"], by_tokens[1234]["id"])

    # 2. Streams: a cost function of the element; the state is exact at any step.
    streams = [part.repeat().to_iter_dataset() for part in parts]
    mixed = grain.IterDataset.mix(streams, weights, costs=lambda x: len(x["tokens"]))
    iterator = iter(mixed)
    first = [next(iterator) for _ in range(2000)]
    state = iterator.get_state()
    expected = [next(iterator) for _ in range(500)]
    restored = iter(mixed)
    restored.set_state(state)
    assert [next(restored) for _ in range(500)] == expected
    shares = token_shares(first + expected)
    print("token weights (iter) ", shares, "restored exactly after 2000 documents")
    assert all(abs(shares[name] - w) < 0.01 for name, w in WEIGHTS.items()), shares
    print("checkpoint keys      ", sorted(state))


if __name__ == "__main__":
    main()
