"""Live metrics for Prometheus: what this process's pipelines delivered, read at scrape time.

`serve_metrics(port)` starts an HTTP endpoint (prometheus_client's) that a Prometheus server
scrapes; `register_metrics(registry)` adds the same metrics to a registry of your own (one
your framework already serves). Nothing is recorded for them on the hot path: a scrape reads
the figures every run keeps anyway (`tpufeed.run.live`), the process's counts
(`tpufeed.observe.counts`, workers' included) and the shard caches' disk use.

Needs the `metrics` extra: `pip install tpufeed[metrics]`.

>>> server = tpufeed.serve_metrics(9431)  # doctest: +SKIP
>>> # curl http://127.0.0.1:9431/metrics  ->  tpufeed_records_total 51200.0 ...
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import InvalidArgumentError, missing_dependency
from tpufeed.observe import counts
from tpufeed.run import live
from tpufeed.run.hosts import pod
from tpufeed.run.stats import WAIT_BUCKETS

__all__ = ["MetricsServer", "PipelineCollector", "register_metrics", "serve_metrics"]

DEFAULT_PORT = 9431

# Every name of `observe.counts`: (metric name, without the `_total` Prometheus adds; help).
COUNTED = {
    "bytes_read": ("tpufeed_read_bytes", "Bytes of records read from shard files"),
    "cache_hits": ("tpufeed_cache_hits", "Opens of gs:// shards served from the shard cache"),
    "cache_misses": ("tpufeed_cache_misses", "Opens of gs:// shards that waited for a fetch"),
    "cache_evictions": ("tpufeed_cache_evictions", "Shards evicted to stay within the limit"),
    "cache_bytes": ("tpufeed_cache_fetched_bytes", "Bytes fetched into the shard cache"),
    "gcs_requests": ("tpufeed_gcs_requests", "GCS requests sent, retries included"),
    "gcs_retries": ("tpufeed_gcs_retries", "GCS requests retried after a transient failure"),
    "gcs_bytes": ("tpufeed_gcs_received_bytes", "Bytes of object data received from GCS"),
    "s3_requests": ("tpufeed_s3_requests", "S3 requests sent, retries included"),
    "s3_retries": ("tpufeed_s3_retries", "S3 requests retried after a transient failure"),
    "s3_bytes": ("tpufeed_s3_received_bytes", "Bytes of object data received from S3"),
    "http_requests": ("tpufeed_http_requests", "HTTP(S) and Hub requests sent, retries included"),
    "http_retries": ("tpufeed_http_retries", "HTTP(S) and Hub requests retried after a failure"),
    "http_bytes": ("tpufeed_http_received_bytes", "Bytes of file data received over HTTP(S)"),
    "workers_started": ("tpufeed_workers_started", "Worker processes started"),
    "workers_lost": ("tpufeed_workers_lost", "Workers found dead or stopped (the run ended)"),
    "agreements": ("tpufeed_host_agreements", "Steps agreed with the other hosts"),
}


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError as error:
        raise missing_dependency("prometheus_client", "metrics") from error
    return prometheus_client


class PipelineCollector:
    """A prometheus_client collector of every tpufeed pipeline in this process."""

    def describe(self) -> list[Any]:
        """The metrics, for a registry to check that their names are free."""
        return list(self.collect())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        figures, running = live.totals()
        delivered = (
            ("tpufeed_batches", "Items (batches) handed to the consumer", figures.batches),
            ("tpufeed_records", "Records in the items handed to the consumer", figures.records),
            ("tpufeed_records_skipped", "Records skipped by ignore_errors", figures.skipped),
        )
        for name, text, value in delivered:
            yield CounterMetricFamily(name, text, value=value)
        counted = counts.snapshot()
        for key, (name, text) in COUNTED.items():
            yield CounterMetricFamily(name, text, value=counted.get(key, 0))
        cumulative, buckets = 0, []
        for bound, n in zip(WAIT_BUCKETS, figures.wait_counts):
            cumulative += n
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", cumulative + figures.wait_counts[-1]))
        yield HistogramMetricFamily(
            "tpufeed_next_wait_seconds",
            "The consumer's wait for each next() of an iterator",
            buckets=buckets,
            sum_value=figures.wait_seconds,
        )
        gauges = (
            ("tpufeed_iterators", "Pipeline iterators running", running),
            ("tpufeed_prefetch_depth", "Items asked to be kept ready ahead", figures.prefetch),
            ("tpufeed_queue_depth", "Items or chunks in flight ahead now", figures.queue_depth),
            ("tpufeed_shared_memory_bytes", "Shared memory of workers' batches", figures.shm_bytes),
        )
        for name, text, value in gauges:
            yield GaugeMetricFamily(name, text, value=value)
        yield from self._cache_gauges(GaugeMetricFamily)
        yield from _pod_gauges(GaugeMetricFamily)

    @staticmethod
    def _cache_gauges(family: Any) -> Iterator[Any]:
        used = family(
            "tpufeed_cache_used_bytes", "Disk the shard cache takes", labels=["directory"]
        )
        limit = family(
            "tpufeed_cache_limit_bytes", "The shard cache's byte limit", labels=["directory"]
        )
        # Not imported: no cache is open. (Importing it would pull the GCS client's http, ssl
        # and email modules into every `import tpufeed`.)
        module = sys.modules.get("tpufeed.storage.cache.shard_cache")
        for root, cache in (module.opened_caches() if module is not None else {}).items():
            used.add_metric([root], cache.usage())
            limit.add_metric([root], cache.max_bytes)
        yield used
        yield limit


# The pod's figures, one series per host (process 0 of a run of several hosts): (metric name,
# help, the HostSummary field; None where not measured leaves the host out)
POD_GAUGES = (
    ("tpufeed_pod_records_per_second", "Records/s a host delivered", "records_per_s"),
    (
        "tpufeed_pod_input_wait_ratio",
        "Share of a host's step spent waiting for input",
        "wait_fraction",
    ),
    ("tpufeed_pod_cpu_busy_ratio", "Share of a host's cores that were busy", "cpu_busy"),
    ("tpufeed_pod_cpu_cores", "A host's cores", "cores"),
    ("tpufeed_pod_cache_hit_ratio", "A host's shard cache hits among opens", "cache_hit_rate"),
    ("tpufeed_pod_shared_memory_bytes", "Shared memory of a host's workers' batches", "shm_bytes"),
    ("tpufeed_pod_summary_age_seconds", "Age of a host's last summary", "age_s"),
)


def _pod_gauges(family: Any) -> Iterator[Any]:
    """Every host's latest summary, labelled by host, where this process judges the pod
    (tpufeed.run.hosts.pod: process 0 of several hosts); nothing elsewhere."""
    stats = pod.latest()
    if stats is None:
        return
    now = time.time()
    for name, text, field in POD_GAUGES:
        gauge = family(name, text, labels=["host"])
        for summary in stats.hosts:
            value = now - summary.taken_at if field == "age_s" else getattr(summary, field)
            if value is not None:
                gauge.add_metric([str(summary.host)], value)
        yield gauge
    bottleneck = family(
        "tpufeed_pod_bottleneck", "1 for each host's bottleneck stage", labels=["host", "stage"]
    )
    for summary in stats.hosts:
        if summary.bottleneck is not None:
            bottleneck.add_metric([str(summary.host), summary.bottleneck], 1)
    yield bottleneck


def register_metrics(registry: Any = None) -> PipelineCollector:
    """Adds tpufeed's metrics to a prometheus_client `registry` (default: its global
    `REGISTRY`, which `prometheus_client.start_http_server` serves); returns the collector
    (`registry.unregister(collector)` removes them)."""
    prometheus = _prometheus()
    registry = prometheus.REGISTRY if registry is None else registry
    collector = PipelineCollector()
    try:
        registry.register(collector)
    except ValueError as error:  # its names are taken: registered already
        raise InvalidArgumentError(
            f"tpufeed metrics are already in this registry ({error}); register them once"
        ) from None
    return collector


@dataclass
class MetricsServer:
    """The HTTP endpoint `serve_metrics` started: `url` is what Prometheus scrapes."""

    server: Any
    thread: Any
    addr: str

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self) -> None:
        """Stops serving (the port is free again)."""
        self.server.shutdown()
        self.server.server_close()


def serve_metrics(port: int = DEFAULT_PORT, addr: str = "127.0.0.1") -> MetricsServer:
    """Serves tpufeed's metrics at http://addr:port/metrics, from a daemon thread (`port=0`:
    any free port, see `.port`). `addr="0.0.0.0"` lets other machines scrape it."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise InvalidArgumentError(f"port must be an int in [0, 65535], got {port!r}")
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry(auto_describe=True)
    register_metrics(registry)
    try:
        server, thread = prometheus.start_http_server(port, addr, registry=registry)
    except OSError as error:
        raise InvalidArgumentError(
            f"cannot serve metrics on {addr}:{port}: {error} (port=0 picks a free one)"
        ) from None
    return MetricsServer(server, thread, addr)
