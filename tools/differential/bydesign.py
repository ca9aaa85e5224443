"""Differences we accept, each with its reason.

A rule matches a case by name pattern (fnmatch) and by the comparison's tag
(`why`, from compare.py); an optional `only_keys` says that the two values may
differ only under those top-level keys of a dict result (everything else must
be equal). The first matching rule classifies the case as "differ-by-design".
A tag joined with "+" ("stage-earlier+message") needs a rule for each part.
Anything that matches no rule stays "differ" and is reported for fixing.

Keep this table short and honest: a rule is for a deliberate design choice or
an upstream behaviour we do not copy, never for a bug we have not fixed yet.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable
from typing import Any

from compare import values_equal

# Names that leak from `from typing import ...` or `from __future__ import
# annotations` into a namespace: never a deliberate addition.
LEAKED_NAMES = set(
    """
    Any TYPE_CHECKING annotations Optional Union Callable Sequence Mapping Iterable
    Iterator TypeVar Generic cast overload dataclasses typing np numpy os sys
    """.split()
)


# Upstream exceptions that are accidents of its implementation rather than a
# deliberate check: no program can rely on them.
INCIDENTAL_TYPES = {"AttributeError", "AssertionError", "ZeroDivisionError", "PyGrainInternalError"}
INCIDENTAL_MESSAGES = (
    "object has no attribute",
    "unsupported operand",
    "not supported between instances",
    "arg is an empty sequence",
    "index out of range",
    "incompatible function arguments",
    "object is not callable",
    "has no len()",
    "is not iterable",
    "object is not subscriptable",
    "cannot convert float",
    "cannot be interpreted as an integer",
    "only integers, slices",
    "pytree structure error",
    "invalid literal for int()",
    "division by zero",
    "division or modulo by zero",
    "truth value of an array",
    "out of bounds for uint64",
    "string indices must be integers",
    "list indices must be integers",
    "int() argument must be",
    "can only concatenate",
    "not all arguments converted",
    "slice indices must be integers",
    "should return >= 0",
    "arg 3 must not be zero",
)
_BARE_KEY = re.compile(r"^(?:'[^']*'|<class '[^']*'>)$")


def incidental(exc: dict[str, Any]) -> bool:
    if exc["type"] in INCIDENTAL_TYPES:
        return True
    msg = exc.get("msg", "")
    if exc["type"] == "KeyError" and _BARE_KEY.match(msg):
        return True  # a dict lookup of upstream's, not a check
    return any(m in msg for m in INCIDENTAL_MESSAGES)


def upstream_message_incidental(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> bool:
    """Upstream's message is Python's wording for an operation inside its code that
    the bad value broke, not a check of upstream's: no client matches it."""
    return up.get("status") == "raised" and incidental(up["exc"])


def _checked_at_the_call(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> bool:
    return ours["exc"].get("stage") == "construct" and up["exc"].get("stage") == "use"


def _ours_deliberate(ours: dict[str, Any]) -> bool:
    if ours.get("status") != "raised":
        return False
    mro = ours["exc"].get("mro", [])
    return any(t in mro for t in ("TypeError", "ValueError", "LookupError"))


def upstream_incidental(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> bool:
    return (
        up.get("status") == "raised"
        and incidental(up["exc"])
        and _ours_deliberate(ours)
        and not _ours_lacks_feature(name, ours)
    )


# The kinds of bad value (the `=label` suffix of bad.* cases) that are of the
# wrong type or outside the documented range, so rejecting them is validation,
# not lost functionality. Labels where upstream's acceptance is plausibly a
# feature (a MapDataset where an IterDataset is expected, an empty list, ...)
# are deliberately absent.
STRICT_LABELS = set(
    """
    str float none bool np_float object dict list tuple lambda set generator iterator
    class_not_instance slice_str threads_str contains_int str_len shape_int int
    map_transform filter_transform next_index_float
    neg negative 2**32 2**64 above_one zero nan inf
    """.split()
)


def _ours_lacks_feature(name: str, ours: Any) -> bool:
    """Ours failed because it lacks the parameter or the input kind, not because the
    value is bad: that is a missing feature, reported elsewhere, never by design."""
    msg = ours.get("exc", {}).get("msg", "") if ours.get("status") == "raised" else ""
    return "unexpected keyword argument" in msg or name.startswith("bad.iter.mix.mapping")


def ours_stricter(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> bool:
    label = name.rsplit("=", 1)[-1] if "=" in name else None
    return (
        name.startswith("bad.")
        and not _ours_lacks_feature(name, ours)
        and label in STRICT_LABELS
        and up.get("status") == "ok"
        and _ours_deliberate(ours)
        and ours["exc"].get("stage") == "construct"
    )


@dataclasses.dataclass(frozen=True)
class Rule:
    pattern: str
    whys: tuple[str, ...] | None  # None: any comparison tag
    reason: str
    only_keys: tuple[str, ...] = ()
    predicate: Callable[[str, dict[str, Any], Any, Any], bool] | None = None

    def matches(self, name: str, cmp: dict[str, Any], ours: Any, up: Any) -> bool:
        if not fnmatch.fnmatchcase(name, self.pattern):
            return False
        if self.whys and cmp.get("why") not in self.whys:
            return False
        if self.predicate is not None and not self.predicate(name, cmp, ours, up):
            return False
        if cmp.get("why") == "names-extra" and set(cmp.get("extra", [])) & LEAKED_NAMES:
            return False
        if self.only_keys:
            a, b = ours.get("value"), up.get("value")
            if not (isinstance(a, dict) and isinstance(b, dict)):
                return False
            keys = (set(a) | set(b)) - set(self.only_keys)
            if not all(k in a and k in b and values_equal(a[k], b[k]) for k in keys):
                return False
        return True


LOADER_STATE_EXTENDS = (
    "the DataLoader state has Grain's keys with Grain's values (version, last_seen_indices, "
    "last_worker_index, worker_count, sampler, data_source) and adds this library's beside "
    "them (format, pipeline, fingerprint, data_source_len, shard_options: docs/data_loader.md) "
    "so that a state of another pipeline is refused and what runs in this process resumes "
    "exactly"
)


def _loader_state(value: Any) -> tuple[Any, Any]:
    """(a dl.state case's decoded DataLoader state, the rest of its value)."""
    rest = None
    if isinstance(value, dict) and "decoded" in value:
        rest = {k: v for k, v in value.items() if k != "decoded"}
        value = value["decoded"]
    if isinstance(value, dict) and "bytes_json" in value:
        value = value["bytes_json"]
    return value, rest


def _without_fingerprint_shape(value: Any) -> Any:
    """A case's value with the pipeline fingerprint left out of its `state_shape`."""
    if not (isinstance(value, dict) and isinstance(value.get("state_shape"), dict)):
        return value
    shape = {k: v for k, v in value["state_shape"].items() if k != "grain_fingerprint"}
    return {**value, "state_shape": shape}


def loader_state_extends(ours: Any, up: Any) -> bool:
    """Ours' DataLoader state (in a case's value) holds upstream's keys with its values."""
    (ours, ours_rest), (up, up_rest) = _loader_state(ours), _loader_state(up)
    if ours_rest != up_rest or not (isinstance(ours, dict) and isinstance(up, dict)):
        return False
    return "last_seen_indices" in up and all(
        key in ours and values_equal(ours[key], up[key]) for key in up
    )


STATE_FORMAT = (
    "iterator state format is implementation-defined: upstream's DatasetIterator.get_state "
    "docstring reserves the right to change it and only guarantees restoring with the same "
    "code; ours records global positions in the index space (DESIGN.md), so its keys differ, "
    "and adds a fingerprint of the pipeline (docs/checkpointing.md) so that a state of another "
    "pipeline is refused. The resumed elements are compared (and must agree) in the same case."
)
MIX_SCHEDULE = (
    "IterDataset.mix state: Grain's keys and meaning (parents, index, stop), but ours picks "
    "components with its own exact schedule (grain-index MixingSchedule: every prefix within "
    "one element of each share), so at the same index the parents' positions differ; the "
    "elements of a resume agree with themselves (iter.mix.resume)"
)
STATE_OWN_FORMAT = (
    "dataset-iterator states equal Grain's where a stage means the same thing "
    "(cases_state_shapes.py); these stages keep their own: mp_prefetch's state over a "
    "positional pipeline is the plain pipeline's ({'next_index': p}), which restores with any "
    "worker count (DESIGN.md's elastic resume; Grain's per-worker dict would tie it to the "
    "count); the packing stages record their own packer's position (consumed/emitted/group, "
    "split offsets), not Grain's buffers. Elements and resumes agree in the same cases"
)
HAND_SET_MIX = (
    "a mix state set by hand takes its components by place and must list one state per "
    "component: ours refuses a shorter list instead of leaving the others where they are "
    "(a checkpoint file matches components by their hashes, docs/checkpointing.md)"
)
SHUFFLE_ALGO = (
    "shuffle order: ours uses its own keyed bijective index shuffle (grain-index SHUFFLE.md), "
    "not upstream's Feistel index_shuffle, so the permutation for a given seed differs; the "
    "same elements come out (checked by the sibling `shuffled=True` cases)"
)

RULES: list[Rule] = [
    Rule(
        "*",
        ("message",),
        "upstream's message is Python's own wording for an operation inside its code that "
        "the bad value broke ('NoneType' object is not iterable, '<=' not supported between "
        "instances..., a bare KeyError...), not a check of upstream's, so no client can match "
        "it; ours says which argument is wrong and how to fix it",
        predicate=upstream_message_incidental,
    ),
    Rule(
        "*",
        ("message",),
        "ours checks the argument at the call and names it; upstream fails later, on use, "
        "inside its machinery (numpy's SeedSequence, a packer's internal assertion, the "
        "wrapper around a failed call, a check of an internal argument of another name), so "
        "its message is about what broke there, not about the argument",
        predicate=_checked_at_the_call,
    ),
    Rule(
        "exp.options.raise_threshold",
        ("message",),
        "same wording and format as upstream's ('Transformation ... skipped N % of the last "
        "seen M elements. Please check the filtering logic...'); the numbers differ because "
        "ours judges the filter over its own window of elements",
    ),
    Rule(
        "src.array_record.directory",
        ("message",),
        "upstream's message is its Riegeli reader's failure (byte offsets of its internals) "
        "when it reads a directory; ours says the path is a directory and how to name its files",
    ),
    Rule(
        "bad.state.to_iter=next_index_neg",
        ("message",),
        "a negative `next_index` is refused by the state check, which does not know the "
        "dataset's length: ours says 'Checkpoint `next_index` -1 is out of range' without "
        "upstream's 'for dataset of length N'",
    ),
    Rule(
        "bad.exp.set_next_index.index=neg",
        ("message",),
        "a negative index is refused before the pipeline is asked for its length: ours says "
        "'Checkpoint `next_index` -1 is out of range' without upstream's 'for dataset of "
        "length N'",
    ),
    Rule(
        "bad.exp.first_fit.length_struct=int",
        ("message",),
        "upstream's message is JAX's tree-structure comparison of its internals (PyTreeDef "
        "reprs); ours says which feature does not fit `length_struct`",
    ),
    Rule(
        "bad.exp.concat_then_split.bos_handling_str",
        ("message",),
        "upstream's message names another problem (a missing bos_token_id) for a bos_handling "
        "that is not a BOSHandling; ours says that",
    ),
    Rule(
        "bad.exp.batch_and_pad.values=none",
        ("message",),
        "upstream counts None as 0 values ('Cannot batch 0 values.'); ours says `values` "
        "must be a list",
    ),
    Rule(
        "bad.exp.index_shuffle=zero_rounds",
        ("message",),
        "upstream's wording ('an even integer between 4 and 1024') states its own Feistel "
        "network's limits; ours' index shuffle takes any rounds >= 1 (grain-index SHUFFLE.md), "
        "so that sentence would be false here",
    ),
    Rule(
        "bad.tr.map_class_not_subclassed",
        ("message",),
        "Python's own wording for an abstract class, with the class's name: ours' "
        "grain.transforms.Map is an alias of MapTransform, so Python names MapTransform",
    ),
    Rule(
        "bad.dl.sampler=*",
        ("message",),
        "upstream's message names another problem (missing shard options) for a sampler "
        "that is not one; ours says what a sampler must be",
    ),
    Rule(
        "sig.*",
        ("sig-superset",),
        "signature is a compatible superset: every call valid upstream is valid in ours with "
        "the same meaning (extra optional parameters, or keyword-only made positional-or-keyword)",
    ),
    Rule(
        "member.*",
        ("sig-superset",),
        "signature is a compatible superset: every call valid upstream is valid in ours with "
        "the same meaning (extra optional parameters, or keyword-only made positional-or-keyword)",
    ),
    Rule(
        "names.*",
        ("names-extra",),
        "ours offers documented names beyond 0.2.18 (nothing of upstream's is missing)",
    ),
    *(
        Rule(
            pattern,
            ("stage-earlier",),
            "same exception family, raised at the bad call instead of on first iteration: ours "
            "validates arguments eagerly (DESIGN.md: bad input raises a clear exception saying "
            "what was wrong); no valid program is affected",
        )
        for pattern in ("bad.*", "err.*")
    ),
    Rule(
        "*",
        ("exception-type",),
        "upstream fails here with an incidental exception of its internals (AttributeError, "
        "AssertionError, ZeroDivisionError, a bare KeyError, a TypeError from an operator...), "
        "which no program can rely on; ours raises a deliberate TypeError/ValueError that names "
        "the argument and the fix (DESIGN.md)",
        predicate=upstream_incidental,
    ),
    Rule(
        "bad.*",
        ("ours-raises",),
        "stricter validation: the value is of the wrong type or outside the documented range "
        "(a str/float/None/bool where an int or bool is documented, a negative or zero size, a "
        "seed outside [0, 2**32) or [0, 2**64), ...); upstream silently accepts it and computes "
        "something meaningless, ours raises TypeError/ValueError at the call (DESIGN.md: bad "
        "input raises a clear exception)",
        predicate=ours_stricter,
    ),
    Rule(
        "bad.src.range.missing_step",
        ("ours-accepts",),
        "signature superset: ours gives RangeDataSource's `step` a default of 1",
    ),
    Rule("bad.state.mix=parents_short", ("ours-raises",), HAND_SET_MIX),
    Rule(
        "bad.shm_array.dtype=object_dtype",
        ("ours-raises",),
        "an object-dtype array holds pointers into one process's heap, so it cannot be shared "
        "memory; upstream allocates it anyway (useless across processes), ours refuses",
    ),
    Rule("exp.index_shuffle.values", ("value", "order-only"), SHUFFLE_ALGO),
    Rule("bad.map.shuffle.seed_kw=np_uint32_max", ("order-only",), SHUFFLE_ALGO),
    Rule("bad.map.shuffle_infinite", ("value",), SHUFFLE_ALGO),
    Rule(
        "mixep.shuffle_order.same_seed",
        ("order-only",),
        "stated difference (docs/compatibility.md shows this very call): the same seed gives "
        "another order here, from our own keyed index shuffle (grain-index SHUFFLE.md); the same "
        "elements come out (mixep.shuffle_order.same_seed_multiset agrees), and the order is the "
        "same on every run for that seed and changes with the seed and the epoch",
    ),
    Rule(
        "map.mix.float_weights",
        ("value",),
        "MapDataset.mix order: ours uses its documented earliest-deadline-first schedule "
        "(docs/index_math.md, every prefix within one element of each exact share); upstream "
        "uses a different selection; both honour the weights (see map.mix.proportions)",
    ),
    Rule(
        "exp.repeat.empty_infinite",
        ("status timeout vs ok",),
        "upstream bug not copied: an infinite RepeatIterDataset over an empty dataset spins "
        "forever in upstream; ours ends the iteration (there is nothing to repeat)",
    ),
    Rule(
        "iter.iterator.context_manager",
        ("value",),
        "ours adds `with` support to iterators (closes them); no upstream program is affected",
    ),
    Rule(
        "sig.grain.experimental.ShapeDtypeStruct",
        ("sig-incompatible",),
        "upstream artefact not copied: its dataclass fields 'default' to property objects, so "
        "ShapeDtypeStruct() builds an object whose shape and dtype are property objects; ours "
        "requires both",
    ),
    Rule(
        "bad.exp.shape_dtype_struct=no_args",
        ("ours-raises",),
        "upstream artefact not copied: ShapeDtypeStruct() with no arguments yields property "
        "objects as shape/dtype; ours requires both",
    ),
    Rule("state.values.mix", ("value",), MIX_SCHEDULE),
    Rule("stateshape.mp_prefetch_*", ("value",), STATE_OWN_FORMAT),
    Rule("stateshape.pack_*", ("value",), STATE_OWN_FORMAT),
    Rule("iter.mp_prefetch.one_worker", ("value",), STATE_OWN_FORMAT, only_keys=("state_shape",)),
    Rule("exp.pack.*.resume", ("value",), STATE_OWN_FORMAT, only_keys=("state_shape",)),
    Rule(
        "dl.state.*",
        ("value",),
        LOADER_STATE_EXTENDS,
        predicate=lambda n, c, o, u: loader_state_extends(o.get("value"), u.get("value")),
    ),
    Rule(
        "dlstate.grain_literal.shuffled",
        ("ours-raises",),
        "a DataLoader state written by Grain restores here only where Grain's order is ours; "
        "with a shuffling sampler it is not (our keyed shuffle), so no position here continues "
        "that run and set_state raises a ValueError saying so instead of resuming elsewhere",
    ),
    Rule(
        "dlstate.worker_count.*",
        ("value",),
        "stated difference (docs/compatibility.md): the DataLoader's batches do not depend on "
        "worker_count here (unit u of consecutive positions is read by worker u % n and the "
        "units come back in order); upstream's workers each batch their own records, "
        "interleaved, so its batches and its last_seen_indices change with worker_count",
    ),
    Rule(
        "dl.state.set_state_other_worker_count",
        ("ours-accepts",),
        "elastic resume is a design goal (DESIGN.md: state as global positions so that a "
        "checkpoint taken with N workers resumes with M); upstream refuses a different "
        "worker_count",
    ),
    Rule(
        "bad.state.dataloader_other_worker_count",
        ("ours-accepts",),
        "elastic resume is a design goal (DESIGN.md: state as global positions so that a "
        "checkpoint taken with N workers resumes with M); upstream refuses a different "
        "worker_count",
    ),
    Rule(
        "map.mix.proportions",
        ("value",),
        "MapDataset.mix order: ours uses its documented earliest-deadline-first schedule "
        "(docs/index_math.md); both stay within one element of each exact share",
    ),
    Rule(
        "*flat_map*over_fan_out",
        ("ours-raises",),
        "documented behaviour: FlatMapTransform's docstring says exceeding max_fan_out raises; "
        "upstream's FlatMapIterDataset does not check (its FlatMapMapDataset does), ours checks "
        "both",
    ),
    Rule(
        "bad.exp.flat_map_iter.exceeds_fan_out",
        ("ours-raises",),
        "documented behaviour: FlatMapTransform's docstring says exceeding max_fan_out raises; "
        "upstream's FlatMapIterDataset does not check (its FlatMapMapDataset does), ours checks "
        "both",
    ),
    Rule(
        "exp.flat_map.iter_generator",
        ("ours-accepts",),
        "ours accepts any iterable from flat_map; upstream fails with an incidental TypeError "
        "(it calls len() on the result), so no upstream program is affected",
    ),
    Rule(
        "tr.map_with_index_in_dataloader",
        ("ours-accepts",),
        "ours runs MapWithIndex in the DataLoader; upstream fails with an incidental TypeError "
        "('object is not callable'), so no upstream program is affected",
    ),
    Rule(
        "smp.sampler_protocol",
        ("ours-accepts",),
        "ours' Sampler protocol is runtime-checkable (isinstance works); upstream's raises "
        "TypeError on isinstance; no upstream program is affected",
    ),
    # -- decisions of the Grain-compatibility work (docs/compatibility.md says each) --------
    Rule(
        "bad.map.len_of_infinite_batch",
        ("value",),
        "an infinite dataset stays sys.maxsize long through batch, so len(ds) == sys.maxsize "
        "always tells an infinite dataset; upstream halves it",
    ),
    Rule(
        "bad.iter.mix.mapping_weights=*",
        ("ours-raises", "exception-type"),
        "stricter: dict weights must name exactly the dict's datasets; upstream takes the "
        "values in order and silently ignores the keys (or fails with an AssertionError)",
    ),
    Rule(
        "bad.iter.mix.mapping_datasets_list_weights_ok",
        ("ours-raises",),
        "stricter: dict weights for a list of datasets cannot say which weight is whose",
    ),
    Rule(
        "bad.exp.interleave.datasets=empty",
        ("ours-accepts",),
        "no datasets interleave to no elements; upstream fails at use with an incidental "
        "IndexError",
    ),
    Rule(
        "bad.exp.window_shuffle_iter.missing_seed",
        ("exception-type",),
        "ours' window shuffles take their seed from ds.seed(...) upstream, like every random "
        "stage here, so `seed` is optional; without any seed ours raises ValueError saying so",
    ),
    Rule(
        "*element_spec*",
        ("value", "ours-accepts", "ours-raises"),
        "ours' get_element_spec reads the first element and reports its exact spec; upstream "
        "infers it statically and gives up (NotImplementedError, unknown batch dimension) "
        "where the pipeline does not declare it (a spec a subclass declares with "
        "`_element_spec` is returned by both: subclass.declared_spec.*)",
    ),
    Rule(
        "*pick_performance_config*",
        ("value",),
        "ours measures the pipeline with its own rule (and never exceeds the limits given); "
        "the numbers it picks differ from upstream's",
    ),
    Rule(
        "exp.elastic_iterator.basic",
        ("value",),
        STATE_FORMAT,
        predicate=lambda n, c, o, u: _without_fingerprint_shape(o.get("value")) == u.get("value"),
    ),
    Rule(
        "bad.dl.operations=none",
        ("ours-accepts",),
        "operations=None means no operations; upstream fails with an incidental TypeError",
    ),
    Rule(
        "*random_map*seed*",
        ("ours-raises",),
        "stricter: a random map draws from each record's rng, which only a seeded sampler "
        "gives; ours says so when the loader is built, upstream passes rng=None to the function",
    ),
    Rule(
        "srcread.declared_without_getitems",
        ("ours-raises",),
        "stricter: `batched_reads = True` is ours (the declaration that lets pipelines call a "
        "source's __getitems__; upstream never calls it and ignores the attribute); a source "
        "that declares it without a __getitems__ is refused with a TypeError naming the fix",
    ),
    Rule(
        "bad.src.array_record.reader_options_bad",
        ("ours-raises",),
        "stricter: ours checks the reader options when the source is built",
    ),
    Rule(
        "ckpt.iterator_save_load_async",
        ("value",),
        "save()/load() return coroutines, as upstream's, but are plain methods: save() takes "
        "the state when it is called (as its docstring promises), not when awaited",
    ),
    Rule(
        "exp.cache.second_pass_cached",
        ("value",),
        "ours' CacheIterDataset serves every later pass from memory (that is what it is for); "
        "upstream's reads the parent again on a second pass",
    ),
    Rule(
        "map.slice.*",
        ("ours-accepts",),
        "extended: MapDataset.slice also takes a sequence of indices",
    ),
    Rule(
        "names.*",
        ("names-missing",),
        "grain.proto (a protobuf of Grain's execution summary) and names leaked from Grain's "
        "imports are not here; each is in docs/compatibility.md",
    ),
    Rule(
        "misc7.shm.pickle_a_view",
        ("value",),
        "upstream bug not copied: a pickled view of a SharedMemoryArray unpickles as the first "
        "elements of the segment (its offset is lost); ours unpickles the same view",
    ),
    Rule(
        "shm_array.zero_size",
        ("ours-accepts",),
        "an empty SharedMemoryArray is allowed (upstream's SharedMemory refuses size 0)",
    ),
    Rule(
        "sig.grain.config",
        ("ours-accepts",),
        "inspect.signature on grain.config: upstream's object answers every attribute lookup "
        "with an unknown-option error; not API",
    ),
    Rule("sig.grain.python.config", ("ours-accepts",), "as sig.grain.config"),
    Rule("sig.grain.proto", None, "grain.proto is not here (see names.*)"),
    Rule(
        "sig.grain.experimental.InterleaveIterDataset",
        ("sig-incompatible",),
        "iter_buffer_size defaults to 0 (no thread per open dataset); pass 1 for upstream's",
    ),
    Rule(
        "sig.grain.experimental.PackAndBatchOperation",
        ("sig-incompatible",),
        "upstream's dataclass shows its private field `_cur_batch` as a parameter; not API",
    ),
    Rule(
        "sig.grain.monitoring.*",
        ("sig-incompatible",),
        "ours' metrics keep values in-process (Bucketer holds bounds, Counter takes fields); "
        "upstream's open-source metrics are wrappers for a server",
    ),
    Rule(
        "smp.*sharded*",
        ("value",),
        "sampler[k] is step k of this shard here (the DataLoader reads steps); upstream's "
        "sharded samplers index global steps, and its SequentialSampler ignores shard_options",
    ),
    Rule(
        "smp.index.more_shards_than_records",
        ("ours-accepts",),
        "more shards than records leaves some shards empty; upstream fails with an "
        "incidental ZeroDivisionError",
    ),
    Rule(
        "dl.shard_*",
        ("value",),
        "every record is read by exactly one shard here, the first shards taking the "
        "remainder as ShardOptions documents; upstream's loader skips records (record 3 of 10 "
        "over 3 sampler shards, record 9 over 3 loader shards)",
    ),
    Rule(
        "src.*negative*",
        ("ours-accepts",),
        "extended: sources take negative indices, counting from the end",
    ),
]


def _reason(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> str | None:
    for rule in RULES:
        if rule.matches(name, cmp, ours, up):
            return rule.reason
    return None


def classify(name: str, cmp: dict[str, Any], ours: Any, up: Any) -> tuple[str, str | None]:
    """A tag joined with "+" ("stage-earlier+message") is explained only when each
    of its parts is: the reasons are then listed together."""
    if cmp["verdict"] == "agree":
        return "agree", None
    reasons = []
    for why in (cmp.get("why") or "").split("+"):
        reason = _reason(name, {**cmp, "why": why or None}, ours, up)
        if reason is None:
            return "differ", None
        reasons.append(reason)
    return "differ-by-design", " + ".join(reasons)
