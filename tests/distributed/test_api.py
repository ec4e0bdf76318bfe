"""What RedisGate lacks compared with BoundedGate, as docs/cluster.md lists it: refused at once, never
ignored, with an error that names the feature, what to do instead, and where the docs say so."""

from __future__ import annotations

import inspect

import pytest

from boundedgate import BoundedGate, KeyedGate, Permit, RateLimit, admit_all
from boundedgate.redis import RedisGate, RedisPermit
from boundedgate.redis._lacking import LACKING


def _gate() -> RedisGate:
    return RedisGate(None, max_running=1, max_waiting=1, name="api")  # no call is made: no client needed


def _public(cls: type) -> set[str]:
    # (Less mutmut's trampolines, under mutation testing.)
    return {name for name in dir(cls) if not name.startswith("_") and "mutmut" not in name}


def _arguments(function: object) -> set[str]:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    return {name for name, p in parameters.items() if name != "self" and p.kind is not p.VAR_KEYWORD}


#: Where every refusal below sends its reader.
DOCS = 'docs/cluster.md, "What RedisGate does not have"'


@pytest.mark.parametrize("setting", [{"priorities": 2}, {"jump_share": 0.5}])
def test_priorities_cannot_be_configured(setting: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=next(iter(setting))):
        RedisGate(None, max_running=1, max_waiting=1, **setting)  # type: ignore[arg-type]


def test_running_must_be_limited_unless_rate_limits_limit_it() -> None:
    with pytest.raises(TypeError, match=r"max_running=None \(no limit on running\) needs rate_limits"):
        RedisGate(None, max_running=None, max_waiting=1)
    rated = RedisGate(None, max_running=None, max_waiting=1, rate_limits=[RateLimit.per_second(5)])
    assert rated.max_running is None
    assert rated.rate_limits == (RateLimit.per_second(5),)


def test_rate_limits_must_be_rate_limits() -> None:
    with pytest.raises(TypeError, match="rate_limits must hold RateLimit objects"):
        RedisGate(None, max_running=1, max_waiting=1, rate_limits=[5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="rate_limits must be a sequence"):
        RedisGate(None, max_running=1, max_waiting=1, rate_limits=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["admit", "stream"])
def test_a_cost_above_a_burst_is_refused_at_once(method: str) -> None:
    tpm = RateLimit.per_minute(1000, unit="tokens", name="tpm")
    gate = RedisGate(None, max_running=1, max_waiting=1, rate_limits=[tpm])
    call = getattr(gate, method)
    with pytest.raises(ValueError, match="cost 1001 exceeds the burst of rate limit 'tpm'"):
        if method == "stream":
            call(lambda: None, cost=1001)
        else:
            call(cost=1001)
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        call(cost=-1) if method == "admit" else call(lambda: None, cost=-1)
    assert gate.admit(cost=1000).cost == 1000
    assert _gate().admit(cost=10**9).cost == 10**9  # without rate limits, any cost is free


@pytest.mark.parametrize("method", ["admit", "stream"])
@pytest.mark.parametrize("argument", [{"priority": 0}, {"priority": 1}])
def test_priority_is_refused_not_ignored(method: str, argument: dict[str, object]) -> None:
    call = getattr(_gate(), method)
    with pytest.raises(TypeError, match=next(iter(argument))):
        if method == "stream":
            call(lambda: None, **argument)
        else:
            call(**argument)


@pytest.mark.parametrize("name", ["priorities"])
def test_the_attributes_it_lacks_are_absent_and_say_why(name: str) -> None:
    gate = _gate()
    with pytest.raises(AttributeError, match=f"RedisGate has no {name}") as refused:
        getattr(gate, name)
    assert DOCS in str(refused.value)
    assert (refused.value.name, refused.value.obj) == (name, gate)
    assert not hasattr(gate, name)  # absent for whoever asks before using it (follow_provider)


@pytest.mark.parametrize("name", ["priority"])
def test_the_permit_attributes_it_lacks_are_absent_and_say_why(name: str) -> None:
    permit = _gate().admit()
    with pytest.raises(AttributeError, match=f"^RedisPermit has no {name}: ") as refused:
        getattr(permit, name)
    assert DOCS in str(refused.value)
    assert (refused.value.name, refused.value.obj) == (name, permit)
    assert not hasattr(permit, name)


def test_an_attribute_nobody_has_is_refused_as_python_refuses_it() -> None:
    with pytest.raises(AttributeError, match=r"^'RedisGate' object has no attribute 'max_runing'$"):
        _gate().max_runing  # type: ignore[attr-defined]  # noqa: B018


WAYS_OUT = {
    "priorities": "one FIFO",
    "jump_share": "one FIFO",
    "by_deadline": "in arrival order",
}


@pytest.mark.parametrize(("argument", "way_out"), WAYS_OUT.items())
def test_a_setting_it_lacks_is_refused_with_the_way_out(argument: str, way_out: str) -> None:
    with pytest.raises(TypeError, match=rf"^RedisGate\(\) takes no {argument}=") as refused:
        RedisGate(None, max_running=1, max_waiting=1, **{argument: 1})  # type: ignore[arg-type]
    assert way_out in str(refused.value)
    assert DOCS in str(refused.value)


@pytest.mark.parametrize("method", ["admit", "try_admit", "stream"])
@pytest.mark.parametrize(("argument", "way_out"), [("priority", "one FIFO")])
async def test_an_argument_it_lacks_is_refused_with_the_way_out(
    method: str, argument: str, way_out: str
) -> None:
    gate = _gate()
    with pytest.raises(TypeError, match=rf"^RedisGate\.{method}\(\) takes no {argument}=") as refused:
        if method == "stream":
            gate.stream(lambda: None, **{argument: 1})  # type: ignore[arg-type, type-var]
        elif method == "try_admit":
            await gate.try_admit(**{argument: 1})  # type: ignore[arg-type]
        else:
            gate.admit(**{argument: 1})  # type: ignore[arg-type]
    assert way_out in str(refused.value)
    assert DOCS in str(refused.value)


def test_an_argument_nobody_takes_is_refused_as_python_refuses_it() -> None:
    with pytest.raises(
        TypeError, match=r"^RedisGate\.admit\(\) got an unexpected keyword argument 'timout'$"
    ):
        _gate().admit(timout=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^RedisGate\.__init__\(\) got an unexpected keyword argument 'a'$"):
        RedisGate(None, max_running=1, max_waiting=1, a=1, b=2)  # type: ignore[arg-type]


def test_what_it_lacks_is_priorities_and_deadline_order() -> None:
    # Code moves to the cluster by changing the constructor, and keeps every behaviour but
    # priorities and a queue in deadline order (deadline-feasible admission, adapt() and
    # on_deadline="cut" are there).
    assert set(LACKING) == {"priority", "priorities", "jump_share", "by_deadline"}


def test_on_deadline_is_checked_at_once() -> None:
    with pytest.raises(ValueError, match="on_deadline must be 'late'"):
        _gate().admit(on_deadline="stop")
    with pytest.raises(ValueError, match="on_deadline must be 'late'"):
        _gate().stream(lambda: None, on_deadline="stop")  # type: ignore[type-var]


def test_admit_all_refuses_a_redis_gate_as_a_key_with_the_way_out() -> None:
    keyed: KeyedGate[object] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    with pytest.raises(TypeError, match=r"^admit_all\(\) takes no gate as a key: the RedisGate ") as refused:
        admit_all((keyed, _gate()))
    assert "admit_all((keyed_gate, key), gate)" in str(refused.value)


def test_the_differences_are_exactly_those_the_readme_lists() -> None:
    # Public names of BoundedGate that RedisGate lacks, and the other way round.
    assert _public(BoundedGate) - _public(RedisGate) == {"priorities"}
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
        "by_deadline",
    }
    assert _arguments(BoundedGate.admit) - _arguments(RedisGate.admit) == {"priority"}
    assert _arguments(BoundedGate.try_admit) == _arguments(RedisGate.try_admit)
    assert _arguments(BoundedGate.stream) - _arguments(RedisGate.stream) == {"priority"}
    # (A permit's priority is there, and raises AttributeError: see above.)
    assert _public(Permit) - _public(RedisPermit) == set()
    assert inspect.iscoroutinefunction(RedisGate.try_admit)
    assert inspect.iscoroutinefunction(RedisGate.set_limits)  # it writes the cluster's limits
    assert inspect.iscoroutinefunction(RedisGate.signal)  # so do these: the pause, the cuts
    assert inspect.iscoroutinefunction(RedisGate.pause)
    assert not inspect.iscoroutinefunction(BoundedGate.set_limits)
    assert not inspect.iscoroutinefunction(BoundedGate.try_admit)
