"""The public surface: exported once, documented, typed, final where it should be."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import boundedgate

#: Every public module and its ``__all__``: what users may import, decided here. A name added to or
#: removed from a module, or a public module added, fails here until this list says so (and the
#: CHANGELOG says where a name went).
PUBLIC: dict[str, list[str]] = {
    "boundedgate": [
        # the gates, their permits and what admit_all() and a stream return
        "BoundedGate",
        "KeyedGate",
        "Permit",
        "CombinedPermit",
        "admit_all",
        "GatedStream",
        "StreamOpener",
        # their settings
        "Adaptive",
        "AdaptiveLimit",
        "GateLimits",
        "RateLimit",
        # what they report
        "GateStatistics",
        "KeyedStatistics",
        "RequestRecord",
        "Status",
        "Outcome",
        "OUTCOMES",
        "SIGNALS",
        # the refusals
        "GateError",
        "QueueFull",
        "RateLimited",
        "Infeasible",
        "QueueExpired",
        "Evicted",
        "Late",
        "DeadlineCut",
        "GateUnavailable",
    ],
    "boundedgate.sim": [
        # the runs
        "simulate",
        "sweep",
        "simulate_provider",
        "compare_admission",
        # their input: scripts, workloads, a provider
        "Job",
        "read_script",
        "parse_script",
        "write_script",
        "ScriptError",
        "Recorder",
        "generate",
        "Poisson",
        "Bursts",
        "Fixed",
        "Exponential",
        "LogNormal",
        "Client",
        "Provider",
        "Request",
        "steps",
        "drift",
        # what they return
        "Simulation",
        "RequestResult",
        "TraceEvent",
        "Summary",
        "ClassSummary",
        "KeySummary",
        "Percentiles",
        "SweepRow",
        "ClientResult",
        "Comparison",
        "Contender",
    ],
    "boundedgate.asgi": [
        "GateMiddleware",
        "UNGATED",
        "limits_app",
        "limits_document",
        "gate_dependency",
        "GatedStreamingResponse",
        "refusal_handler",
        "provider_error_handler",
        "refusal_for",
        "provider_refusal",
        "Refusal",
        "RefusalStyle",
    ],
    "boundedgate.httpx": [
        "GatedTransport",
        "refusal",
        "Exchange",
        "gate_call",
        "Call",
        "current_call",
        "follow_provider",
        "ProviderSignal",
        "Quota",
        "parse_signal",
        "parse_quotas",
        "parse_retry_after",
        "total_tokens",
    ],
    "boundedgate.aiohttp": ["gate_middleware"],
    "boundedgate.redis": [
        "RedisGate",
        "RedisKeyedGate",
        "RedisPermit",
        "RedisGateStatistics",
        "ClusterStatistics",
        "ClusterHolder",
        "ClusterWaiter",
        "read_cluster",
        "format_cluster",
    ],
    "boundedgate.otel": ["instrument", "Instrumentation", "SPAN_EVENT", "downstream_refused"],
    "boundedgate.prometheus": ["GateCollector", "downstream_refused"],
    "boundedgate.dashboards": ["GRAFANA", "ALERTS"],
}


def _public_modules() -> set[str]:
    """Every module of the package whose dotted name has no part with a leading underscore."""
    found = {"boundedgate"}
    for info in pkgutil.walk_packages(boundedgate.__path__, "boundedgate."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.add(info.name)
    return found


def test_the_public_modules_and_their_names_are_the_decided_ones() -> None:
    assert _public_modules() == set(PUBLIC)
    for name, names in PUBLIC.items():
        module = importlib.import_module(name)
        assert isinstance(module.__all__, tuple), name
        assert len(set(module.__all__)) == len(module.__all__), name
        assert sorted(module.__all__) == sorted(names), name
        for public in names:
            assert getattr(module, public) is not None, f"{name}.{public}"


def test_all_is_a_tuple_of_the_public_names() -> None:
    # Public subpackages (boundedgate.sim, boundedgate.redis) appear as attributes once imported;
    # COMPILED is the build's information, as __version__ is, and not exported.
    public = {
        n for n in dir(boundedgate) if not n.startswith("_") and not inspect.ismodule(getattr(boundedgate, n))
    }
    assert public == {*boundedgate.__all__, "COMPILED"}
    assert isinstance(boundedgate.COMPILED, bool)


def test_both_exports_count_downstream_refusals_in_one_counter() -> None:
    import boundedgate.otel
    import boundedgate.prometheus

    assert boundedgate.otel.downstream_refused is boundedgate.prometheus.downstream_refused


def test_every_public_name_lives_in_boundedgate_and_has_a_docstring() -> None:
    for name in boundedgate.__all__:
        obj = getattr(boundedgate, name)
        if name == "OUTCOMES":  # a constant: every item is an Outcome, documented itself
            assert all(isinstance(item, boundedgate.Outcome) and item.description for item in obj)
            continue
        if name == "SIGNALS":  # a constant: every kind of signal, with what it does
            assert all(isinstance(kind, str) and meaning for kind, meaning in obj.items())
            continue
        assert obj.__module__ == "boundedgate", name
        assert inspect.getdoc(obj), name
        for attr, member in vars(obj).items():
            if attr.startswith("_") or "mutmut" in attr:  # mutmut's trampolines, under mutation testing
                continue
            if not (inspect.isfunction(member) or isinstance(member, property)):
                continue
            assert inspect.getdoc(member), f"{name}.{attr}"


#: What a permit shows its user: the request's terms, times and outcome, and what ends it. Its
#: place in the core's queue order is the core's own (no public ``seq``): a name added to or
#: removed from a permit fails here until this list says so (and the CHANGELOG says where it went).
PERMIT: list[str] = [
    "abort",
    "arrival",
    "cost",
    "deadline",
    "disconnect",
    "ended",
    "gate",
    "hand_to",
    "max_wait",
    "priority",
    "release",
    "settle",
    "started",
    "status",
]


def test_a_permit_shows_the_decided_names() -> None:
    permit = boundedgate.BoundedGate(max_running=1, max_waiting=0).admit()
    assert sorted(name for name in dir(permit) if not name.startswith("_")) == PERMIT
    assert not hasattr(permit, "seq")


def test_gate_and_permit_are_final_and_slotted() -> None:
    for cls in (
        boundedgate.BoundedGate,
        boundedgate.Permit,
        boundedgate.GatedStream,
        boundedgate.StreamOpener,
    ):
        assert getattr(cls, "__final__", False)
        if cls is boundedgate.Permit:  # compiled, a native class: no __slots__ to list, no __dict__ either
            assert "__slots__" in vars(cls) or boundedgate.COMPILED
            assert not hasattr(boundedgate.BoundedGate(max_running=1, max_waiting=0).admit(), "__dict__")
            continue
        assert "__slots__" in vars(cls)
        assert not hasattr(cls.__new__(cls), "__dict__")


def test_errors_hierarchy() -> None:
    for cls in (
        boundedgate.QueueFull,
        boundedgate.RateLimited,
        boundedgate.QueueExpired,
        boundedgate.Evicted,
        boundedgate.Late,
        boundedgate.DeadlineCut,
    ):
        assert issubclass(cls, boundedgate.GateError)
    assert issubclass(boundedgate.QueueExpired, TimeoutError)
    assert issubclass(boundedgate.Late, TimeoutError)
    assert issubclass(boundedgate.DeadlineCut, TimeoutError)
    assert not issubclass(boundedgate.QueueFull, TimeoutError)
    assert issubclass(boundedgate.GateUnavailable, boundedgate.GateError)
    assert not issubclass(boundedgate.GateUnavailable, TimeoutError)


def test_version() -> None:
    assert boundedgate.__version__.count(".") == 2
