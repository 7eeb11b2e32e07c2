"""Prometheus metrics: a real prometheus_client endpoint, scraped over HTTP and parsed (issue 28)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import numpy as np
import pytest

import tpufeed
from tpufeed.observe import counts
from tpufeed.run.metrics import COUNTED

prometheus_client = pytest.importorskip("prometheus_client", reason="pip install tpufeed[metrics]")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


@pytest.fixture
def server():
    server = tpufeed.serve_metrics(port=0)  # a free port
    yield server
    server.close()


def scrape(url: str) -> dict[str, float]:
    """Every sample of one scrape: name{labels} -> value."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])
def test_the_records_counter_is_the_records_delivered(server, workers):
    before = scrape(server.url)
    ds = (
        tpufeed.Dataset.from_sequence(list(range(1000)))
        .map(lambda i: {"x": np.full(4, i)})
        .batch(64)
        .workers(workers)
    )
    it = ds.iterator()
    first = [next(it) for _ in range(5)]
    during = scrape(server.url)  # a live iterator is read at scrape time
    assert during["tpufeed_records_total"] - before["tpufeed_records_total"] == 5 * 64
    assert during["tpufeed_batches_total"] - before["tpufeed_batches_total"] == 5
    assert during["tpufeed_iterators"] >= 1
    rest = list(it)
    after = scrape(server.url)  # a finished one is still counted
    delivered = sum(len(b["x"]) for b in first + rest)
    assert delivered == 1000
    assert after["tpufeed_records_total"] - before["tpufeed_records_total"] == delivered
    assert after["tpufeed_batches_total"] - before["tpufeed_batches_total"] == len(first + rest)
    waits = after["tpufeed_next_wait_seconds_count"] - before["tpufeed_next_wait_seconds_count"]
    assert waits == it.stats().batches == sum(it.stats().wait_histogram)
    assert (
        after["tpufeed_next_wait_seconds_bucket{le=+Inf}"]
        == after["tpufeed_next_wait_seconds_count"]
    )
    started = after["tpufeed_workers_started_total"] - before["tpufeed_workers_started_total"]
    assert started == workers


def test_every_count_is_exported_with_the_process_total(server):
    samples = scrape(server.url)
    now = counts.snapshot()
    assert set(COUNTED) == set(counts.NAMES)
    for key, (name, _) in COUNTED.items():
        assert samples[f"{name}_total"] >= now[key]  # counts only grow between the two reads


def test_skipped_records_are_counted(server):
    def fragile(x):
        if x % 10 == 3:
            raise ValueError(f"bad {x}")
        return x

    before = scrape(server.url)["tpufeed_records_skipped_total"]
    got = list(tpufeed.Dataset.from_sequence(list(range(50))).map(fragile).ignore_errors(10))
    assert len(got) == 45
    assert scrape(server.url)["tpufeed_records_skipped_total"] - before == 5


def test_the_shard_cache_reports_its_disk_and_limit(server, tmp_path):
    from tpufeed.storage.cache.shard_cache import ShardCache

    cache = ShardCache(tmp_path / "cache", 1 << 20)
    samples = scrape(server.url)
    assert samples[f"tpufeed_cache_limit_bytes{{directory={cache.root}}}"] == 1 << 20
    assert samples[f"tpufeed_cache_used_bytes{{directory={cache.root}}}"] == cache.usage() == 0


def test_register_metrics_adds_them_to_a_registry_of_ones_own():
    registry = prometheus_client.CollectorRegistry()
    collector = tpufeed.register_metrics(registry)
    text = prometheus_client.generate_latest(registry).decode()
    assert "tpufeed_records_total" in text and "tpufeed_next_wait_seconds_bucket" in text
    with pytest.raises(tpufeed.InvalidArgumentError, match="already"):
        tpufeed.register_metrics(registry)
    registry.unregister(collector)
    assert "tpufeed_" not in prometheus_client.generate_latest(registry).decode()


@pytest.mark.parametrize("port", [-1, 70000, "9431", True])
def test_a_bad_port_is_named(port):
    with pytest.raises(tpufeed.InvalidArgumentError, match="port"):
        tpufeed.serve_metrics(port)


def test_a_port_in_use_is_named(server):
    with pytest.raises(tpufeed.InvalidArgumentError, match=str(server.port)):
        tpufeed.serve_metrics(server.port)


def test_importing_tpufeed_pulls_in_no_storage_client():
    """The metrics' exports are at the top of the package: reading the caches' gauges must not
    make every `import tpufeed` import the GCS client's http, ssl and email modules."""
    code = "import sys, tpufeed; print(sorted({'http.client', 'ssl', 'tpufeed.storage.cache.shard_cache'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
