"""`grain.monitoring`: in-process metrics, and the statistics of running pipelines.

Grain's metric classes (`Counter`, `Metric`, `EventMetric`, with `Metadata`,
`Units`, `Bucketer`) keep their values here, in this process, with no metrics
server: read them with `snapshot()` and send them wherever your training job
already reports (TensorBoard, Prometheus, logs).

  Counter       Increment / IncrementBy / Get / ClearAll   a count that only grows
  Metric        Set / Get / ClearAll                       a gauge
  EventMetric   Record / Get / ClearAll                    a distribution (Get: a `Distribution`)

A metric with ``fields=[("stage", str), ...]`` keeps one value per tuple of
labels, passed positionally: ``counter.Increment("decode")``.

The library records its own metrics here (``record_bytes_read_and_latency``
and the other ``record_*`` functions), and `pipeline_stats()` returns the
per-stage statistics of every live pipeline iterator that records them: those
with ``ExecutionTrackingMode.STAGE_TIMING`` or passed to ``track_stats``, or all
of them under ``grain.config.update("py_debug_mode", True)``.

Example::

    grain.config.update("py_debug_mode", True)
    it = iter(ds)
    ...
    for stats in grain.monitoring.pipeline_stats():
        print(stats)                      # the table of it.stats()
    grain.monitoring.snapshot()           # {"/grain/...": {labels: value}}
"""

from __future__ import annotations

import dataclasses
import enum
import math
import threading
from collections.abc import Sequence
from typing import Any

from grain_dataset._core._stats import PipelineStats, collect, tracked_iterators


class Units(enum.Enum):
    """The unit a metric's values are in (`Metadata.units`)."""

    SECONDS = 1
    MILLISECONDS = 2
    MICROSECONDS = 3
    NANOSECONDS = 4
    BITS = 5
    BYTES = 6


class Metadata:
    """What a metric means: a description, optionally its `Units` and other keywords."""

    def __init__(self, description: str = "", **kwargs: Any):
        if not isinstance(description, str):
            raise TypeError(f"`description` must be a str, got {description!r}.")
        units = kwargs.get("units")
        if units is not None and not isinstance(units, Units):
            raise TypeError(f"`units` must be a grain.monitoring.Units, got {units!r}.")
        self.description = description
        self.units: Units | None = units
        self.extra = {key: value for key, value in kwargs.items() if key != "units"}

    def __repr__(self) -> str:
        return f"Metadata(description={self.description!r}, units={self.units})"


class Bucketer:
    """The bucket upper bounds of an `EventMetric`'s distribution."""

    def __init__(self, bounds: Sequence[float] = ()):
        bounds = [float(bound) for bound in bounds]
        if any(b >= a for a, b in zip(bounds[1:], bounds, strict=False)):
            raise ValueError(f"bucket bounds must increase strictly, got {bounds}.")
        self.bounds: tuple[float, ...] = tuple(bounds)

    @classmethod
    def PowersOf(cls, base: float, count: int = 64) -> Bucketer:  # noqa: N802 - Grain's name
        """Buckets bounded by base**0, base**1, ... (`count` of them), base > 1."""
        if isinstance(base, bool) or not isinstance(base, int | float) or not base > 1:
            raise ValueError(f"`base` must be a number > 1, got {base!r}.")
        return cls([float(base) ** k for k in range(count)])

    def __repr__(self) -> str:
        return f"Bucketer({len(self.bounds)} buckets)"


@dataclasses.dataclass
class Distribution:
    """What an `EventMetric` recorded for one set of labels."""

    count: int = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    bucket_counts: list[int] = dataclasses.field(default_factory=list)

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0


_REGISTRY: dict[str, _Metric] = {}
_REGISTRY_LOCK = threading.Lock()


class _Metric:
    kind = "metric"

    def __init__(
        self,
        name: str,
        metadata: Metadata | None = None,
        *,
        root: Any = None,
        fields: Sequence[tuple[str, type]] = (),
        **kwargs: Any,
    ):
        del root, kwargs  # Grain's: where to register with its metric server (none here)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a metric needs a non-empty str name, got {name!r}.")
        if metadata is not None and not isinstance(metadata, Metadata):
            raise TypeError(f"`metadata` must be a grain.monitoring.Metadata, got {metadata!r}.")
        self.name = name
        self.metadata = metadata or Metadata()
        self.fields = tuple((str(field[0]), field[1]) for field in fields)
        self._values: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        with _REGISTRY_LOCK:
            old = _REGISTRY.get(name)
            if old is not None and old.kind != self.kind:
                raise ValueError(
                    f"a {old.kind} named {name!r} exists already: choose another name."
                )
            _REGISTRY[name] = self  # the same kind and name: the newer one is reported

    def _labels(self, labels: tuple[Any, ...]) -> tuple[Any, ...]:
        if labels and len(labels) != len(self.fields):
            names = [field[0] for field in self.fields]
            raise ValueError(
                f"metric {self.name!r} has fields {names}: pass one label for each, "
                f"got {len(labels)}."
            )
        return labels

    def ClearAll(self) -> None:  # noqa: N802 - Grain's name
        """Forgets every value."""
        with self._lock:
            self._values.clear()

    def _snapshot(self) -> dict[str, Any]:
        with self._lock:
            items = list(self._values.items())
        return {
            ",".join(map(str, labels)): (
                dataclasses.asdict(value) if isinstance(value, Distribution) else value
            )
            for labels, value in items
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Counter(_Metric):
    """A count that only grows, per labels."""

    kind = "counter"

    def Increment(self, *labels: Any) -> None:  # noqa: N802 - Grain's name
        self.IncrementBy(1, *labels)

    def IncrementBy(self, value: float, *labels: Any) -> None:  # noqa: N802 - Grain's name
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"a counter grows by a number >= 0, got {value!r}.")
        key = self._labels(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0) + value

    def Get(self, *labels: Any) -> float:  # noqa: N802 - Grain's name
        with self._lock:
            return self._values.get(self._labels(labels), 0)


class Metric(_Metric):
    """A gauge: the last value `Set`, per labels."""

    kind = "gauge"

    def __init__(
        self,
        name: str,
        value_type: type = float,
        metadata: Metadata | None = None,
        *args: Any,
        **kwargs: Any,
    ):
        super().__init__(name, metadata, *args, **kwargs)
        self.value_type = value_type

    def Set(self, value: Any, *labels: Any) -> None:  # noqa: N802 - Grain's name
        key = self._labels(labels)
        with self._lock:
            self._values[key] = value

    def Get(self, *labels: Any) -> Any:  # noqa: N802 - Grain's name
        with self._lock:
            return self._values.get(self._labels(labels), self.value_type())


class EventMetric(_Metric):
    """A distribution of recorded values (count, sum, min, max, buckets), per labels."""

    kind = "distribution"

    def __init__(
        self,
        name: str,
        metadata: Metadata | None = None,
        *args: Any,
        bucketer: Bucketer | None = None,
        **kwargs: Any,
    ):
        super().__init__(name, metadata, *args, **kwargs)
        self.bucketer = bucketer or Bucketer.PowersOf(2.0)

    def Record(self, value: float, *labels: Any) -> None:  # noqa: N802 - Grain's name
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"an event metric records numbers, got {value!r}.")
        key = self._labels(labels)
        bounds = self.bucketer.bounds
        with self._lock:
            dist = self._values.get(key)
            if dist is None:
                dist = self._values[key] = Distribution(bucket_counts=[0] * (len(bounds) + 1))
            dist.count += 1
            dist.sum += value
            dist.min = min(dist.min, value)
            dist.max = max(dist.max, value)
            dist.bucket_counts[sum(1 for bound in bounds if value > bound)] += 1

    def Get(self, *labels: Any) -> Distribution:  # noqa: N802 - Grain's name
        with self._lock:
            dist = self._values.get(self._labels(labels))
            return dataclasses.replace(dist) if dist is not None else Distribution()


def get_monitoring_root() -> None:
    """Grain's metric-server root; there is no server here, so None."""
    return None


def setup_telemetry() -> None:
    """Grain starts a Prometheus server here when asked; metrics stay in-process here
    (read them with `snapshot()`), so this does nothing."""


def set_debug_server_ports(ports: list[int]) -> None:
    """Accepted for Grain's sake (its debug servers); checked, then unused."""
    if not isinstance(ports, list | tuple) or not all(
        isinstance(port, int) and not isinstance(port, bool) and 0 <= port < 65536 for port in ports
    ):
        raise ValueError(f"`ports` must be a list of port numbers, got {ports!r}.")


_BYTES_READ = Counter(
    "/grain/python/source/bytes_read",
    Metadata(description="bytes read by a source", units=Units.BYTES),
    fields=[("source", str)],
)
_READS = Counter(
    "/grain/python/source/reads",
    Metadata(description="reads by a source"),
    fields=[("source", str)],
)
_READ_LATENCY = EventMetric(
    "/grain/python/source/read_latency_ns",
    Metadata(description="latency of one read call", units=Units.NANOSECONDS),
    fields=[("source", str)],
)
_FRAMEWORK = Counter(
    "/grain/python/framework_type",
    Metadata(description="pipelines by framework"),
    fields=[("framework", str)],
)
_AUTOTUNE = Metric(
    "/grain/python/autotune/value",
    float,
    Metadata(description="autotuning values by node and name"),
    fields=[("node", str), ("name", str)],
)


def record_bytes_read_and_latency(
    source: str, *, num_bytes: int, latency_ns: int, num_reads: int
) -> None:
    """Records that `source` read `num_bytes` in `num_reads` calls taking `latency_ns`."""
    _BYTES_READ.IncrementBy(num_bytes, source)
    _READS.IncrementBy(num_reads, source)
    _READ_LATENCY.Record(latency_ns / max(1, num_reads), source)


def record_framework_type(framework_type: str) -> None:
    """Counts one pipeline built with `framework_type` (e.g. "Dataset")."""
    _FRAMEWORK.Increment(framework_type)


def record_autotune_node_throughput(node_name: str, throughput: float) -> None:
    """Sets the measured throughput of an autotuned stage."""
    _AUTOTUNE.Set(throughput, node_name, "throughput")


def record_autotune_optimization_latency(latency_ms: float) -> None:
    """Sets how long the last autotuning took."""
    _AUTOTUNE.Set(latency_ms, "optimizer", "latency_ms")


def record_autotune_parameter(node_name: str, name: str, value: float) -> None:
    """Sets the value autotuning chose for a stage's parameter."""
    _AUTOTUNE.Set(value, node_name, name)


def record_autotune_usl_coeff(node_name: str, name: str, value: float) -> None:
    """Sets a coefficient of the scalability model fitted for a stage."""
    _AUTOTUNE.Set(value, node_name, f"usl_{name}")


def pipeline_stats() -> list[PipelineStats]:
    """The statistics of every live, recording pipeline iterator that no other iterator reads.

    Each is what its ``it.stats()`` returns (`str()` is the table).
    """
    from grain_dataset._runtime._guard import is_outermost

    return [collect(it) for it in tracked_iterators() if is_outermost(it)]


def snapshot() -> dict[str, dict[str, Any]]:
    """Every metric's values: ``{name: {"label1,label2": value}}`` (JSON-serializable)."""
    with _REGISTRY_LOCK:
        metrics = list(_REGISTRY.values())
    return {metric.name: metric._snapshot() for metric in metrics}
