"""Packing variable-length sequences for sequence models, as JSON lines.

Usage: python benchmarks/packing.py [--repeats 5] [--size 50000] [--cases a,b]
       [--case-size CASE=N]

Runs unchanged against this workspace's `grain` and against upstream grain==0.2.18
(`benchmarks/compare.py --bench packing` runs it under both), through the public
`grain.experimental` packing classes (a side lacking a class skips that case and says
so on stderr).

Data: N elements (`--size`, default 50 000) of int32 sequences with lengths uniform in
1..512 (seed 0), read by
``MapDataset.source(elements).to_iter_dataset(ReadOptions(num_threads=0))``. Token j of
a feature of element i is ``i * 512 + j + 1``, so every output token names its element
and position.

  first_fit           FirstFitPackIterDataset({"tokens": 2048}, 64 bins, shuffle_bins=False)
  best_fit            BestFitPackIterDataset(the same)
  concat_then_split   ConcatThenSplitIterDataset({"tokens": 2048})
  concat_then_split_bos   the same with BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS,
                      bos_features=("tokens",), bos_token_id=0
  *_2f                the same three with two features: {"inputs": 2048,
                      "targets": 1024}, each element's lengths drawn independently

`shuffle_bins=False` makes the output order a pure function of the algorithm, so the
`digest` of two implementations agrees exactly when they pack identically.
`elements` counts input tokens (all features), so `elements_per_s` is tokens per
second; `padding_fraction` is the share of output slots that are padding.

A line is the median of `repeats` timed runs after one untimed warm-up. Every run's
output is checked after the clock stops, per feature: every input token appears exactly
once; each example has the packed length; padding is 0 with segment id 0 and position
0; within an example, a new segment starts exactly where a new element starts and the
ids increase along the example (by 1 where every element has tokens in every
feature); positions count from 0 in each segment; the packing algorithms never split an
element (its first token has position 0), and concat-then-split pads only the last
example; every run gives the same output. `split_positions` says how positions count
in the rest of a split element: "restart" (from 0 in each example) or "continue" (the
token's index in its element). With BOS handling the output must equal the plain
concat-then-split output (checked as above, untimed) with the first token of every
piece (an element, or the rest of a split one) replaced by BOS. `ok` is false and
`failed_checks` says why if any check failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from _bench_common import (
    checked_cases,
    grain_version,
    implementation,
    json_stdout,
    parse_case_sizes,
)

import grain

MAX_LENGTH = 512
NUM_BINS = 64
ONE = {"tokens": 2048}
TWO = {"inputs": 2048, "targets": 1024}
# Real tokens are >= 1, so a BOS of 0 is recognisable in the output.
BOS = 0


@dataclass(frozen=True)
class Case:
    name: str
    cls: str
    lengths: dict[str, int]
    bos: bool = False

    @property
    def splits(self) -> bool:
        return self.cls == "ConcatThenSplitIterDataset"


CASES = {
    case.name: case
    for case in (
        Case("first_fit", "FirstFitPackIterDataset", ONE),
        Case("best_fit", "BestFitPackIterDataset", ONE),
        Case("concat_then_split", "ConcatThenSplitIterDataset", ONE),
        Case("concat_then_split_bos", "ConcatThenSplitIterDataset", ONE, bos=True),
        Case("first_fit_2f", "FirstFitPackIterDataset", TWO),
        Case("best_fit_2f", "BestFitPackIterDataset", TWO),
        Case("concat_then_split_2f", "ConcatThenSplitIterDataset", TWO),
    )
}


def experimental(name: str) -> Any:
    """`grain.experimental.<name>`, or None if this implementation lacks it."""
    return getattr(grain.experimental, name, None)


def make_elements(n: int, features: list[str]) -> tuple[list[dict[str, np.ndarray]], int]:
    """N elements and their total token count; token j of element i is i * 512 + j + 1."""
    rng = np.random.default_rng(0)
    starts = (np.arange(n, dtype=np.int64) * MAX_LENGTH + 1).tolist()
    lengths = {key: rng.integers(1, MAX_LENGTH + 1, size=n).tolist() for key in features}
    elements = [
        {key: np.arange(starts[i], starts[i] + lengths[key][i], dtype=np.int32) for key in features}
        for i in range(n)
    ]
    return elements, sum(map(sum, lengths.values()))


def build(case: Case, elements: list[dict[str, np.ndarray]], bos: bool) -> Any:
    cls = experimental(case.cls)
    parent = grain.MapDataset.source(elements).to_iter_dataset(grain.ReadOptions(num_threads=0))
    if not case.splits:
        return cls(
            parent, length_struct=dict(case.lengths), num_packing_bins=NUM_BINS, shuffle_bins=False
        )
    if not bos:
        return cls(parent, length_struct=dict(case.lengths))
    return cls(
        parent,
        length_struct=dict(case.lengths),
        bos_handling=experimental("BOSHandling").REPLACE_FIRST_TOKEN_WITH_BOS,
        bos_features=tuple(case.lengths),
        bos_token_id=BOS,
    )


def run(case: Case, elements: list[dict[str, np.ndarray]], bos: bool) -> list[Any]:
    return list(build(case, elements, bos))


Columns = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]


def stack(case: Case, produced: list[Any]) -> tuple[Columns, list[str]]:
    """Per feature: tokens, segment ids and positions as [examples, length] int64 arrays."""
    keys = {f"{k}{suffix}" for k in case.lengths for suffix in ("", "_segment_ids", "_positions")}
    if not produced or any(not isinstance(p, dict) or set(p) != keys for p in produced):
        empty = np.zeros((0, 1), np.int64)
        return dict.fromkeys(case.lengths, (empty, empty, empty)), ["format"]
    failed = []
    columns = {}
    for feature, length in case.lengths.items():
        stacked = []
        for key in (feature, f"{feature}_segment_ids", f"{feature}_positions"):
            arrays = [np.asarray(p[key]) for p in produced]
            if any(a.shape != (length,) for a in arrays):
                failed.append("packed_length")
                arrays = [np.resize(a, length) for a in arrays]
            stacked.append(np.stack(arrays).astype(np.int64))
        columns[feature] = (stacked[0], stacked[1], stacked[2])
    return columns, failed


def digest(columns: Columns) -> str:
    hasher = hashlib.sha256()
    for arrays in columns.values():
        for array in arrays:
            hasher.update(array.astype("<i8").tobytes())
    return hasher.hexdigest()[:16]


def check_feature(
    case: Case, tokens: np.ndarray, segments: np.ndarray, positions: np.ndarray, expected: Any
) -> tuple[list[str], set[str]]:
    """Failed checks of one feature, and the position conventions its output fits."""
    failed = []
    real = segments > 0
    if not np.array_equal(np.sort(tokens[real]), expected):
        failed.append("tokens_once")
    if np.any(tokens[~real]) or np.any(positions[~real]):
        failed.append("padding")
    element = np.where(real, (tokens - 1) // MAX_LENGTH, -1)
    first = np.ones((len(tokens), 1), bool)
    starts = real & np.concatenate([first, element[:, 1:] != element[:, :-1]], axis=1)
    previous = np.concatenate([np.zeros((len(tokens), 1), np.int64), segments[:, :-1]], axis=1)
    step = segments[starts] - previous[starts]
    exact = len(case.lengths) == 1
    if not np.array_equal(starts, real & (segments != previous)) or not (
        np.all(step == 1) if exact else np.all(step >= 1)
    ):
        failed.append("segments")
    columns = np.arange(tokens.shape[1])[None, :]
    in_piece = columns - np.maximum.accumulate(np.where(starts, columns, 0), axis=1)
    in_element = (tokens - 1) % MAX_LENGTH
    conventions = {
        name
        for name, want in (("restart", in_piece), ("continue", in_element))
        if np.array_equal(positions[real], want[real])
    }
    if not conventions:
        failed.append("positions")
    if not case.splits and conventions != {"restart", "continue"}:
        failed.append("split")
    return failed, conventions


def check(
    case: Case, columns: Columns, expected: dict[str, np.ndarray]
) -> tuple[list[str], float, str]:
    """Failed checks, the padding fraction and the positions convention."""
    failed: list[str] = []
    conventions = {"restart", "continue"}
    slots = used = 0
    for feature, (tokens, segments, positions) in columns.items():
        more, fits = check_feature(case, tokens, segments, positions, expected[feature])
        failed += more
        conventions &= fits
        slots += tokens.size
        used += int((segments > 0).sum())
    if case.splits:
        # Only the last example may have room left in every feature.
        full = np.zeros(len(next(iter(columns.values()))[0]), bool)
        for _, segments, _ in columns.values():
            full |= segments[:, -1] > 0
        if np.any(~full[:-1]):
            failed.append("padding_before_end")
    padding = 1 - used / slots if slots else 1.0
    return failed, padding, "/".join(sorted(conventions)) or "neither"


def check_bos(case: Case, columns: Columns, plain: Columns) -> list[str]:
    """The BOS output must be the plain output with every piece's first token set to BOS."""
    for feature, (tokens, segments, positions) in columns.items():
        want_tokens, want_segments, want_positions = plain[feature]
        if tokens.shape != want_tokens.shape:
            return ["bos"]
        at_start = (want_segments > 0) & (want_positions == 0)
        if not (
            np.array_equal(tokens, np.where(at_start, BOS, want_tokens))
            and np.array_equal(segments, want_segments)
            and np.array_equal(positions, want_positions)
        ):
            return ["bos"]
    return []


def measure(case: Case, n: int, repeats: int) -> dict[str, Any]:
    elements, total = make_elements(n, list(case.lengths))
    expected = {
        key: np.sort(np.concatenate([e[key] for e in elements]).astype(np.int64))
        for key in case.lengths
    }
    warm, failed = stack(case, run(case, elements, case.bos))
    if case.bos:
        # The plain output, checked in full, is the reference of the BOS output.
        plain, more = stack(case, run(case, elements, False))
        failed += more
        more, padding, convention = check(case, plain, expected)
        failed += more + check_bos(case, warm, plain)
    else:
        more, padding, convention = check(case, warm, expected)
        failed += more
    reference = digest(warm)
    examples = len(next(iter(warm.values()))[0])
    del warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        produced = run(case, elements, case.bos)
        times.append(time.perf_counter() - start)
        columns, more = stack(case, produced)
        del produced
        failed += more
        if digest(columns) != reference:
            failed.append("deterministic")
    median = statistics.median(times)
    line: dict[str, Any] = {
        "benchmark": "packing",
        "case": case.name,
        "elements": total,
        "sequences": n,
        "examples": examples,
        "median_s": round(median, 6),
        "elements_per_s": round(total / median),
        "sequences_per_s": round(n / median),
        "padding_fraction": round(padding, 5),
        "split_positions": convention,
        "repeats": repeats,
        "ok": not failed,
    }
    if failed:
        line["failed_checks"] = sorted(set(failed))
    line["digest"] = reference
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=50_000, help="number of sequences")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset")
    parser.add_argument("--case-size", default="", help="per-case sizes: CASE=N[,CASE=N]")
    args = parser.parse_args()
    names = checked_cases(parser, args, CASES)
    sizes = parse_case_sizes(args.case_size, CASES)
    out = json_stdout()
    machine = {
        "implementation": implementation(),
        "grain_version": grain_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    for name in names:
        case = CASES[name]
        missing = [c for c in (case.cls, "BOSHandling")[: 1 + case.bos] if not experimental(c)]
        if missing:
            print(
                f"packing: {machine['implementation']} grain has no grain.experimental."
                f"{missing[0]}: case {name} skipped",
                file=sys.stderr,
            )
            continue
        line = measure(case, sizes.get(name, args.size), args.repeats)
        out.write(json.dumps({**line, **machine}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
