"""The ready board and alerts: seed 004's three alerts evaluated by promtool against series recorded
from a real run, the dashboard's queries valid PromQL over metrics the collector exports, and both
in step with the outcome registry.

promtool comes with Debian's ``prometheus`` package. Without it these tests skip on a developer's
machine and fail when ``CI=true``, as the Redis tests do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from boundedgate import BoundedGate, GateError
from boundedgate._export import REFUSALS
from boundedgate.dashboards import ALERTS, GRAFANA
from boundedgate.prometheus import GateCollector, downstream_refused
from tests.distributed.servers import in_ci

MINUTES = 30


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        why = "promtool is not installed (Debian: apt-get install prometheus)"
        if in_ci():
            pytest.fail(f"{why}; CI=true, so the alert tests must run, not skip", pytrace=False)
        pytest.skip(why)
    return found


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def _record() -> dict[str, list[float | None]]:
    """Half an hour of two gates (an overloaded one and a calm one), scraped every virtual minute."""
    hot = BoundedGate(max_running=1, max_waiting=1, name="hot")
    calm = BoundedGate(max_running=5, max_waiting=5, name="calm")
    registry = CollectorRegistry()
    registry.register(GateCollector(hot, calm, queue_timeouts={"hot": 15.0, "calm": 15.0}))
    series: dict[str, list[float | None]] = {}

    async def traffic(gate: BoundedGate, every: float, service: float) -> None:
        async def one() -> None:
            with contextlib.suppress(GateError):
                async with gate.admit(max_wait=15):
                    await asyncio.sleep(service)

        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(every)
        finally:
            for task in tasks:
                task.cancel()

    async def provider_refusing() -> None:
        while True:
            downstream_refused("hot")
            await asyncio.sleep(20)

    workers = [
        asyncio.create_task(traffic(hot, 2.0, 10.0)),
        asyncio.create_task(traffic(calm, 10.0, 1.0)),
        asyncio.create_task(provider_refusing()),
    ]
    for minute in range(MINUTES + 1):
        text = generate_latest(registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                values = series.setdefault(f"{sample.name}{{{labels}}}", [None] * minute)
                values.append(sample.value)
        for values in series.values():
            values.extend([None] * (minute + 1 - len(values)))
        await asyncio.sleep(60)
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return series


def _values(values: list[float | None]) -> str:
    return " ".join("_" if value is None else repr(value) for value in values)


async def test_the_three_alerts_fire_for_the_overloaded_gate_only(tmp_path: Path) -> None:
    promtool = _promtool()
    _run(promtool, "check", "rules", str(ALERTS))
    series = await _record()
    assert series['boundedgate_downstream_refusals_total{gate="hot",status="429"}'][-1] == 90
    alerts = ("BoundedGateRejectRateHigh", "BoundedGateQueueWaitNearTimeout", "BoundedGateDownstream429s")
    summaries = (
        "Gate hot refuses 80% of its requests",
        "Gate hot: p99 time in queue 10.19s is past half the queue timeout",
        "The service behind gate hot keeps answering 429",
    )
    descriptions = re.findall(r'description: "(.*)"', ALERTS.read_text())
    test = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": _values(v)} for name, v in series.items()],
                "alert_rule_test": [
                    # Five minutes in, every condition holds but none has lasted: nothing fires.
                    *({"eval_time": "5m", "alertname": name, "exp_alerts": []} for name in alerts),
                    *(
                        {
                            "eval_time": "25m",
                            "alertname": name,
                            "exp_alerts": [
                                {
                                    "exp_labels": {"gate": "hot", "severity": "warning"},
                                    "exp_annotations": {"summary": summary, "description": description},
                                }
                            ],
                        }
                        for name, summary, description in zip(alerts, summaries, descriptions, strict=True)
                    ),
                ],
            }
        ],
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(test))  # JSON is YAML
    try:
        _run(promtool, "test", "rules", str(path))
    except AssertionError as failed:
        # promtool prints the alerts it got against those expected: show them, not only the series.
        raise AssertionError(str(failed)[-4000:]) from None


def test_the_refusals_the_alert_counts_are_those_of_the_outcome_registry() -> None:
    wanted = "|".join(sorted(outcome.name for outcome in REFUSALS))
    for text in (ALERTS.read_text(), GRAFANA.read_text()):
        found = re.findall(r'outcome=~\\?"([a-z_|]+)\\?"', text)
        assert found, "no refusal selector"
        assert {"|".join(sorted(f.split("|"))) for f in found} == {wanted}


def _dashboard_queries() -> list[str]:
    board = json.loads(GRAFANA.read_text())
    queries = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    return [q.replace("$__rate_interval", "5m").replace("$gate", ".*") for q in queries]


def test_the_dashboard_shows_what_seed_004_asks_for() -> None:
    titles = [panel["title"] for panel in json.loads(GRAFANA.read_text())["panels"]]
    assert titles[:4] == ["Reject rate", "Mean waited_ms", "p99 queue depth", "Downstream 429s"]


async def test_every_dashboard_query_is_valid_promql_over_exported_metrics(tmp_path: Path) -> None:
    gate = BoundedGate(max_running=1, max_waiting=1, name="board")
    registry = CollectorRegistry()
    registry.register(GateCollector(gate, queue_timeouts={"board": 1.0}))
    async with gate.admit():
        pass
    # Every family the collector declares (# TYPE), with the sample names of its type.
    suffixes = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    declared = re.findall(r"^# TYPE (\S+) (\S+)$", generate_latest(registry).decode(), re.MULTILINE)
    exported = {name + suffix for name, kind in declared for suffix in suffixes[kind]}
    assert len(declared) == 13
    queries = _dashboard_queries()
    for query in queries:
        for name in re.findall(r"\bboundedgate_[a-z_]+", query):
            assert name in exported, (name, query)
    promtool = _promtool()
    rules = {
        "groups": [
            {"name": "board", "rules": [{"record": f"board:q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    path = tmp_path / "board_rules.yml"
    path.write_text(json.dumps(rules))
    _run(promtool, "check", "rules", str(path))
