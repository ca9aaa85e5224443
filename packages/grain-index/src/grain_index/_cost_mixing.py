"""Mixing by cost: each component's share of a per-record cost (tokens) follows the weights.

`MixingSchedule` interleaves records; when records differ in length, a record
share is not a token share (three components whose documents differ 10x in
mean length, mixed 1:1:1 by records, give the longest one 10x the tokens of
the shortest). `CostMixingSchedule` takes each component's per-record costs
and interleaves so that the cost read from each follows the weights.

The model is weighted fair queueing on a virtual time axis. Component j, of
weight w_j (the weights scaled to sum 1), with costs c_j[0..n_j) and prefix
sums P_j, puts its record k at the virtual time

    tau_j(k) = (P_j(k) + c_j(k) / 2) / w_j        (the record's midpoint)

and the mixture is every record of every component in order of tau (ties:
lower component, then lower index). At any virtual time t component j has read
w_j * t of cost, give or take half a record: over any stretch of the mixture,
each component's cost is within one record of its share. Past its n_j
records, component j continues into its own later epochs (index k >= n_j reads
record k % n_j at tau shifted by the whole epoch's cost over w_j), as the
record mix does.

Random access without a table of the whole (endless) sequence: the virtual
time axis is cut into chunks of length V, the shortest component epoch
(min_j T_j / w_j, T_j the sum of component j's costs). Chunk e holds, for each
component, the index range [K_j(eV), K_j((e+1)V)) of its records whose tau is
below the bound (one `searchsorted` each), so where a chunk starts is a sum of
m counts, and a position finds its chunk by a short bisection over e. A
chunk's order is one stable argsort of its records' tau values (m sorted runs:
timsort merges them), built on first touch and kept while it is used; a lookup
in a built chunk is O(1). Chunk 0 is the first mixed epoch: its length is where
the component that runs out first (in cost, for its weight) is used up.

All arithmetic is float64 and the same expressions compute a chunk's bounds
wherever they are needed, so every process derives the same sequence, and the
chunks' index ranges partition each component's indices: no record is lost or
read twice, whatever rounding does to the order within a chunk. That order is
exact to well under a record while the virtual clock stays below about 2^53
cost units over weight (some 10^15 tokens); beyond, rounding blurs the
interleaving within a record or so, never the counts.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_index import _validate

_CACHED_CHUNKS = 2


def _check_costs(costs: Any, count: int) -> list[np.ndarray]:
    try:
        values = list(costs)
    except TypeError:
        raise TypeError(
            f"`costs` must be a list with one array of per-record costs per component, "
            f"got {type(costs).__name__}."
        ) from None
    if len(values) != count:
        raise ValueError(
            f"`costs` must have one entry per component: got {len(values)} entries for "
            f"{count} components."
        )
    arrays = []
    for j, value in enumerate(values):
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind not in "iuf":
            raise TypeError(
                f"`costs[{j}]` must be an array of numbers (one cost per record), got dtype "
                f"{array.dtype}."
            )
        if array.ndim != 1 or array.size == 0:
            raise ValueError(
                f"`costs[{j}]` must be a non-empty 1-D array (one cost per record), got shape "
                f"{array.shape}."
            )
        array = array.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(array) | (array <= 0))
        if bad.size:
            raise ValueError(
                f"`costs[{j}][{int(bad[0])}]` is {array[bad[0]]}: every cost must be finite and "
                "> 0 (a record of cost 0 takes no share; drop empty records with a filter "
                "before mixing, or give them a cost of 1)."
            )
        arrays.append(array)
    return arrays


class CostMixingSchedule:
    """A deterministic interleaving of components whose per-record costs follow weights.

    Args:
      weights: one finite weight > 0 per component: the share of the total cost
        that each component should make up.
      costs: one 1-D array per component, its records' costs (> 0), e.g. token
        counts; record k of component j beyond its length reads costs[j][k % n_j].

    Example::

        schedule = CostMixingSchedule([0.5, 0.5], [[10, 10, 10], [1, 1, 1, 1, 1, 1]])
        schedule.epoch_length()         # 7: the 6 short records and one long one
        schedule.lookup(3)              # (component, index within component)
        components, indices = schedule.lookup_array(np.arange(100))
    """

    def __init__(self, weights: Sequence[float], costs: Sequence[Any]):
        values = _validate.finite_weights(weights)
        zero = [j for j, w in enumerate(values) if w == 0]
        if zero:
            raise ValueError(
                f"`weights[{zero[0]}]` is 0: a cost mix needs every weight > 0; leave that "
                "component out of the mix."
            )
        arrays = _check_costs(costs, len(values))
        total = sum(values)
        self._weights = np.asarray([w / total for w in values], dtype=np.float64)
        self._sizes = np.asarray([len(a) for a in arrays], dtype=np.int64)
        # Doubled midpoints 2 P(k) + c(k) = P(k) + P(k + 1): sorted, in [0, 2 T).
        self._midpoints = []
        spans = []
        for array in arrays:
            ends = np.cumsum(array)
            starts = ends - array
            self._midpoints.append(starts + ends)
            spans.append(2 * float(ends[-1]))
        self._spans = np.asarray(spans, dtype=np.float64)  # 2 T_j
        periods = self._spans / self._weights
        self._chunk = float(periods.min())  # V, in doubled cost units over weight
        self._rates = self._chunk * self._weights  # doubled cost of j per chunk
        # Upper bound on records per chunk, and the average: they bound the bisection.
        self._total_size = int(self._sizes.sum())
        self._per_chunk = float((self._sizes * self._rates / self._spans).sum())
        # The chunk tables hold a component per position: the smallest integer that fits.
        self._component_dtype = np.min_scalar_type(len(self._sizes))
        self._epoch_length = self.chunk_start(1)
        self._init_cache()

    def _init_cache(self) -> None:
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[int, tuple[int, int, np.ndarray, np.ndarray]] = (
            collections.OrderedDict()
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"], state["_cache"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def __repr__(self) -> str:
        return (
            f"CostMixingSchedule(weights={self._weights.round(6).tolist()}, "
            f"records={self._sizes.tolist()})"
        )

    @property
    def num_components(self) -> int:
        return len(self._sizes)

    @property
    def weights(self) -> tuple[float, ...]:
        """The weights, scaled to sum to 1."""
        return tuple(self._weights.tolist())

    def epoch_length(self) -> int:
        """Positions in the first mixed epoch: until the component that runs out first is used."""
        return self._epoch_length

    # -- chunks ---------------------------------------------------------------------------

    def _counts(self, chunks: np.ndarray) -> np.ndarray:
        """K_j(e V) for each chunk bound e: int64 array of shape (m, len(chunks))."""
        bounds = chunks.astype(np.float64)
        result = np.empty((len(self._sizes), len(bounds)), dtype=np.int64)
        for j, midpoints in enumerate(self._midpoints):
            doubled = bounds * self._rates[j]
            epochs = np.floor(doubled / self._spans[j])
            rest = doubled - epochs * self._spans[j]
            within = np.searchsorted(midpoints, rest, side="left")
            result[j] = epochs.astype(np.int64) * self._sizes[j] + within
        return result

    def chunk_start(self, chunk: int) -> int:
        """The first position of chunk `chunk` (chunk 1 starts the second mixed epoch)."""
        chunk = _validate.int_in_range(chunk, "chunk", 0)
        return int(self._counts(np.asarray([chunk])).sum())

    def _chunks_of(self, positions: np.ndarray) -> np.ndarray:
        """The chunk that holds each position: bisection between bounds from the average."""
        p = positions.astype(np.float64)
        low = np.maximum(np.floor((p - self._total_size) / self._per_chunk) - 1, 0)
        high = np.ceil((p + self._total_size) / self._per_chunk) + 2
        low, high = low.astype(np.int64), high.astype(np.int64)
        # Invariant: start(low) <= p < start(high). The bounds hold by the counting
        # argument (each component is within its size of its average); rounding far
        # out is guarded by widening where they do not.
        low = np.where(self._counts(low).sum(axis=0) <= positions, low, 0)
        while True:
            short = self._counts(high).sum(axis=0) <= positions
            if not short.any():
                break
            high = np.where(short, 2 * high + 1, high)
        while True:
            open_ = high - low > 1
            if not open_.any():
                return low
            middle = (low + high) // 2
            starts = self._counts(middle).sum(axis=0)
            below = starts <= positions
            low = np.where(open_ & below, middle, low)
            high = np.where(open_ & ~below, middle, high)

    def _table(self, chunk: int) -> tuple[int, int, np.ndarray, np.ndarray]:
        """(start, end, components, indices) of a chunk, built on first use."""
        with self._lock:
            cached = self._cache.get(chunk)
            if cached is not None:
                self._cache.move_to_end(chunk)
                return cached
        counts = self._counts(np.asarray([chunk, chunk + 1]))
        first, last = counts[:, 0], counts[:, 1]
        times, components, indices = [], [], []
        for j, midpoints in enumerate(self._midpoints):
            index = np.arange(first[j], last[j], dtype=np.int64)
            epochs, offsets = np.divmod(index, self._sizes[j])
            # Absolute virtual time, as an IterDataset mix by cost keeps its clock: the
            # two compute the same expression, so they order alike wherever costs are integers.
            doubled = epochs * self._spans[j] + midpoints[offsets]
            times.append(doubled / self._weights[j])
            components.append(np.full(len(index), j, dtype=self._component_dtype))
            indices.append(index)
        order = np.argsort(np.concatenate(times), kind="stable")
        table = (
            int(first.sum()),
            int(last.sum()),
            np.concatenate(components)[order],
            np.concatenate(indices)[order],
        )
        for array in table[2:]:
            array.flags.writeable = False
        with self._lock:
            self._cache[chunk] = table
            while len(self._cache) > _CACHED_CHUNKS:
                self._cache.popitem(last=False)
        return table

    def _cached_table(self, position: int) -> tuple[int, int, np.ndarray, np.ndarray] | None:
        with self._lock:
            for table in reversed(self._cache.values()):
                if table[0] <= position < table[1]:
                    return table
        return None

    # -- lookups --------------------------------------------------------------------------

    def lookup(self, position: int) -> tuple[int, int]:
        """Returns (component, index within that component) of `position`."""
        position = _validate.int_in_range(position, "position", 0)
        table = self._cached_table(position)
        if table is None:
            chunk = int(self._chunks_of(np.asarray([position], dtype=np.int64))[0])
            table = self._table(chunk)
        start, _, components, indices = table
        return int(components[position - start]), int(indices[position - start])

    def lookup_array(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized `lookup`: int64 arrays (components, indices) of `positions`' shape."""
        array = _validate.index_array(positions, "positions").astype(np.int64)
        if array.size and int(array.min()) < 0:
            raise ValueError(f"`positions` must be >= 0, got {int(array.min())}.")
        flat = array.reshape(-1)
        if not flat.size:
            empty = np.zeros(array.shape, dtype=np.int64)
            return empty, empty.copy()
        table = self._cached_table(int(flat.min()))
        if table is not None and int(flat.max()) < table[1]:
            # The common case (reading on in a chunk already built): two gathers.
            start, _, table_components, table_indices = table
            offsets = flat - start
            components = table_components[offsets].astype(np.int64)
            indices = table_indices[offsets]
        else:
            components = np.empty(flat.shape, dtype=np.int64)
            indices = np.empty(flat.shape, dtype=np.int64)
            chunks = self._chunks_of(flat)
            for chunk in np.unique(chunks).tolist():
                start, _, table_components, table_indices = self._table(chunk)
                where = chunks == chunk
                offsets = flat[where] - start
                components[where] = table_components[offsets]
                indices[where] = table_indices[offsets]
        return components.reshape(array.shape), indices.reshape(array.shape)
