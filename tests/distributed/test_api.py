"""What RedisGate lacks compared with BoundedGate, as the README lists it: refused at once, never ignored."""

from __future__ import annotations

import inspect

import pytest

from boundedgate import BoundedGate, Permit, admit_all
from boundedgate.redis import RedisGate, RedisPermit


def _gate() -> RedisGate:
    return RedisGate(None, max_running=1, max_waiting=1, name="api")  # no call is made: no client needed


def _public(cls: type) -> set[str]:
    # (Less mutmut's trampolines, under mutation testing.)
    return {name for name in dir(cls) if not name.startswith("_") and "mutmut" not in name}


def _arguments(function: object) -> set[str]:
    return set(inspect.signature(function).parameters) - {"self"}  # type: ignore[arg-type]


@pytest.mark.parametrize("setting", [{"priorities": 2}, {"jump_share": 0.5}, {"rate_limits": ()}])
def test_priorities_and_rate_limits_cannot_be_configured(setting: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=next(iter(setting))):
        RedisGate(None, max_running=1, max_waiting=1, **setting)  # type: ignore[arg-type]


def test_running_must_be_limited() -> None:
    with pytest.raises(TypeError, match="max_running"):
        RedisGate(None, max_running=None, max_waiting=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["admit", "stream"])
@pytest.mark.parametrize("argument", [{"priority": 0}, {"priority": 1}, {"cost": 10}])
def test_priority_and_cost_are_refused_not_ignored(method: str, argument: dict[str, object]) -> None:
    call = getattr(_gate(), method)
    with pytest.raises(TypeError, match=next(iter(argument))):
        if method == "stream":
            call(lambda: None, **argument)
        else:
            call(**argument)


async def test_try_admit_takes_no_cost() -> None:
    with pytest.raises(TypeError, match="cost"):
        await _gate().try_admit(cost=10)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", ["priorities", "rate_limits"])
def test_the_properties_of_priorities_and_rate_limits_are_absent(name: str) -> None:
    with pytest.raises(AttributeError):
        getattr(_gate(), name)


def test_admit_all_refuses_a_redis_gate() -> None:
    with pytest.raises(TypeError, match="admit_all"):
        admit_all(_gate())  # type: ignore[arg-type]


def test_the_differences_are_exactly_those_the_readme_lists() -> None:
    # Public names of BoundedGate that RedisGate lacks, and the other way round (seq: the core's order).
    # (The adaptive edge, docs/adaptive.md: a cluster gate's controller is given at construction,
    # and it has no rate limits to bring in line with the provider's.)
    adaptive = {"adapt", "sync_rate_limits"}
    assert (
        _public(BoundedGate) - _public(RedisGate)
        == {"priorities", "rate_limits", "observe", "unobserve"} | adaptive
    )
    assert _public(RedisGate) - _public(BoundedGate) == {
        "aclose",
        "client",
        "cluster_running",
        "cluster_stats",
        "cluster_waiting",
        "process",
    }
    assert _arguments(BoundedGate.__init__) - _arguments(RedisGate.__init__) == {
        "priorities",
        "jump_share",
        "rate_limits",
        "feasible",
    }
    assert _arguments(BoundedGate.admit) - _arguments(RedisGate.admit) == {"priority", "cost"}
    assert _arguments(BoundedGate.try_admit) - _arguments(RedisGate.try_admit) == {"cost"}
    assert _arguments(BoundedGate.stream) - _arguments(RedisGate.stream) == {"priority", "cost"}
    assert _public(Permit) - _public(RedisPermit) == {"cost", "priority", "seq"}
    assert inspect.iscoroutinefunction(RedisGate.try_admit)
    assert inspect.iscoroutinefunction(RedisGate.set_limits)  # it writes the cluster's limits
    assert inspect.iscoroutinefunction(RedisGate.signal)  # so do these: the pause, the cuts
    assert inspect.iscoroutinefunction(RedisGate.pause)
    assert not inspect.iscoroutinefunction(BoundedGate.set_limits)
    assert not inspect.iscoroutinefunction(BoundedGate.try_admit)
