"""Batches filled to a token budget feed a jitted step that compiles a handful of times.

Run it:

    uv run python docs/examples/token_budget_batches.py [--documents 4000] [--workers 2]

What it shows:
  * documents of very different lengths (lognormal, 5 to 1 024 tokens) batched
    with `grain.experimental.TokenBudgetBatchIterDataset`: each batch holds as
    many documents as fit 8 192 padded tokens, padded to one of four lengths,
    with bucketing so that similar lengths share a batch;
  * `full_rows=True`: one batch shape per padded length, so the jitted step
    below compiles at most four times over the whole run, whatever the data
    (the script counts its traces);
  * the documents are made in worker processes (`mp_prefetch`); the batches are
    formed in this process, so they are the same with any worker count;
  * a checkpoint in the middle: a fresh iterator restored from the state
    continues with exactly the batches that followed.

It prints the padding fraction against fixed batches of 8 padded to 1 024.
Only numpy, jax and grain are needed.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import grain

VOCAB = 1000
PADDED_LENGTHS = [128, 256, 512, 1024]
BUDGET = 8192


def make_document(index: int) -> dict[str, np.ndarray]:
    """Document `index`: its tokens, from a generator keyed by the index (no state)."""
    rng = np.random.default_rng(index)
    length = int(np.clip(rng.lognormal(5.0, 0.9), 5, 1024))
    return {"tokens": rng.integers(1, VOCAB, size=length, dtype=np.int32)}


def batched(documents: int) -> grain.experimental.TokenBudgetBatchIterDataset:
    docs = grain.MapDataset.range(documents).shuffle(seed=7).map(make_document)
    return grain.experimental.TokenBudgetBatchIterDataset(
        docs.to_iter_dataset(),
        token_budget=BUDGET,
        padded_lengths=PADDED_LENGTHS,
        bucket_window=512,
        full_rows=True,
        sequence_keys=["tokens"],
    )


def pipeline(documents: int, workers: int) -> grain.IterDataset:
    batches = batched(documents)
    if workers:
        return batches.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return batches


TRACES = []


@jax.jit
def step(params: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
    """A toy loss: the masked mean of a per-token score (a real model goes here)."""
    TRACES.append(batch["tokens"].shape)  # runs once per compilation, not per call
    scores = jnp.tanh(params[batch["tokens"]])
    mask = batch["tokens_mask"]
    return jnp.sum(scores * mask) / jnp.maximum(jnp.sum(mask), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    params = jnp.linspace(-1.0, 1.0, VOCAB)
    ds = pipeline(args.documents, args.workers)
    slots = tokens = batches = 0
    shapes = set()
    state = None
    following = None
    with iter(ds) as iterator:
        for batch in iterator:
            step(params, {key: batch[key] for key in ("tokens", "tokens_mask")}).block_until_ready()
            slots += batch["tokens"].size
            tokens += int(batch["tokens_lengths"].sum())
            shapes.add(batch["tokens"].shape)
            batches += 1
            if batches == 10:
                state = json.dumps(iterator.get_state())  # what a checkpoint would save
            elif batches == 11:
                following = batch["tokens"]
    # Resume from the checkpoint in a fresh iterator (no workers: the batches are the same).
    with iter(pipeline(args.documents, 0)) as resumed:
        resumed.set_state(json.loads(state))
        assert np.array_equal(next(resumed)["tokens"], following), "the resumed batch differs"
    fixed = 1 - tokens / (-(-args.documents // 8) * 8 * PADDED_LENGTHS[-1])
    print(f"{args.documents} documents, {tokens} tokens in {batches} batches")
    print(f"padding: {1 - tokens / slots:.1%} (fixed batches of 8 padded to 1024: {fixed:.1%})")
    print(f"shapes seen: {sorted(shapes)}; jit compilations: {len(TRACES)}")
    print(f"declared shapes (full_rows=True): {batched(args.documents).shapes}")
    print("resumed from the state after batch 10: batch 11 is the same")


if __name__ == "__main__":
    main()
