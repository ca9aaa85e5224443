"""MapDataset.mix read past its first mixed epoch, and the shuffle order for a seed.

Grain 0.2.18 continues every component where it stopped when a mix is read
past its length (an index, `.repeat()`, a shuffle of the repeat, a slice's
later epochs). Where the two implementations order a period of the schedule
alike (uniform weights, 2:1), the values are compared as they are; where the
first-epoch order legitimately differs (ours is an earliest-deadline-first
schedule, see map.mix.float_weights), a case compares what both specify:
each component's reads, in order, over the positions that both are sure to
have read (one less than the exact share: each side is within one of it).
"""

from __future__ import annotations

import grain
from _registry import case, expr

_EXAMPLE = (
    "grain.MapDataset.mix([grain.MapDataset.source([10, 11, 12]), "
    "grain.MapDataset.source([20, 21, 22])], weights=[2, 1])"
)


def _example():
    return grain.MapDataset.mix(
        [grain.MapDataset.source([10, 11, 12]), grain.MapDataset.source([20, 21, 22])],
        weights=[2, 1],
    )


def _tagged_mix(lengths, weights):
    parts = [grain.MapDataset.source([[c, j] for j in range(n)]) for c, n in enumerate(lengths)]
    return grain.MapDataset.mix(parts, weights=weights)


def _component_reads(values, weights, end):
    """Each component's reads in order, cut to what both sides must have read by `end`."""
    total = sum(weights)
    reads = {c: [] for c in range(len(weights))}
    for c, j in values:
        reads[c].append(j)
    return {str(c): got[: max(0, int(end * weights[c] / total) - 1)] for c, got in reads.items()}


# ------------------------------------------------------------------ indices past the length
expr("mixep.example.first_epoch", f"[len({_EXAMPLE}), list({_EXAMPLE})]")
expr("mixep.example.past_len", f"[({_EXAMPLE})[i] for i in range(24)]")
expr(
    "mixep.uniform.different_lengths_past_len",
    "[grain.MapDataset.mix([grain.MapDataset.range(10), grain.MapDataset.range(100, 103)])[i] "
    "for i in range(30)]",
)
expr(
    "mixep.uniform.three_components_past_len",
    "[grain.MapDataset.mix([grain.MapDataset.range(2), grain.MapDataset.range(10, 15), "
    "grain.MapDataset.range(20, 23)])[i] for i in range(30)]",
)
expr(
    "mixep.weights_5_1.past_len",
    "[grain.MapDataset.mix([grain.MapDataset.range(10), grain.MapDataset.range(100, 103)], "
    "weights=[5, 1])[i] for i in range(36)]",
)


@case("mixep.infinite_component.past_len")
def _():
    ds = grain.MapDataset.mix([grain.MapDataset.range(3).repeat(), grain.MapDataset.range(10, 12)])
    return [len(ds), [ds[i] for i in range(12)]]


@case("mixep.mix_of_mix.past_len")
def _():
    ds = grain.MapDataset.mix([_example(), grain.MapDataset.source([99])])
    return [len(ds), [ds[i] for i in range(16)]]


# ------------------------------------------------------------------ repeat
expr("mixep.repeat.k", f"[len(({_EXAMPLE}).repeat(3)), list(({_EXAMPLE}).repeat(3))]")
expr("mixep.repeat.endless", f"[({_EXAMPLE}).repeat()[i] for i in range(30)]")
expr(
    "mixep.repeat.no_reseed",
    f"list(({_EXAMPLE}).repeat(3, reseed_each_epoch=False))",
)
expr(
    "mixep.repeat.different_lengths",
    "list(grain.MapDataset.mix([grain.MapDataset.range(10), grain.MapDataset.range(100, 103)])"
    ".repeat(4))",
)


# ------------------------------------------------------------------ shuffle
expr("mixep.shuffle.of_repeat", f"list(({_EXAMPLE}).repeat(3).shuffle(seed=3))", shuffled=True)
expr(
    "mixep.shuffle.repeat_of_shuffle",
    f"list(({_EXAMPLE}).shuffle(seed=3).repeat(3))",
    shuffled=True,
)


@case("mixep.shuffle.each_epoch_permutes_its_mixed_epoch")
def _():
    shuffled = _example().shuffle(seed=3)
    return [sorted(shuffled[i] for i in range(4 * e, 4 * e + 4)) for e in range(5)]


@case("mixep.shuffle.components_go_on_into_their_later_epochs")
def _():
    parts = [
        grain.MapDataset.source([[0, j] for j in range(3)]).shuffle(seed=5),
        grain.MapDataset.source([[1, j] for j in range(5)]).shuffle(seed=6),
    ]
    mixed = grain.MapDataset.mix(parts)
    reads = {0: [], 1: []}
    for i in range(30):
        c, j = mixed[i]
        reads[c].append(j)
    # Each component epoch is a permutation of its records, in both implementations.
    return {
        str(c): [sorted(got[k : k + n]) for k in range(0, len(got) - n + 1, n)]
        for (c, got), n in zip(reads.items(), (3, 5), strict=True)
    }


# ------------------------------------------------------------------ slice
expr("mixep.slice.past_len", f"[({_EXAMPLE})[1:3][i] for i in range(8)]")
expr("mixep.slice.step_past_len", f"[({_EXAMPLE})[::2][i] for i in range(8)]")
expr("mixep.slice.method", f"list(({_EXAMPLE}).slice(slice(2, 10)))")


# ------------------------------------------------------------------ orders that differ in a period
@case("mixep.weights_1_3.component_reads")
def _():
    ds = _tagged_mix([10, 3], [1, 3])
    end = 6 * len(ds)
    return [len(ds), _component_reads([ds[i] for i in range(end)], [1, 3], end)]


@case("mixep.float_weights.component_reads")
def _():
    ds = _tagged_mix([4, 4], [0.25, 0.75])
    end = 6 * len(ds)
    return [len(ds), _component_reads(list(ds.repeat(6)), [0.25, 0.75], end)]


@case("mixep.three_weighted.component_reads")
def _():
    ds = _tagged_mix([2, 5, 3], [1, 2, 3])
    end = 8 * len(ds)
    return [len(ds), _component_reads([ds[i] for i in range(end)], [1, 2, 3], end)]


@case("mixep.very_different.component_reads")
def _():
    ds = _tagged_mix([40, 3, 7], [2.0, 3.0, 0.5])
    end = 10 * len(ds)
    return [len(ds), _component_reads(list(ds.repeat(10)), [2.0, 3.0, 0.5], end)]


# ------------------------------------------------------------------ iterator state
@case("mixep.to_iter.repeated_state_and_resume")
def _():
    ds = _example().repeat()
    it = iter(ds.to_iter_dataset())
    head = [next(it) for _ in range(7)]
    state = it.get_state()
    fresh = iter(ds.to_iter_dataset())
    fresh.set_state(state)
    return [head, state["next_index"], [next(fresh) for _ in range(9)]]


expr("mixep.to_iter.repeat_k", f"list(({_EXAMPLE}).repeat(3).to_iter_dataset())")


# ------------------------------------------------------------------ the shuffle order (by design)
expr("mixep.shuffle_order.same_seed", "list(grain.MapDataset.range(8).shuffle(seed=42))")
expr(
    "mixep.shuffle_order.same_seed_multiset",
    "list(grain.MapDataset.range(8).shuffle(seed=42))",
    shuffled=True,
)
