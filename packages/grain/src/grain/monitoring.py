"""grain.monitoring: in-process metrics and the statistics of running pipelines.

Grain's metric classes, kept in this process (no metrics server): read them
with `snapshot()`; `pipeline_stats()` gives the per-stage statistics of live
pipelines (all of them under ``grain.config.update("py_debug_mode", True)``).
"""

from grain_dataset.monitoring import Bucketer as Bucketer
from grain_dataset.monitoring import Counter as Counter
from grain_dataset.monitoring import Distribution as Distribution
from grain_dataset.monitoring import EventMetric as EventMetric
from grain_dataset.monitoring import Metadata as Metadata
from grain_dataset.monitoring import Metric as Metric
from grain_dataset.monitoring import Units as Units
from grain_dataset.monitoring import get_monitoring_root as get_monitoring_root
from grain_dataset.monitoring import pipeline_stats as pipeline_stats
from grain_dataset.monitoring import (
    record_autotune_node_throughput as record_autotune_node_throughput,
)
from grain_dataset.monitoring import (
    record_autotune_optimization_latency as record_autotune_optimization_latency,
)
from grain_dataset.monitoring import record_autotune_parameter as record_autotune_parameter
from grain_dataset.monitoring import record_autotune_usl_coeff as record_autotune_usl_coeff
from grain_dataset.monitoring import record_bytes_read_and_latency as record_bytes_read_and_latency
from grain_dataset.monitoring import record_framework_type as record_framework_type
from grain_dataset.monitoring import set_debug_server_ports as set_debug_server_ports
from grain_dataset.monitoring import setup_telemetry as setup_telemetry
from grain_dataset.monitoring import snapshot as snapshot

__all__ = [
    "Bucketer",
    "Counter",
    "Distribution",
    "EventMetric",
    "Metadata",
    "Metric",
    "Units",
    "get_monitoring_root",
    "pipeline_stats",
    "record_autotune_node_throughput",
    "record_autotune_optimization_latency",
    "record_autotune_parameter",
    "record_autotune_usl_coeff",
    "record_bytes_read_and_latency",
    "record_framework_type",
    "set_debug_server_ports",
    "setup_telemetry",
    "snapshot",
]
