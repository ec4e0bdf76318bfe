"""Prometheus: the golden exposition after a scripted run, bounded cardinality, weak references,
and a scrape over a real HTTP server on loopback."""

from __future__ import annotations

import gc
import re
import urllib.request
import weakref
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from boundedgate import OUTCOMES, BoundedGate, KeyedGate, RateLimit
from boundedgate.prometheus import GateCollector, downstream_refused
from tests.observe.scripted import run_script, script_gate

LE = ["0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56", "5.12", "10.24", "20.48",
      "40.96", "81.92", "+Inf"]  # fmt: skip

#: Prometheus name: (type, label names of its samples but le)
GOLDEN = {
    "boundedgate_request_active": ("gauge", {"gate"}),
    "boundedgate_request_queued": ("gauge", {"gate"}),
    "boundedgate_limit_running": ("gauge", {"gate"}),
    "boundedgate_limit_waiting": ("gauge", {"gate"}),
    "boundedgate_requests": ("counter", {"gate", "outcome"}),
    "boundedgate_queue_timeout_seconds": ("gauge", {"gate"}),
    "boundedgate_request_time_in_queue_seconds": ("histogram", {"gate", "outcome"}),
    "boundedgate_request_lease_duration_seconds": ("histogram", {"gate", "outcome"}),
    "boundedgate_request_duration_seconds": ("histogram", {"gate", "outcome"}),
}


def _families(registry: CollectorRegistry) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


async def test_a_scripted_run_gives_the_golden_exposition() -> None:
    gate = script_gate()
    registry = CollectorRegistry()
    registry.register(GateCollector(gate, queue_timeouts={"scripted": 2.0}))
    await run_script(gate)
    text = generate_latest(registry).decode()
    assert "# TYPE boundedgate_requests_total counter" in text
    assert "# TYPE boundedgate_request_time_in_queue_seconds histogram" in text
    families = _families(registry)
    for name, (kind, labels) in GOLDEN.items():
        family = families[name]
        assert family.type == kind, name
        assert family.documentation, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, name
            assert sample.labels["gate"] == "scripted"
        if kind == "histogram":
            buckets = [s for s in family.samples if s.name.endswith("_bucket")]
            by_series: dict[str, list[str]] = {}
            for sample in buckets:
                by_series.setdefault(sample.labels["outcome"], []).append(sample.labels["le"])
            assert all(les == LE for les in by_series.values()), name
    stats = gate.stats()
    requests = {s.labels["outcome"]: s.value for s in families["boundedgate_requests"].samples
                if s.name == "boundedgate_requests_total"}  # fmt: skip
    assert requests == {o.name: getattr(stats, o.name) for o in OUTCOMES}
    counts = {s.labels["outcome"]: s.value for s in families["boundedgate_request_duration_seconds"].samples
              if s.name.endswith("_count")}  # fmt: skip
    assert counts == {name: value for name, value in requests.items() if value}


def test_downstream_refusals_are_a_counter_by_status() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="prom-downstream")
    registry = CollectorRegistry()
    registry.register(GateCollector(gate))
    downstream_refused("prom-downstream")
    downstream_refused("prom-downstream")
    samples = _families(registry)["boundedgate_downstream_refusals"].samples
    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("boundedgate_downstream_refusals_total", {"gate": "prom-downstream", "status": "429"}, 2.0)
    ]


async def test_ten_thousand_keys_leave_the_number_of_series_constant() -> None:
    sessions: KeyedGate[int] = KeyedGate(
        max_running=1, max_waiting=0, name="sessions", rate_limits=[RateLimit.per_second(100, name="rps")]
    )
    registry = CollectorRegistry()
    registry.register(GateCollector(sessions))

    def series() -> int:
        return sum(len(f.samples) for f in _families(registry).values())

    async with sessions.admit(0):
        pass
    few = series()
    for key in range(1, 10_000):
        async with sessions.admit(key):
            pass
    assert series() == few
    assert "key=" not in generate_latest(registry).decode()


async def test_the_collector_holds_the_gates_weakly() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="dropped")
    registry = CollectorRegistry()
    registry.register(GateCollector(gate))
    async with gate.admit():
        pass
    assert 'gate="dropped"' in generate_latest(registry).decode()
    ref = weakref.ref(gate)
    del gate
    gc.collect()
    assert ref() is None
    assert 'gate="dropped"' not in generate_latest(registry).decode()


def test_a_scrape_over_http_gives_the_same_text() -> None:
    gate = BoundedGate(max_running=3, max_waiting=7, name="served")
    registry = CollectorRegistry()
    registry.register(GateCollector(gate))
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
    assert body == generate_latest(registry).decode()
    assert 'boundedgate_limit_waiting{gate="served"} 7.0' in body


async def test_the_recipe_serves_the_registry_to_scrapes_past_the_gate() -> None:
    httpx2 = pytest.importorskip("httpx2")
    pytest.importorskip("fastapi")
    page = (Path(__file__).resolve().parents[2] / "docs" / "recipes" / "prometheus.md").read_text()
    (recipe,) = [b for b in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL) if "FastAPI()" in b]
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(recipe, "prometheus.md", "exec"), namespace)
    gate = namespace["gate"]
    held = gate.try_admit()  # the only thing a scrape could wait for, were it gated
    try:
        transport = httpx2.ASGITransport(app=namespace["app"])
        async with httpx2.AsyncClient(transport=transport, base_url="http://service") as client:
            response = await client.get("/metrics")
        now = generate_latest(namespace["registry"]).decode()
    finally:
        held.release()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == now
    assert 'boundedgate_request_active{gate="openai"} 1.0' in response.text
    assert gate.stats().admitted == 1  # the scrape was not


async def test_a_gates_rate_limits_show_their_balances() -> None:
    gate = BoundedGate(
        max_running=None,
        max_waiting=0,
        name="rated",
        rate_limits=[RateLimit.per_second(10, burst=10, name="rps")],
    )
    registry = CollectorRegistry()
    registry.register(GateCollector(gate))
    for _ in range(4):
        gate.try_admit().release()
    (sample,) = _families(registry)["boundedgate_rate_limit_tokens"].samples
    assert sample.labels == {"gate": "rated", "limit": "rps"}
    assert sample.value == pytest.approx(6.0)
    assert _families(registry)["boundedgate_limit_running"].samples == []
