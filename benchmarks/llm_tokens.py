"""Tokens per second of an LLM input pipeline: text -> tokenize -> pack to 2048 -> batch 32.

Usage: python benchmarks/llm_tokens.py [--repeats 3] [--documents 3000] [--cases a,b]
       (--size is --documents, for compare.py --bench llm_tokens)

Modelled on MaxText's standalone data-loader measurement (iterate the training
input pipeline alone, no model, and count the tokens of the batches it hands
out). Runs unchanged under this workspace's `grain` and under upstream
grain==0.2.18 (`python -m benchmarks --only llm_tokens` runs both, rounds
interleaved; compare.py's venv gets the same `tokenizers` version as ours).

Everything is made inside the run, nothing is downloaded:

- text: `--documents` documents of pseudo-words (a 5 000-word vocabulary built
  from syllables, Zipf-distributed word frequencies, lognormal document lengths
  with a median of ~400 words, sentences of ~15 words), from numpy's generator
  with seed 0, so both implementations read the same text (`text_digest`);
- a tokenizer: byte-pair encoding with an 8 192-token vocabulary, trained with the
  `tokenizers` package on the first 1 000 documents (whitespace pre-tokenizer);
- the pipeline, as MaxText's Grain pretraining pipeline builds it:

      grain.MapDataset.source(texts).shuffle(seed=0).map(Tokenize())   # ids[:2048]
          .to_iter_dataset()
      FirstFitPackIterDataset(length_struct={"tokens": 2048}, num_packing_bins=32,
                              shuffle_bins=False).batch(32, drop_remainder=True)
      .mp_prefetch(MultiprocessingOptions(num_workers=W))   # W = 2; none for W = 0

Cases `workers_0` and `workers_2`. A line gives `tokens_per_s` (the batches'
tokens, 32 x 2048 per batch, padding included: the figure MaxText reports),
`real_tokens_per_s` (document tokens only) and `tokens_per_s_per_core` (over the
cores the case can use: 1 without workers, else min(CPUs, workers + 1)), the
median of `repeats` full passes after an untimed checked pass;
`tokens_per_cpu_s`, the batches' tokens per CPU second of this process and its
workers (reaped after each pass; `cpu_complete` false if one outlived it), a
per-core figure that a busy machine disturbs much less than wall time; `first_batch_s`
(from `iter()` to the first batch, workers started included, median), and the
process's peak RSS. `elements` counts the batches' tokens, so the runner's
elements/s is tokens/s. Every pass is checked: the non-padding tokens of all
batches are, as a multiset, the documents' tokens minus those of the partial
batches that `drop_remainder` leaves out (less than one batch's worth per
stream that is batched: ours batches the merged stream in the consuming
process, upstream's workers each pack and batch their own slice, so up to one
per worker), and every batch is [32, 2048]; `ok` is false and
`failed_checks` says why otherwise. For scale, MaxText's published Grain
figures are 55 k-546 k tokens/s per TPU host.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import multiprocessing
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any

import numpy as np
import tokenizers
from _bench_common import grain_version, implementation, json_stdout
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import grain

SEQUENCE = 2048
BATCH = 32
BINS = 32
VOCAB = 8192
WORDS = 5000
CASES = {"workers_0": 0, "workers_2": 2}


def make_texts(n: int) -> list[str]:
    """N documents of pseudo-words; the same for a given n on every numpy >= 1.17."""
    rng = np.random.default_rng(0)
    consonants = [*"bcdfghjklmnprstvwz", "ch", "sh", "th", "qu", "st"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"]
    syllables = np.array([c + v for c in consonants for v in vowels])
    sizes = rng.integers(1, 5, size=WORDS)
    picks = rng.integers(0, len(syllables), size=int(sizes.sum()))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    words = np.array(
        ["".join(syllables[picks[bounds[k] : bounds[k + 1]]]) for k in range(WORDS)], dtype=object
    )
    zipf = 1.0 / np.arange(1, WORDS + 1) ** 1.1
    zipf /= zipf.sum()
    lengths = np.clip(rng.lognormal(6.0, 0.9, size=n), 20, 6000).astype(np.int64)
    indices = rng.choice(WORDS, size=int(lengths.sum()), p=zipf)
    stops = rng.random(int(lengths.sum())) < 1 / 15
    tokens = np.where(stops, words[indices] + ".", words[indices])
    ends = np.cumsum(lengths)
    return [" ".join(tokens[end - size : end]) for end, size in zip(ends, lengths, strict=True)]


def train_tokenizer(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["[PAD]", "[UNK]"], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


class Tokenize:
    """Text -> {"tokens": int32 ids}, truncated to the sequence length (MaxText truncates)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> dict[str, np.ndarray]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids[:SEQUENCE]
        return {"tokens": np.asarray(ids, dtype=np.int32)}


def build(texts: list[str], tokenizer: Tokenizer, workers: int) -> Any:
    ds = grain.MapDataset.source(texts).shuffle(seed=0).map(Tokenize(tokenizer))
    packed = grain.experimental.FirstFitPackIterDataset(
        ds.to_iter_dataset(),
        length_struct={"tokens": SEQUENCE},
        num_packing_bins=BINS,
        shuffle_bins=False,
    )
    batches = packed.batch(BATCH, drop_remainder=True)
    if workers:
        options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=4)
        batches = batches.mp_prefetch(options)
    return batches


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _reap_workers(timeout_s: float = 20.0) -> bool:
    """Waits for the worker processes to end (so their CPU time counts); True if they did."""
    gc.collect()
    deadline = time.monotonic() + timeout_s
    while multiprocessing.active_children():  # joins the ones that ended
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclasses.dataclass
class Pass:
    first_s: float
    wall_s: float
    cpu_s: float
    cpu_complete: bool
    histogram: np.ndarray
    batches: int
    failed: list[str]


def one_pass(ds: Any) -> Pass:
    """One pass over the pipeline, timed from `iter()` until its workers have ended."""
    histogram = np.zeros(VOCAB, dtype=np.int64)
    failed = []
    count = 0
    cpu = _cpu_s()
    start = time.perf_counter()
    first = 0.0
    iterator = iter(ds)
    for batch in iterator:
        if not count:
            first = time.perf_counter() - start
        count += 1
        tokens, segments = batch["tokens"], batch["tokens_segment_ids"]
        if tokens.shape != (BATCH, SEQUENCE):
            failed.append("shape")
        histogram += np.bincount(tokens[segments > 0], minlength=VOCAB)[:VOCAB]
    elapsed = time.perf_counter() - start
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
    del iterator
    complete = _reap_workers()
    return Pass(first, elapsed, _cpu_s() - cpu, complete, histogram, count, failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--documents", "--size", dest="documents", type=int, default=3000)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    names = [name for name in args.cases.split(",") if name]
    if [name for name in names if name not in CASES] or args.repeats < 1 or args.documents < 1:
        parser.error(f"--cases from {list(CASES)}; --repeats and --documents positive")
    # Forked workers must not inherit the tokenizer's thread pool (read when it is used).
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = json_stdout()
    texts = make_texts(args.documents)
    text_digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    start = time.perf_counter()
    tokenizer = train_tokenizer(texts[:1000])
    train_s = time.perf_counter() - start
    vocab_digest = hashlib.sha256(
        json.dumps(sorted(tokenizer.get_vocab().items())).encode()
    ).hexdigest()[:16]
    tokenize = Tokenize(tokenizer)
    expected = np.zeros(VOCAB, dtype=np.int64)
    start = time.perf_counter()
    for text in texts:
        expected += np.bincount(tokenize(text)["tokens"], minlength=VOCAB)[:VOCAB]
    tokenize_s = time.perf_counter() - start  # one core, no pipeline: the floor
    cpus = os.cpu_count() or 1
    for name in names:
        workers = CASES[name]
        failed: list[str] = []
        checked = one_pass(build(texts, tokenizer, workers))
        histogram, batches = checked.histogram, checked.batches
        failed += checked.failed
        left_out = expected - histogram
        # drop_remainder leaves out less than one batch of packed sequences per stream
        # that is batched: one here, and one per worker where each worker packs and
        # batches its own slice (upstream's workers do).
        if (left_out < 0).any() or left_out.sum() >= max(1, workers) * BATCH * SEQUENCE:
            failed.append("tokens_once")
        passes = [one_pass(build(texts, tokenizer, workers)) for _ in range(args.repeats)]
        for again in passes:
            failed += again.failed
            if again.batches != batches or not np.array_equal(again.histogram, histogram):
                failed.append("deterministic")
        median = statistics.median(p.wall_s for p in passes)
        cpu = statistics.median(p.cpu_s for p in passes)
        produced = batches * BATCH * SEQUENCE
        cores = 1 if workers == 0 else min(cpus, workers + 1)
        line: dict[str, Any] = {
            "benchmark": "llm_tokens",
            "case": name,
            "workers": workers,
            "elements": produced,
            "batches": batches,
            "median_s": round(median, 6),
            "tokens_per_s": round(produced / median),
            "real_tokens_per_s": round(int(histogram.sum()) / median),
            "tokens_per_s_per_core": round(produced / median / cores),
            "cores": cores,
            "tokens_per_cpu_s": round(produced / cpu),
            "cpu_s": round(cpu, 3),
            "cpu_complete": all(p.cpu_complete for p in passes),
            "padding_fraction": round(1 - int(histogram.sum()) / produced, 4),
            "first_batch_s": round(statistics.median(p.first_s for p in passes), 4),
            "tokenize_only_tokens_per_s": round(int(expected.sum()) / tokenize_s),
            "tokenizer_train_s": round(train_s, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "documents": args.documents,
            "text_digest": text_digest,
            "vocab_digest": vocab_digest,
            "repeats": args.repeats,
            "ok": not failed,
            "implementation": implementation(),
            "grain_version": grain_version(),
            "tokenizers": tokenizers.__version__,
            "python": platform.python_version(),
            "cpus": cpus,
            "load": round(os.getloadavg()[0], 2),
        }
        if failed:
            line["failed_checks"] = sorted(set(failed))
        out.write(json.dumps(line) + "\n")
        out.flush()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
