"""Adversarial numbers at every public constructor and setter: a named refusal, or a setting that works.

Huge ints (beyond a float's range, beyond what Python prints), infinities, NaN, negatives, booleans
and floats where an int is needed: each is either accepted, or refused at once with a
``TypeError``/``ValueError`` whose message names the setting; never an ``OverflowError`` from deep
inside, never a crash later. A refused ``set_limits()`` changes nothing: not the gate, not a keyed
gate's template or keys, not a controller. The suite runs on both builds, so these tests also pin
one behaviour for both (issue 26: the compiled build used to refuse, with mypyc's own messages,
flags and mappings the pure build took).
"""

from __future__ import annotations

import asyncio
import functools
import math
import sys
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import Adaptive, AdaptiveLimit, BoundedGate, KeyedGate, RateLimit, admit_all
from boundedgate.aiohttp import gate_middleware
from boundedgate.asgi import GateMiddleware
from boundedgate.httpx import GatedTransport, follow_provider, gate_call
from boundedgate.redis import RedisGate
from tests.helpers import run_virtual

#: The values every setting is tried with, each of them (below), before Hypothesis tries more.
EDGES: list[object] = [
    10**400,  # beyond a float's range
    -(10**400),
    10**5000,  # beyond what Python prints (4300 digits)
    sys.maxsize,
    sys.maxsize + 1,
    2**64,
    -1,
    0,
    1,
    3,
    math.inf,
    -math.inf,
    math.nan,
    1.5,
    -0.0,
    5e-324,
    1.7e308,
    True,
    False,
    None,
    "3",
    Fraction(1, 3),
    Decimal("2"),
    [1],
    object(),
]

#: Numbers a caller (or an attacker, through a header or a config file) may hand a setting.
ADVERSARIAL = st.one_of(st.sampled_from(EDGES), st.integers(), st.floats(), st.booleans())


def _gate(**options: Any) -> BoundedGate:
    return BoundedGate(max_running=2, max_waiting=2, **options)


def _adaptive(field: str, value: object) -> Adaptive:
    return Adaptive(**{field: value})  # type: ignore[arg-type]


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called")


#: The setting's name (what its refusal must say), and a call that hands it the value.
SETTINGS: dict[str, tuple[str, Callable[[object], object]]] = {
    "BoundedGate max_running": ("max_running", lambda v: BoundedGate(max_running=v, max_waiting=1)),  # type: ignore[arg-type]
    "BoundedGate max_waiting": ("max_waiting", lambda v: BoundedGate(max_running=1, max_waiting=v)),  # type: ignore[arg-type]
    "BoundedGate priorities": ("priorities", lambda v: _gate(priorities=v)),
    "BoundedGate jump_share": ("jump_share", lambda v: _gate(jump_share=v)),
    "BoundedGate feasible": ("feasible", lambda v: _gate(feasible=v)),
    "BoundedGate adaptive": ("adaptive", lambda v: _gate(adaptive=v)),
    "KeyedGate max_running": ("max_running", lambda v: KeyedGate(max_running=v, max_waiting=1)),  # type: ignore[arg-type]
    "KeyedGate keep_idle": ("keep_idle", lambda v: KeyedGate(max_running=1, max_waiting=1, keep_idle=v)),  # type: ignore[arg-type]
    "KeyedGate learned_keys": (
        "learned_keys",
        lambda v: KeyedGate(max_running=1, max_waiting=1, learned_keys=v),  # type: ignore[arg-type]
    ),
    "KeyedGate override": (
        "max_running",
        lambda v: KeyedGate(max_running=1, max_waiting=1, overrides={"a": (v, 1)}),  # type: ignore[dict-item]
    ),
    "set_limits max_running": ("max_running", lambda v: _gate().set_limits(max_running=v)),  # type: ignore[arg-type]
    "set_limits max_waiting": ("max_waiting", lambda v: _gate().set_limits(max_waiting=v)),  # type: ignore[arg-type]
    "set_limits evict": ("evict", lambda v: _gate().set_limits(max_waiting=1, evict=v)),  # type: ignore[arg-type]
    "KeyedGate.set_limits max_running": (
        "max_running",
        lambda v: KeyedGate(max_running=1, max_waiting=1).set_limits(max_running=v),  # type: ignore[arg-type]
    ),
    "KeyedGate.set_limits key": (
        "max_running",
        lambda v: KeyedGate(max_running=1, max_waiting=1).set_limits("a", max_running=v),  # type: ignore[arg-type]
    ),
    "admit timeout": ("timeout", lambda v: _gate().admit(timeout=v)),  # type: ignore[arg-type]
    "admit deadline": ("deadline", lambda v: _gate().admit(deadline=v)),  # type: ignore[arg-type]
    "admit max_wait": ("max_wait", lambda v: _gate().admit(max_wait=v)),  # type: ignore[arg-type]
    "admit priority": ("priority", lambda v: _gate(priorities=3).admit(priority=v)),  # type: ignore[arg-type]
    "admit cost": ("cost", lambda v: _gate().admit(cost=v)),  # type: ignore[arg-type]
    "admit raise_late": ("raise_late", lambda v: _gate().admit(raise_late=v)),  # type: ignore[arg-type]
    "stream raise_late": ("raise_late", lambda v: _gate().stream(_items, raise_late=v)),  # type: ignore[arg-type]
    "admit_all raise_late": ("raise_late", lambda v: admit_all(_gate(), raise_late=v)),  # type: ignore[arg-type]
    "adapt settings": ("settings", lambda v: _gate().adapt(v)),  # type: ignore[arg-type]
    "AdaptiveLimit initial": ("max_running", lambda v: AdaptiveLimit(Adaptive(), v)),  # type: ignore[arg-type]
    **{
        f"Adaptive {field}": (field, functools.partial(_adaptive, field))
        for field in (
            "floor",
            "ceiling",
            "decrease",
            "increase",
            "increase_ratio",
            "tolerance",
            "quantile",
            "window",
            "min_samples",
            "baseline_windows",
            "max_limit_factor",
        )
    },
    "RateLimit rate": ("rate", lambda v: RateLimit(v, 1)),  # type: ignore[arg-type]
    "RateLimit burst": ("burst", lambda v: RateLimit(1, v)),  # type: ignore[arg-type]
    "RateLimit floor": ("floor", lambda v: RateLimit(1, 1, floor=v)),  # type: ignore[arg-type]
    "RateLimit.per_minute amount": ("amount", RateLimit.per_minute),  # type: ignore[dict-item]
    "RateLimit.per_second burst": ("burst", lambda v: RateLimit.per_second(1, burst=v)),  # type: ignore[arg-type]
    "GatedTransport default_retry_after": (
        "default_retry_after",
        lambda v: GatedTransport(_gate(), default_retry_after=v),  # type: ignore[arg-type]
    ),
    "GatedTransport priority": ("priority", lambda v: GatedTransport(_gate(priorities=3), priority=v)),  # type: ignore[arg-type]
    "GatedTransport retry_priority": (
        "retry_priority",
        lambda v: GatedTransport(_gate(priorities=3), retry_priority=v),  # type: ignore[arg-type]
    ),
    "GatedTransport max_wait": ("max_wait", lambda v: GatedTransport(_gate(), max_wait=v)),  # type: ignore[arg-type]
    "GatedTransport cost": ("cost", lambda v: GatedTransport(_gate(), cost=v)),  # type: ignore[arg-type]
    "GatedTransport sdk_retry": ("sdk_retry", lambda v: GatedTransport(_gate(), sdk_retry=v)),  # type: ignore[arg-type]
    "gate_middleware priority": ("priority", lambda v: gate_middleware(_gate(priorities=3), priority=v)),  # type: ignore[arg-type]
    "gate_middleware max_wait": ("max_wait", lambda v: gate_middleware(_gate(), max_wait=v)),  # type: ignore[arg-type]
    "gate_middleware cost": ("cost", lambda v: gate_middleware(_gate(), cost=v)),  # type: ignore[arg-type]
    "gate_call timeout": ("timeout", lambda v: gate_call(timeout=v)),  # type: ignore[arg-type]
    "gate_call deadline": ("deadline", lambda v: gate_call(deadline=v)),  # type: ignore[arg-type]
    "gate_call priority": ("priority", lambda v: gate_call(priority=v)),  # type: ignore[arg-type]
    "gate_call cost": ("cost", lambda v: gate_call(cost=v)),  # type: ignore[arg-type]
    "follow_provider max_pause": ("max_pause", lambda v: follow_provider(_gate(), max_pause=v)),  # type: ignore[arg-type]
    "GateMiddleware timeout": ("timeout", lambda v: GateMiddleware(_app, gate=_gate(), timeout=v)),  # type: ignore[arg-type]
    "GateMiddleware max_wait": ("max_wait", lambda v: GateMiddleware(_app, gate=_gate(), max_wait=v)),  # type: ignore[arg-type]
    "GateMiddleware priority": (
        "priority",
        lambda v: GateMiddleware(_app, gate=_gate(priorities=3), priority=v),  # type: ignore[arg-type]
    ),
    "GateMiddleware cost": ("cost", lambda v: GateMiddleware(_app, gate=_gate(), cost=v)),  # type: ignore[arg-type]
    "GateMiddleware retry_after_fallback": (
        "retry_after_fallback",
        lambda v: GateMiddleware(_app, gate=_gate(), retry_after_fallback=v),  # type: ignore[arg-type]
    ),
    "GateMiddleware max_buffer": (
        "max_buffer",
        lambda v: GateMiddleware(_app, gate=_gate(), max_buffer=v),  # type: ignore[arg-type]
    ),
}


def _takes_or_refuses_by_name(setting: str, value: object) -> None:
    name, call = SETTINGS[setting]
    try:
        call(value)
    except (TypeError, ValueError) as error:  # anything else (an OverflowError...) fails the test
        refusal = str(error)
    else:
        return
    assert name in refusal, (setting, refusal)


def test_every_setting_takes_each_edge_or_refuses_it_by_name() -> None:
    for setting in SETTINGS:
        for value in EDGES:
            _takes_or_refuses_by_name(setting, value)


@given(setting=st.sampled_from(sorted(SETTINGS)), value=ADVERSARIAL)
def test_every_setting_takes_a_number_or_refuses_it_by_name(setting: str, value: object) -> None:
    _takes_or_refuses_by_name(setting, value)


# -- a refused set_limits changes nothing --------------------------------------------------------

LIMITS = st.one_of(st.just(...), st.none(), st.integers(0, 6), ADVERSARIAL)


def _gate_view(gate: BoundedGate) -> tuple[object, ...]:
    stats = gate.stats()
    controller = gate.controller
    return (
        gate.max_running,
        gate.max_waiting,
        gate.running,
        gate.waiting,
        stats.limit_changes,
        stats.evicted,
        None if controller is None else (controller.value, controller.cuts),
    )


def _keyed_view(keyed: KeyedGate[str]) -> tuple[object, ...]:
    live = keyed.get("live")
    assert live is not None
    remembered = keyed.controller("gone")
    assert remembered is not None
    return (
        keyed.max_running,
        keyed.max_waiting,
        keyed.limits("own"),
        keyed.limits("gone"),
        _gate_view(live),
        remembered.value,
        keyed.stats().total.limit_changes,
    )


def _refused_changes_nothing(view: Callable[[], object], setting: Callable[[], None]) -> None:
    was = view()
    try:
        setting()
    except (TypeError, ValueError):
        assert view() == was, "a refused set_limits changed something"


async def _set_limits_atomically(max_running: Any, max_waiting: Any, evict: Any) -> None:
    gate = BoundedGate(max_running=3, max_waiting=3, adaptive=Adaptive(window=60.0))
    held = [gate.try_admit() for _ in range(3)]
    waiters = [asyncio.create_task(gate.admit(timeout=100).__aenter__()) for _ in range(3)]
    await asyncio.sleep(0)
    keyed: KeyedGate[str] = KeyedGate(max_running=4, max_waiting=2, adaptive=Adaptive(window=60.0))
    live = keyed.try_admit("live")
    keyed.signal("gone", "overloaded")  # a learned record, without a gate
    keyed.set_limits("own", max_running=2)
    _refused_changes_nothing(
        lambda: _gate_view(gate),
        lambda: gate.set_limits(max_running=max_running, max_waiting=max_waiting, evict=evict),
    )
    _refused_changes_nothing(
        lambda: _keyed_view(keyed),
        lambda: keyed.set_limits(max_running=max_running, max_waiting=max_waiting, evict=evict),
    )
    _refused_changes_nothing(
        lambda: _keyed_view(keyed),
        lambda: keyed.set_limits("live", max_running=max_running, max_waiting=max_waiting, evict=evict),
    )
    for permit in held:
        permit.release()
    live.release()
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


@given(max_running=LIMITS, max_waiting=LIMITS, evict=st.one_of(st.booleans(), ADVERSARIAL))
def test_a_refused_set_limits_changes_nothing(
    max_running: object, max_waiting: object, evict: object
) -> None:
    run_virtual(_set_limits_atomically, max_running, max_waiting, evict)


async def test_a_set_limits_half_valid_changes_nothing_on_any_part() -> None:
    await _set_limits_atomically(10**400, 1, False)  # used to set Q, then overflow on C
    await _set_limits_atomically(5, 1, 1)  # used to change the template, then refuse evict at a key


# -- one behaviour on both builds ----------------------------------------------------------------


@pytest.mark.parametrize("evict", [1, 0, None, "yes"])
async def test_evict_is_true_or_false_on_both_builds(evict: object) -> None:
    gate = _gate()
    keyed: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2)
    message = r"^evict must be True or False, got "
    with pytest.raises(TypeError, match=message):
        gate.set_limits(max_waiting=1, evict=evict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        keyed.set_limits(max_waiting=1, evict=evict)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        keyed.set_limits("a", max_waiting=1, evict=evict)  # type: ignore[arg-type]
    assert (gate.max_waiting, keyed.max_waiting, keyed.limits("a").max_waiting) == (2, 2, 2)


async def _items() -> AsyncIterator[int]:
    yield 1


@pytest.mark.parametrize("raise_late", [0, 1, None, "no"])
async def test_raise_late_is_true_or_false_on_both_builds(raise_late: object) -> None:
    gate = _gate()
    message = r"^raise_late must be True or False, got "
    async with gate.admit() as permit:
        with pytest.raises(TypeError, match=message):
            permit.hand_to(_items(), raise_late=raise_late)  # type: ignore[arg-type]
    other = _gate()
    async with admit_all(other) as combined:
        with pytest.raises(TypeError, match=message):
            combined.hand_to(_items(), raise_late=raise_late)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        gate.admit(raise_late=raise_late)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        KeyedGate(max_running=1, max_waiting=1).admit("k", raise_late=raise_late)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        gate.stream(_items, raise_late=raise_late)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message):
        admit_all(gate, raise_late=raise_late)  # type: ignore[arg-type]
    assert (gate.running, gate.stats().admitted, other.running) == (0, 1, 0)


@pytest.mark.parametrize(
    ("remaining", "message"),
    [
        ({1: 3}, r"^remaining's keys must be resource names"),
        ({"requests": "3"}, r"^remaining\['requests'\] must be a number"),
        ({"requests": -1}, r"^remaining\['requests'\] must be >= 0"),
        ({"requests": 10**400}, r"^remaining\['requests'\] is out of range"),
        ([("requests", 3)], r"^remaining must be a mapping"),
    ],
)
async def test_sync_rate_limits_checks_the_quotas_on_both_builds(remaining: object, message: str) -> None:
    gate = _gate(rate_limits=[RateLimit.per_minute(60, name="requests")])
    keyed: KeyedGate[str] = KeyedGate(
        max_running=2, max_waiting=2, rate_limits=[RateLimit.per_minute(60, name="requests")]
    )
    held = keyed.try_admit("a")
    with pytest.raises((TypeError, ValueError), match=message):
        gate.sync_rate_limits(remaining)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match=message):
        keyed.sync_rate_limits("a", remaining)  # type: ignore[arg-type]
    assert gate.stats().tokens == (60.0,)
    held.release()


async def test_adapt_checks_its_settings_on_both_builds() -> None:
    gate = _gate()
    for settings in ("fast", 3, {"floor": 1}):
        with pytest.raises(TypeError, match=r"^settings must be Adaptive settings"):
            gate.adapt(settings)  # type: ignore[arg-type]
    assert gate.controller is None
    assert gate.adapt(None).limit == 2  # the defaults


# -- RedisGate: the scripts count in Lua's doubles ---------------------------------------------


def _redis_gate(**settings: Any) -> RedisGate:
    options: dict[str, Any] = {"max_running": 1, "max_waiting": 1, "name": "adversarial", **settings}
    return RedisGate(None, **options)  # no call is made: no client needed


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"max_running": 2**53 + 1}, ValueError, r"^max_running must be <= 9007199254740992"),
        ({"max_running": 10**400}, ValueError, r"^max_running must be <= "),
        ({"max_waiting": 2**53 + 1}, ValueError, r"^max_waiting must be <= 9007199254740992"),
        ({"lease_ttl": 10**400}, ValueError, r"^lease_ttl is out of range"),
        ({"poll_interval": True}, TypeError, r"^poll_interval must be a number"),
        ({"op_timeout": math.nan}, ValueError, r"^op_timeout must be a finite number > 0"),
        ({"idle_ttl": math.inf}, ValueError, r"^idle_ttl must be a finite number > 0"),
        ({"adaptive": 0.5}, TypeError, r"^adaptive must be an Adaptive"),
    ],
)
def test_a_redis_gate_refuses_what_its_scripts_cannot_hold(
    settings: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        _redis_gate(**settings)
    assert _redis_gate(max_running=2**53, max_waiting=2**53).max_running == 2**53


@pytest.mark.parametrize("raise_late", [0, 1, None])
def test_a_redis_gate_takes_raise_late_as_true_or_false(raise_late: object) -> None:
    gate = _redis_gate()
    with pytest.raises(TypeError, match=r"^raise_late must be True or False"):
        gate.admit(raise_late=raise_late)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^raise_late must be True or False"):
        gate.stream(_items, raise_late=raise_late)  # type: ignore[arg-type]


async def test_a_redis_gate_refuses_a_huge_limit_before_it_writes_anything() -> None:
    gate = _redis_gate()  # set_limits would write to Redis: a refusal never gets that far
    for limits in ({"max_running": 10**400}, {"max_running": 2, "max_waiting": 2**60}):
        with pytest.raises(ValueError, match=r"must be <= "):
            await gate.set_limits(**limits)
    assert (gate.max_running, gate.max_waiting) == (1, 1)
