"""Packing variable-length sequences into fixed-length examples: first fit and best fit.

The model (as Grain documents it for `grain.experimental.FirstFitPackIterDataset`):

1. Open `num_packing_bins` empty bins; each bin has, per feature, the packed
   length `length_struct` gives it.
2. Put each element, in the parent's order, into a bin where *every* feature
   still fits: the first such bin (first fit) or the one with the fewest
   tokens of room left, summed over features (best fit).
3. When an element fits in no bin, emit all bins (every bin is in use then,
   since an empty bin fits anything), in bin order or shuffled
   (`shuffle_bins`), and go back to 1 with that element in bin 0.
4. When the parent ends, emit the bins in use the same way, then stop.

A *group* is everything between two such flushes. Flushing whole groups costs
some padding against emitting one bin at a time, but it is what makes the
iterator state small and exact: when a group starts, all bins are empty, so
the group is a pure function of the elements read since its start.
`max_sequences_per_bin` is one more column of room, each element taking 1.

With `shuffle_bins=False` the output is identical to upstream Grain 0.2.18's,
for one feature and several (benchmarks/packing.py compares digests); with
shuffling, the bins of a group are the same but their order comes from our
generator (keyed by the seed and the group number), not upstream's.

Output, per packed example, for a dict element (nested dicts of str keys
too): for every feature ``k``, ``k`` (the packed tokens, padded with 0 or the
`padding_struct` value), ``k_segment_ids`` (int32: 1 for the bin's first
element, 2 for the second, ...; 0 on padding) and ``k_positions`` (int32: the
token's index within its element; 0 on padding). Segment ids count elements,
so the features of one element share an id. Features named in
`meta_features` are packed but get no ids or positions; a meta feature that
`length_struct` lacks is not packed: each example lists its elements' values
of it (``{"id": [3, 7]}``), as Grain does. With `pack_alignment_struct`, every
element of a feature starts at a multiple of that feature's alignment (the
room after an element is rounded up to it). Any other element
structure (a tuple, a list, a bare array) gives the tuple
``(packed, segment_ids, positions)``, three trees shaped like `length_struct`.

Elements: every leaf named by `length_struct` must be a 1-D array (or a list
numpy turns into one) of one dtype for the whole stream (a scalar is one
token); the element must have exactly the features of `length_struct` (and
the listed meta features): Grain drops other features silently, this raises
so that nothing is lost unnoticed. A feature longer than its
packed length raises a ValueError, as in Grain: silently cutting it would
lose tokens, so truncate elements before packing (or split them with
ConcatThenSplitIterDataset). Elements with no tokens at all are skipped.

State: ``{"parent": S, "consumed": c, "emitted": e, "group": g}``: S is the
parent's state before the current group's first element, c the number of
elements read since (the element that ended the group included), e how many
of the group's bins were already returned and g the group's number (the key
of its bin shuffle). `set_state` restores S and replays the c elements
through the same packing, so the restore costs re-reading and re-packing one
group: about ``num_packing_bins * (elements per bin)`` parent elements. No
token is ever stored in the state. Reading the parent's state before every
element (to know S when an element starts the next group) costs one
`get_state` call per element.

The bin search is vectorized over bins and features: a [bins, features]
array of remaining room, compared with the element's lengths in one numpy
expression. Tokens, segment ids and positions are written by slice
assignment into arrays preallocated when a bin is first used; emitting a
bin hands those arrays out without copying.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from grain_dataset._common._rng import element_rng
from grain_dataset._core._base import DatasetIterator, IterDataset, as_iter_dataset
from grain_dataset._core._iter_stage import Anchor, IterStage, StageIterator, iterator_of
from grain_dataset._core._seeding import explicit_seed, stage_seed
from grain_dataset._core._state import check_state
from grain_dataset._runtime._fingerprint import seed_param, token
from grain_index import checks

SEGMENT_DTYPE = np.int32
_NO_FIT = np.iinfo(np.int64).max
_SUFFIXES = ("_segment_ids", "_positions")


# -- the features of an element ---------------------------------------------------------


def _subscript(path: tuple[Any, ...]) -> str:
    """``['a'][0]`` for the path ('a', 0): appended to a name, e.g. `length_struct`."""
    return "".join(f"[{key!r}]" for key in path)


def _leaf_spec(value: Any) -> str:
    """A leaf as Grain describes it: dtype and shape, e.g. 'int32[2]' or 'int[]'."""
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[{len(value)}]"
    dtype = value.dtype.name if hasattr(value, "dtype") else type(value).__name__
    return f"{dtype}[{','.join(map(str, getattr(value, 'shape', ())))}]"


class _GrainKey(str):
    """A path entry printed as Grain prints it (a JAX key path entry)."""

    def __repr__(self) -> str:
        return str(self)


def _key_path(path: tuple[Any, ...]) -> tuple[_GrainKey, ...]:
    return tuple(
        _GrainKey(f"SequenceKey(idx={key})" if isinstance(key, int) else f"DictKey(key={key!r})")
        for key in path
    )


def _path_text(path: tuple[Any, ...]) -> str:
    """The path standing alone, as in "feature ['a'] of an element"."""
    return _subscript(path) or "(the whole element)"


def _flatten_lengths(
    node: Any, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], int]]
) -> None:
    if isinstance(node, Mapping):
        if not node:
            raise ValueError(f"`length_struct{_subscript(path)}` is an empty dict: name a feature.")
        for key, child in node.items():
            _flatten_lengths(child, (*path, key), out)
    elif isinstance(node, list | tuple):
        if not node:
            raise ValueError(f"`length_struct{_subscript(path)}` is empty: name a feature.")
        for index, child in enumerate(node):
            _flatten_lengths(child, (*path, index), out)
    else:
        name = f"length_struct{_subscript(path)}"
        out.append((path, checks.int_in_range(node, name, 1)))


def _all_str_dicts(node: Any) -> bool:
    if isinstance(node, Mapping):
        return all(isinstance(key, str) and _all_str_dicts(child) for key, child in node.items())
    return not isinstance(node, list | tuple)


def _build_tree(skeleton: Any, leaves: Any, path: tuple[Any, ...] = ()) -> Any:
    """A tree shaped like `skeleton` whose leaf at `path` is ``leaves[path]``."""
    if isinstance(skeleton, Mapping):
        return {key: _build_tree(child, leaves, (*path, key)) for key, child in skeleton.items()}
    if isinstance(skeleton, list | tuple):
        children = [_build_tree(child, leaves, (*path, i)) for i, child in enumerate(skeleton)]
        return list(children) if isinstance(skeleton, list) else tuple(children)
    return leaves[path]


class Layout:
    """The packed features: where each leaf sits in an element and its packed length.

    Shared by the packing and the concat-then-split datasets. `leaves(element)`
    flattens and checks one element; `assemble(...)` builds the output.
    """

    def __init__(self, length_struct: Any, meta_features: Collection[str], stage: str):
        flat: list[tuple[tuple[Any, ...], int]] = []
        _flatten_lengths(length_struct, (), flat)
        self.stage = stage
        self.skeleton = length_struct
        self.paths = [path for path, _ in flat]
        self.lengths = [length for _, length in flat]
        self.count = len(flat)
        self.names = [_path_text(path) for path in self.paths]
        # Positions are copied from here: 0, 1, ... up to the longest packed length.
        self.arange = np.arange(max(self.lengths), dtype=SEGMENT_DTYPE)
        self.dict_format = isinstance(length_struct, Mapping) and _all_str_dicts(length_struct)
        # The common case, a flat dict of arrays, is flattened without recursion.
        self.flat_keys: tuple[str, ...] | None = None
        if self.dict_format and all(len(path) == 1 for path in self.paths):
            self.flat_keys = tuple(path[0] for path in self.paths)
        # Meta features not in `length_struct` (first/best fit): each bin lists their values.
        self.list_meta: tuple[str, ...] = ()
        self.meta = self._meta_flags(meta_features)
        if self.dict_format:
            self._check_suffix_clashes()

    def _meta_flags(self, meta_features: Any) -> list[bool]:
        if isinstance(meta_features, str) or not isinstance(meta_features, Sequence | set):
            raise TypeError(
                f"`meta_features` must be a sequence of feature names, got {meta_features!r}."
            )
        names = list(meta_features)
        if names and self.flat_keys is None:
            raise ValueError(
                "`meta_features` needs `length_struct` to be a flat dict of str keys, got "
                f"{self.skeleton!r}; drop `meta_features` or flatten the elements."
            )
        unknown = [name for name in names if name not in (self.flat_keys or ())]
        if unknown:
            if not all(isinstance(name, str) for name in unknown):
                raise TypeError(f"`meta_features` must be feature names (str), got {unknown!r}.")
            self.list_meta = tuple(unknown)
        return [path[0] in names for path in self.paths] if names else [False] * self.count

    def allow_list_meta(self, allowed: bool) -> None:
        """Stages that cannot list meta features refuse names `length_struct` lacks."""
        if self.list_meta and not allowed:
            raise ValueError(
                f"`meta_features` names {list(self.list_meta)}, which `length_struct` lacks "
                f"(its features: {list(self.flat_keys or ())}); {self.stage} packs only "
                "features with a packed length."
            )

    def list_meta_values(self, element: Any) -> tuple[Any, ...]:
        """The element's values of the meta features `length_struct` lacks."""
        if not self.list_meta:
            return ()
        try:
            return tuple(element[name] for name in self.list_meta)
        except (KeyError, TypeError):
            missing = [name for name in self.list_meta if name not in element]
            raise ValueError(
                f"{self.stage}: element lacks the meta features {missing} named in `meta_features`."
            ) from None

    def _check_suffix_clashes(self) -> None:
        taken = set(self.paths)
        for path, meta in zip(self.paths, self.meta, strict=True):
            for suffix in () if meta else _SUFFIXES:
                extra = (*path[:-1], path[-1] + suffix)
                if extra in taken:
                    raise ValueError(
                        f"`length_struct` has both {_path_text(path)} and {_path_text(extra)}; "
                        f"packing adds {_path_text(extra)} itself: rename that feature."
                    )

    # -- elements ------------------------------------------------------------------------

    def leaves(self, element: Any) -> list[Any]:
        """The element's leaves in `paths` order; raises if the structure differs."""
        out: list[Any] = []
        if self.list_meta and isinstance(element, Mapping):
            element = {k: v for k, v in element.items() if k not in self.list_meta}
        self._walk(element, self.skeleton, element, (), out)
        return out

    def _walk(
        self, node: Any, skeleton: Any, element: Any, path: tuple[Any, ...], out: list
    ) -> None:
        if isinstance(skeleton, Mapping):
            if not isinstance(node, Mapping) or node.keys() != skeleton.keys():
                self._structure_error(node, skeleton, element, path)
            for key, child in skeleton.items():
                self._walk(node[key], child, element, (*path, key), out)
        elif isinstance(skeleton, list | tuple):
            if not isinstance(node, list | tuple) or len(node) != len(skeleton):
                self._structure_error(node, skeleton, element, path)
            for index, child in enumerate(skeleton):
                self._walk(node[index], child, element, (*path, index), out)
        else:
            out.append(node)

    def _grain_structure(self, node: Any, skeleton: Any) -> str:
        """ConcatThenSplitIterDataset's wording in Grain, which clients match; "" elsewhere."""
        if not self.stage.startswith("ConcatThenSplit"):
            return ""
        if isinstance(node, Mapping):
            spec = {key: _leaf_spec(value) for key, value in node.items()}
            return (
                f"Parent element has structure {spec} but target sequence length is "
                f"{skeleton}. There must be a sequence length for each feature. "
            )
        return f"Parent elements must be unnested dictionaries but got {_leaf_spec(node)}. "

    def _structure_error(self, node: Any, skeleton: Any, element: Any, path: tuple) -> None:
        grain = self._grain_structure(node, skeleton)
        where = f"element{_subscript(path)}"
        if isinstance(skeleton, Mapping) and isinstance(node, Mapping):
            missing = [key for key in skeleton if key not in node]
            extra = [key for key in node if key not in skeleton]
            parts = []
            if missing:
                parts.append(f"lacks {missing}, which `length_struct` names")
            if extra:
                parts.append(f"has {extra}, which `length_struct` lacks")
            raise ValueError(
                f"{grain}{self.stage}: {where} {' and '.join(parts)}. Every element needs "
                "exactly the features of `length_struct`: add the missing ones to the "
                "elements, and give extra features a packed length in `length_struct` or "
                "remove them with a map."
            )
        kind = "a dict" if isinstance(skeleton, Mapping) else f"a sequence of {len(skeleton)}"
        raise ValueError(
            f"{grain}{self.stage}: {where} must be {kind} like `length_struct{_subscript(path)}`, "
            f"got {type(node).__name__}: {_short(node)}. Make `length_struct` mirror the "
            "elements' structure."
        )

    def check_leaf(self, index: int, leaf: Any) -> np.ndarray:
        """`leaf` as a 1-D numeric numpy array; raises naming the feature otherwise.

        A scalar is a sequence of one token, as in Grain.
        """
        if isinstance(leaf, Mapping):
            raise ValueError(
                f"{self.stage}: feature {self.names[index]} of an element is a dict with keys "
                f"{sorted(leaf)}, where `length_struct` has one packed length: make "
                "`length_struct` mirror the elements' structure, e.g. {key: length}."
            )
        if type(leaf) is not np.ndarray:
            leaf = np.asarray(leaf)
        if leaf.ndim == 0:
            leaf = leaf.reshape(1)
        if leaf.ndim != 1:
            raise ValueError(
                f"{self.stage}: feature {self.names[index]} of an element has shape "
                f"{leaf.shape}; packing needs 1-D arrays (one token per entry): reshape or "
                "split the feature with a map before packing."
            )
        if leaf.dtype.kind not in "biuf":
            raise TypeError(
                f"{self.stage}: feature {self.names[index]} has dtype {leaf.dtype}; packing "
                "needs numeric arrays (tokenize the feature before packing)."
            )
        return leaf

    def checked_leaves(self, element: Any, dtypes: list[np.dtype | None]) -> list[np.ndarray]:
        """The element's leaves as checked 1-D arrays; the first element fixes `dtypes`."""
        keys = self.flat_keys
        leaves = None
        if (
            keys is not None
            and type(element) is dict
            and len(element) == len(keys) + len(self.list_meta)
        ):
            try:
                leaves = [element[key] for key in keys]
            except KeyError:
                leaves = None
        if leaves is None:
            leaves = self.leaves(element)  # the general case, or the error for a bad dict
        for index, leaf in enumerate(leaves):
            want = dtypes[index]
            # The common case costs three comparisons; anything else takes the slow path.
            if type(leaf) is not np.ndarray or leaf.ndim != 1 or want is None or leaf.dtype != want:
                leaf = leaves[index] = self.check_leaf(index, leaf)
                if want is None:
                    dtypes[index] = leaf.dtype
                elif leaf.dtype != want:
                    raise self.dtype_error(index, leaf.dtype, want)
        return leaves

    def dtype_error(self, index: int, got: np.dtype, want: np.dtype) -> TypeError:
        return TypeError(
            f"{self.stage}: feature {self.names[index]} of an element has dtype {got}, but "
            f"earlier elements had {want}; one packed array holds one dtype, so cast the "
            f"feature (e.g. `.map(lambda x: {{..., k: v.astype(np.{want})}})`) before packing."
        )

    # -- output --------------------------------------------------------------------------

    def assemble(self, values: list[Any], segments: list[Any], positions: list[Any]) -> Any:
        """The output element: sibling keys for dicts, else ``(values, segments, positions)``."""
        if self.flat_keys is not None:
            out = {}
            for key, meta, value, segment, position in zip(
                self.flat_keys, self.meta, values, segments, positions, strict=True
            ):
                out[key] = value
                if not meta:
                    out[key + "_segment_ids"] = segment
                    out[key + "_positions"] = position
            return out
        if self.dict_format:
            leaves: dict[tuple[Any, ...], Any] = {}
            for path, value, segment, position in zip(
                self.paths, values, segments, positions, strict=True
            ):
                leaves[path] = value
                leaves[(*path[:-1], path[-1] + "_segment_ids")] = segment
                leaves[(*path[:-1], path[-1] + "_positions")] = position
            return _nest(leaves)
        trees = []
        for column in (values, segments, positions):
            by_path = dict(zip(self.paths, column, strict=True))
            trees.append(_build_tree(self.skeleton, by_path))
        return tuple(trees)

    def flat_values(self, struct: Any, name: str) -> list[Any]:
        """The leaves of `struct` (e.g. `padding_struct`), which must mirror `length_struct`."""
        out: list[Any] = []
        try:
            self._walk(struct, self.skeleton, struct, (), out)
        except ValueError:
            raise ValueError(
                f"`{name}` must have the structure of `length_struct` ({self.skeleton!r}), "
                f"got {struct!r}."
            ) from None
        return out


def _nest(leaves: dict[tuple[Any, ...], Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for path, value in leaves.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- the datasets ------------------------------------------------------------------------


class _PackIterDataset(IterStage):
    """What first fit and best fit share: arguments, layout and the iterator."""

    _positional_chain = True
    _order_as_grain = False

    def _fingerprint_token(self) -> str | None:
        return token(
            type(self).__name__,
            self._layout.lengths,
            self._num_bins,
            seed_param(self._seed),
            self._align,
        )

    _best_fit = False

    def __init__(
        self,
        parent: IterDataset[Any],
        *,
        length_struct: Any,
        num_packing_bins: int,
        seed: int | None = 0,
        shuffle_bins: bool = True,
        shuffle_bins_group_by_feature: str | None = None,
        meta_features: Sequence[str] = (),
        pack_alignment_struct: Any = None,
        padding_struct: Any = None,
        max_sequences_per_bin: int | None = None,
    ):
        name = type(self).__name__
        super().__init__(as_iter_dataset(parent, "parent", name))
        self._layout = Layout(length_struct, meta_features, name)
        self._num_bins = checks.int_in_range(num_packing_bins, "num_packing_bins", 1)
        if not isinstance(shuffle_bins, bool):
            raise TypeError(f"`shuffle_bins` must be a bool, got {shuffle_bins!r}.")
        self._shuffle_bins = shuffle_bins
        # seed=None takes the seed of `ds.seed(...)` upstream (and raises without one).
        self._seed = stage_seed(self, seed, name) if shuffle_bins else None
        if seed is not None and not shuffle_bins:
            explicit_seed(seed)
        if shuffle_bins_group_by_feature is not None:
            raise NotImplementedError(
                f"`shuffle_bins_group_by_feature` is not supported by {name} in this "
                "implementation; leave it None (bins are shuffled as one group)."
            )
        # pack_alignment_struct: each element's tokens start at a multiple of its feature's
        # alignment (the room after an element is rounded up to it).
        self._align: list[int] | None = None
        if pack_alignment_struct is not None:
            aligns = self._layout.flat_values(pack_alignment_struct, "pack_alignment_struct")
            self._align = [
                checks.int_in_range(value, f"pack_alignment_struct[{name_}]", 1)
                for value, name_ in zip(aligns, self._layout.names, strict=True)
            ]
            if all(value == 1 for value in self._align):
                self._align = None
        if padding_struct is None:
            self._padding = [0] * self._layout.count
        else:
            self._padding = self._layout.flat_values(padding_struct, "padding_struct")
            for index, value in enumerate(self._padding):
                if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                    raise TypeError(
                        f"`padding_struct` leaf {self._layout.names[index]} must be a number, "
                        f"got {value!r}."
                    )
        self._max_sequences = (
            None
            if max_sequences_per_bin is None
            else checks.int_in_range(
                max_sequences_per_bin,
                "max_sequences_per_bin",
                1,
                lead="If specified, `max_sequences_per_bin` must be a positive integer, "
                "but got {value}.",
            )
        )

    def _describe(self) -> str:
        return (
            f"length_struct={self._layout.skeleton!r}, num_packing_bins={self._num_bins}, "
            f"shuffle_bins={self._shuffle_bins}"
        )


class FirstFitPackIterDataset(_PackIterDataset):
    """Packs sequences into `num_packing_bins` bins, each element into the first bin it fits.

    When an element fits in no bin, all bins are emitted (shuffled if
    `shuffle_bins`, with a permutation keyed by `seed` and the group number)
    and packing starts over with that element. See the module docstring for
    the output format, truncation and the iterator state.

    Args:
      parent: an IterDataset of dicts (or trees) of 1-D arrays.
      length_struct: the packed length of every feature, in the elements' structure.
      num_packing_bins: bins packed at once; more bins, less padding.
      seed: seed of the bin shuffle, in [0, 2**32); None takes `ds.seed(...)`'s.
      shuffle_bins: emit each group's bins in a random order instead of bin order.
      meta_features: features packed without segment ids and positions; those
        `length_struct` lacks are listed per example instead of packed.
      pack_alignment_struct: the alignment of every feature (default 1): each
        element starts at a multiple of it.
      padding_struct: the padding value of every feature (default 0).
      max_sequences_per_bin: at most this many elements in one bin.
      shuffle_bins_group_by_feature: not supported (must be None).

    Example::

        ds = grain.MapDataset.source([{"tokens": np.arange(n)} for n in (3, 2, 4)])
        packed = FirstFitPackIterDataset(
            ds.to_iter_dataset(), length_struct={"tokens": 5}, num_packing_bins=2,
            shuffle_bins=False,
        )
        next(iter(packed))
        # {"tokens": [0, 1, 2, 0, 1], "tokens_segment_ids": [1, 1, 1, 2, 2],
        #  "tokens_positions": [0, 1, 2, 0, 1]}
    """

    _positional_chain = True


class BestFitPackIterDataset(_PackIterDataset):
    """Packs sequences into the bin they fit most tightly: less padding than first fit.

    Like `FirstFitPackIterDataset`, except that an element goes, among the
    bins where all its features fit, to the one with the fewest tokens of
    room left (summed over features, as upstream Grain 0.2.18 scores it;
    ties go to the lowest bin). Best fit keeps large gaps open for large
    elements, so a group holds more elements before one fits nowhere.

    Example::

        ds = grain.MapDataset.source([{"tokens": np.arange(n)} for n in (3, 4, 1, 2)])
        packed = BestFitPackIterDataset(
            ds.to_iter_dataset(), length_struct={"tokens": 5}, num_packing_bins=2,
            shuffle_bins=False,
        )
        [p["tokens_segment_ids"].tolist() for p in packed]
        # [[1, 1, 1, 2, 2], [1, 1, 1, 1, 2]]: the 1 goes with the 4, leaving room
        # for the 2 beside the 3. First fit puts the 1 beside the 3 and needs a
        # third example for the 2.
    """

    _positional_chain = True

    _best_fit = True


# -- the iterator ------------------------------------------------------------------------


@iterator_of(_PackIterDataset)
class _PackIterator(StageIterator):
    def __init__(self, dataset: _PackIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        layout = self._layout = dataset._layout
        self._count = layout.count
        self._bins = dataset._num_bins
        self._best_fit = dataset._best_fit
        capacity = list(layout.lengths)
        if dataset._max_sequences is not None:
            # The number of elements is one more column of room: each element takes 1.
            capacity.append(dataset._max_sequences)
        self._capacity = np.array(capacity, dtype=np.int64)
        self._columns = len(capacity)
        self._dtypes: list[np.dtype | None] = [None] * self._count
        self._group = 0
        self._anchor = Anchor(parent)
        self._reset_bins()

    # -- the group -----------------------------------------------------------------------

    def _reset_bins(self) -> None:
        bins = self._bins
        self._remaining = np.tile(self._capacity, (bins, 1))
        # A view: updates through _remaining show in it (the one-feature fast path).
        self._remaining_0 = self._remaining[:, 0]
        # Best fit's score: the tokens of room left in each bin, summed over features.
        self._room = np.full(bins, sum(self._layout.lengths), dtype=np.int64)
        # Per bin, once in use: per feature (values, segment ids, positions), the tokens
        # in each feature so far, and the number of elements.
        self._arrays: list[list[tuple[np.ndarray, Any, Any]] | None] = [None] * bins
        self._fills: list[list[int]] = [[0] * self._count for _ in range(bins)]
        self._elements = [0] * bins
        self._used = 0
        self._consumed = 0
        self._emitted = 0
        self._order: list[int] | None = None  # the bins being emitted, once flushing
        self._pending: tuple[list[np.ndarray], list[int], Any, tuple[Any, ...]] | None = None
        # Per bin: the values of the meta features `length_struct` lacks, one tuple each.
        self._extras: list[list[tuple[Any, ...]]] = [[] for _ in range(bins)]

    def _grain_too_long(self, leaves: list[np.ndarray]) -> str:
        """Grain's wording for elements longer than the packed length (clients match it)."""
        limits = self._layout.lengths
        over = [
            (_key_path(self._layout.paths[i]), leaf.shape[0], limits[i])
            for i, leaf in enumerate(leaves)
            if leaf.shape[0] > limits[i]
        ]
        packer = "packer" if self._best_fit else "PackedBatch"
        return (
            f"Inputs to {packer} must be truncated to max length. Exceeds: "
            f"(feature_path, feature_length, max_length) = {over}"
        )

    def _prepare(self, element: Any) -> tuple[list[np.ndarray], list[int]] | None:
        """The element's checked leaves and lengths (truncated to fit); None if it is empty."""
        leaves = self._layout.checked_leaves(element, self._dtypes)
        limits = self._layout.lengths
        lengths = []
        for index, leaf in enumerate(leaves):
            size = leaf.shape[0]
            if size > limits[index]:
                raise ValueError(
                    f"{self._grain_too_long(leaves)} "
                    f"{self._layout.stage}: feature {self._layout.names[index]} of an element "
                    f"has {size} tokens, more than its packed length {limits[index]}. Truncate "
                    f"elements to the packed length before packing (e.g. a map that keeps "
                    f"[:{limits[index]}] of each feature), or split long ones with "
                    "grain.experimental.ConcatThenSplitIterDataset."
                )
            lengths.append(size)
        if not any(lengths):
            return None
        return leaves, lengths

    def _choose(self, lengths: list[int]) -> int:
        """The bin for an element of `lengths` tokens per feature, or -1 if none has room."""
        if self._columns == 1:
            size = lengths[0]
            room = self._remaining_0
            if self._best_fit:
                score = np.where(room >= size, room, _NO_FIT)
                chosen = int(score.argmin())
                return chosen if score[chosen] != _NO_FIT else -1
            fits = room >= size
        else:
            need = lengths if self._columns == self._count else [*lengths, 1]
            # all(axis=1) of a 2-D array is a 1-D array (numpy types it as possibly a scalar).
            fits = (self._remaining >= np.array(need, dtype=np.int64)).all(axis=1)  # type: ignore[assignment]
            if self._best_fit:
                score = np.where(fits, self._room, _NO_FIT)
                chosen = int(score.argmin())
                return chosen if score[chosen] != _NO_FIT else -1
        chosen = int(fits.argmax())
        return chosen if fits[chosen] else -1

    def _insert(
        self,
        chosen: int,
        leaves: list[np.ndarray],
        lengths: list[int],
        extras: tuple[Any, ...] = (),
    ) -> None:
        if extras:
            self._extras[chosen].append(extras)
        arrays = self._arrays[chosen]
        if arrays is None:
            arrays = self._arrays[chosen] = self._allocate()
            self._used = max(self._used, chosen + 1)
        fills = self._fills[chosen]
        segment = self._elements[chosen] = self._elements[chosen] + 1
        arange = self._layout.arange
        for index, leaf in enumerate(leaves):
            size = lengths[index]
            if size:
                start = fills[index]
                end = fills[index] = start + size
                values, segments, positions = arrays[index]
                values[start:end] = leaf
                if segments is not None:  # None for meta features
                    segments[start:end] = segment
                    positions[start:end] = arange[:size]
        align = self._dataset._align
        if align is not None:
            # The next element starts at the next multiple of the alignment (or the end).
            # Fills are always aligned (or at the end), so an empty feature stays put.
            capacity = self._layout.lengths
            advanced = []
            for index, size in enumerate(lengths):
                stop = min(-(-fills[index] // align[index]) * align[index], capacity[index])
                advanced.append(stop - (fills[index] - size))
                fills[index] = stop
            lengths = advanced
        if self._columns == 1:
            self._remaining_0[chosen] -= lengths[0]
        else:
            self._remaining[chosen] -= lengths if self._columns == self._count else [*lengths, 1]
            self._room[chosen] -= sum(lengths)

    def _allocate(self) -> list[tuple[np.ndarray, Any, Any]]:
        arrays: list[tuple[np.ndarray, Any, Any]] = []
        layout = self._layout
        for index, length in enumerate(layout.lengths):
            dtype = self._dtypes[index]
            pad = self._dataset._padding[index]
            if pad == 0:
                values = np.zeros(length, dtype=dtype)
            else:
                values = np.full(length, pad, dtype=dtype)
                if values[0] != pad:
                    raise ValueError(
                        f"`padding_struct` value {pad!r} of feature {layout.names[index]} "
                        f"does not fit its dtype {dtype}; pick a padding value of that dtype."
                    )
            if layout.meta[index]:
                arrays.append((values, None, None))
            else:
                segments = np.zeros(length, dtype=SEGMENT_DTYPE)
                arrays.append((values, segments, np.zeros(length, dtype=SEGMENT_DTYPE)))
        return arrays

    def _pack(self, limit: int | None = None) -> bool:
        """Reads and packs elements until one fits no bin (True: it is pending) or `limit`.

        Raises StopIteration when the parent ends first.
        """
        parent = self._parent
        prepare, choose, insert = self._prepare, self._choose, self._insert
        extras_of = self._layout.list_meta_values
        while limit is None or self._consumed < limit:
            # The state before each element: the next group starts before the one that
            # does not fit, and which one that is shows only after reading it.
            before = parent.get_state()
            element = next(parent)
            self._consumed += 1
            prepared = prepare(element)
            if prepared is None:
                continue
            leaves, lengths = prepared
            extras = extras_of(element)
            chosen = choose(lengths)
            if chosen < 0:
                self._pending = (leaves, lengths, before, extras)
                return True
            insert(chosen, leaves, lengths, extras)
        return False

    def _start_flush(self) -> None:
        order = list(range(self._used))
        if self._dataset._shuffle_bins and len(order) > 1:
            # shuffle_bins always comes with a seed (see __init__).
            rng = element_rng(self._dataset._seed, self._group)  # type: ignore[arg-type]
            order = rng.permutation(len(order)).tolist()
        self._order = order
        self._emitted = 0

    def _next_group(self) -> None:
        """After a flush: an empty group that starts with the element that did not fit."""
        pending = self._pending
        assert pending is not None
        leaves, lengths, before, extras = pending
        self._group += 1
        self._reset_bins()
        self._anchor.set(before)
        self._consumed = 1
        self._insert(0, leaves, lengths, extras)

    def _emit(self, chosen: int) -> Any:
        arrays = self._arrays[chosen]
        assert arrays is not None
        values, segments, positions = zip(*arrays, strict=True)
        out = self._layout.assemble(list(values), list(segments), list(positions))
        for column, name in enumerate(self._layout.list_meta):
            out[name] = [extras[column] for extras in self._extras[chosen]]
        return out

    # -- the protocol --------------------------------------------------------------------

    def __next__(self) -> Any:
        if self._order is None:
            # At the parent's end, the last group: nothing pending, the output ends after it.
            with contextlib.suppress(StopIteration):
                self._pack()
            self._start_flush()
        order = self._order
        assert order is not None
        if self._emitted == len(order):
            raise StopIteration
        chosen = order[self._emitted]
        self._emitted += 1
        result = self._emit(chosen)
        if self._emitted == len(order) and self._pending is not None:
            self._next_group()
        return result

    def get_state(self) -> dict[str, Any]:
        return {
            "parent": self._anchor.saved(),
            "consumed": self._consumed,
            "emitted": self._emitted,
            "group": self._group,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("parent", "consumed", "emitted", "group"))
        consumed, emitted = state["consumed"], state["emitted"]
        self._anchor.restore(state["parent"])
        self._reset_bins()
        self._group = state["group"]
        # Replay the group: the same elements packed the same way rebuild the same bins.
        try:
            overflow = self._pack(consumed)
        except StopIteration:
            raise ValueError(
                f"cannot restore {stage}: its state says the group read {consumed} "
                f"elements, but the parent ended after {self._consumed}. The state is from "
                "a different pipeline or data."
            ) from None
        if overflow and self._consumed != consumed:
            raise ValueError(
                f"cannot restore {stage}: element {self._consumed} of the group fits no bin, "
                f"but the state says the group read {consumed}. The state is from a "
                "different pipeline or data."
            )
        if emitted == 0 and not overflow:
            return
        # Bins were being emitted: after an element that fit nowhere (pending), or
        # because the parent had ended (nothing pending).
        self._start_flush()
        assert self._order is not None
        if not 0 < emitted <= len(self._order) or (overflow and emitted == len(self._order)):
            raise ValueError(
                f"cannot restore {stage}: state['emitted']={emitted} does not fit a group "
                f"of {len(self._order)} bins. The state is from a different pipeline or data."
            )
        self._emitted = emitted
