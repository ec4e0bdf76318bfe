"""The public surface: exported once, documented, typed, final where it should be."""

from __future__ import annotations

import inspect

import boundedgate


def test_all_is_a_tuple_of_the_public_names() -> None:
    assert isinstance(boundedgate.__all__, tuple)
    assert set(boundedgate.__all__) == {
        "Adaptive",
        "AdaptiveLimit",
        "BoundedGate",
        "COMPILED",
        "CombinedPermit",
        "Evicted",
        "GateError",
        "GateLimits",
        "GateStatistics",
        "GateUnavailable",
        "GatedStream",
        "Infeasible",
        "KeyedGate",
        "KeyedStatistics",
        "Late",
        "OUTCOMES",
        "Outcome",
        "Permit",
        "SIGNALS",
        "QueueExpired",
        "QueueFull",
        "RateLimit",
        "RateLimited",
        "RequestRecord",
        "Status",
        "StreamOpener",
        "admit_all",
        "downstream_refusals",
        "downstream_refused",
    }
    # Public subpackages (boundedgate.sim, boundedgate.redis) appear as attributes once imported.
    public = {
        n for n in dir(boundedgate) if not n.startswith("_") and not inspect.ismodule(getattr(boundedgate, n))
    }
    assert public == set(boundedgate.__all__)


def test_every_public_name_lives_in_boundedgate_and_has_a_docstring() -> None:
    for name in boundedgate.__all__:
        obj = getattr(boundedgate, name)
        if name == "COMPILED":  # a constant: whether the compiled build runs (README, "Performance")
            assert isinstance(obj, bool)
            continue
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
    ):
        assert issubclass(cls, boundedgate.GateError)
    assert issubclass(boundedgate.QueueExpired, TimeoutError)
    assert issubclass(boundedgate.Late, TimeoutError)
    assert not issubclass(boundedgate.QueueFull, TimeoutError)
    assert issubclass(boundedgate.GateUnavailable, boundedgate.GateError)
    assert not issubclass(boundedgate.GateUnavailable, TimeoutError)


def test_version() -> None:
    assert boundedgate.__version__.count(".") == 2
