"""KeyedGate: one gate per key, with the template's limits or the key's override, admitting exactly as
a BoundedGate does, with the key's gate's name in every error; statistics per key and summed."""

from __future__ import annotations

import asyncio

import pytest

from boundedgate import (
    BoundedGate,
    GateLimits,
    KeyedGate,
    KeyedStatistics,
    Late,
    Permit,
    QueueExpired,
    QueueFull,
    Status,
)
from tests.helpers import live_gate


async def test_each_key_has_its_own_gate_with_the_template_limits() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant")
    a = tenants.try_admit("a")
    b = tenants.try_admit("b")
    assert isinstance(a, Permit)
    assert a.gate is not b.gate
    assert a.gate is tenants.get("a")
    assert (a.gate.name, a.gate.max_running, a.gate.max_waiting) == ("tenant/a", 1, 0)
    assert (tenants.running, tenants.waiting, len(tenants)) == (2, 0, 2)
    a.release()
    b.release()


async def test_the_same_key_shares_one_gate_and_its_limit() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=0, name="tenant")
    first = tenants.try_admit("a")
    second = tenants.try_admit("a")
    assert first.gate is second.gate
    with pytest.raises(QueueFull) as refused:
        tenants.try_admit("a")
    assert str(refused.value) == "gate 'tenant/a' [running 2/2, waiting 0/0] is full"
    first.release()
    second.release()


async def test_errors_name_the_keys_gate() -> None:
    sessions: KeyedGate[tuple[str, int]] = KeyedGate(max_running=1, max_waiting=1, name="session")
    key = ("acme", 42)
    holder = sessions.try_admit(key)
    with pytest.raises(QueueExpired) as expired:
        async with sessions.admit(key, timeout=2):
            pytest.fail("must not start")
    assert expired.value.gate == "session/('acme', 42)"
    assert expired.value.waited == 2
    holder.release()
    with pytest.raises(Late) as late:
        async with sessions.admit(key, timeout=1):
            await asyncio.sleep(1)
    assert late.value.gate == "session/('acme', 42)"


async def test_queued_requests_of_a_key_start_in_order_as_its_slots_free() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=5, name="tenant")
    order: list[int] = []

    async def request(i: int) -> None:
        async with tenants.admit("a"):
            order.append(i)
            await asyncio.sleep(1)

    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(*(request(i) for i in range(4)))
    assert order == [0, 1, 2, 3]
    assert loop.time() - start == 4
    stats = tenants.stats().total
    assert (stats.admitted, stats.completed, stats.peak_waiting) == (4, 4, 3)
    assert stats.queue_seconds_total == 0 + 1 + 2 + 3


async def test_overrides_from_a_mapping_apply_to_their_keys_only() -> None:
    tenants: KeyedGate[str] = KeyedGate(
        max_running=1,
        max_waiting=0,
        name="tenant",
        overrides={"big": GateLimits(3, None), "small": (1, 2)},  # a plain pair, as the runtime takes
    )
    big = [tenants.try_admit("big") for _ in range(3)]
    assert (live_gate(tenants, "big").max_running, live_gate(tenants, "big").max_waiting) == (3, None)
    assert tenants.limits("small") == GateLimits(1, 2)
    assert tenants.limits("other") == GateLimits(1, 0)
    other = tenants.try_admit("other")
    with pytest.raises(QueueFull):
        tenants.try_admit("other")
    for permit in [*big, other]:
        permit.release()


async def test_overrides_from_a_function_and_none_means_the_template() -> None:
    asked: list[str] = []

    def plan(key: str) -> GateLimits | None:
        asked.append(key)
        return GateLimits(4, 4) if key.startswith("pro-") else None

    tenants = KeyedGate(max_running=1, max_waiting=0, name="tenant", overrides=plan)
    assert tenants.limits("pro-acme") == (4, 4)
    async with tenants.admit("pro-acme") as pro, tenants.admit("free") as free:
        assert pro.gate.max_running == 4
        assert free.gate.max_running == 1
    assert asked == ["pro-acme", "pro-acme", "free"]  # asked once per gate created, plus limits()


async def test_a_mapping_read_at_creation_so_later_changes_apply_to_new_gates() -> None:
    plans: dict[str, GateLimits] = {}
    tenants = KeyedGate(max_running=1, max_waiting=0, overrides=plans)
    async with tenants.admit("a") as permit:
        assert permit.gate.max_running == 1
    plans["a"] = GateLimits(2, 0)
    async with tenants.admit("a") as permit:
        assert permit.gate.max_running == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_running": 0, "max_waiting": 0}, ValueError, "max_running must be >= 1, got 0"),
        ({"max_running": 1, "max_waiting": True}, TypeError, "max_waiting must be an int, not bool"),
        ({"max_running": 1, "max_waiting": 0, "name": 3}, TypeError, "name must be a str, got 3"),
        ({"max_running": 1, "max_waiting": 0, "keep_idle": -1}, ValueError, "keep_idle must be >= 0, got -1"),
        ({"max_running": 1, "max_waiting": 0, "keep_idle": 1.5}, TypeError, "keep_idle must be an int"),
        ({"max_running": 1, "max_waiting": 0, "keep_idle": True}, TypeError, "keep_idle must be an int"),
        ({"max_running": 1, "max_waiting": 0, "overrides": 5}, TypeError, "overrides must be a mapping"),
        (
            {"max_running": 1, "max_waiting": 0, "overrides": {"a": GateLimits(0, 0)}},
            ValueError,
            "max_running must be >= 1, got 0",
        ),
        (
            {"max_running": 1, "max_waiting": 0, "overrides": {"a": 3}},
            TypeError,
            "limits for 'a' must be GateLimits",
        ),
    ],
)
def test_bad_settings_are_refused_at_construction(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^{message}"):
        KeyedGate(**kwargs)  # type: ignore[arg-type]


async def test_bad_limits_from_a_function_are_refused_when_the_key_is_used() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, overrides=lambda key: GateLimits(1, -1))
    with pytest.raises(ValueError, match=r"^max_waiting must be >= 0, got -1$"):
        tenants.admit("a")
    assert len(tenants) == 0
    assert tenants.stats().created == 0


async def test_bad_timeouts_are_refused_at_once_as_by_bounded_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    with pytest.raises(ValueError, match="not both"):
        tenants.admit("a", timeout=1, deadline=1)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        tenants.try_admit("a", timeout=-1)


async def test_unhashable_keys_are_refused() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    with pytest.raises(TypeError, match="unhashable"):
        tenants.admit(["a"])  # type: ignore[arg-type]


async def test_try_admit_with_a_passed_deadline_counts_nothing_and_keeps_no_gate() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0)
    now = asyncio.get_running_loop().time()
    with pytest.raises(QueueExpired):
        tenants.try_admit("a", deadline=now)
    assert len(tenants) == 0
    assert tenants.stats().total.arrived == 0


async def test_per_key_stats_and_the_total_over_keys() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=1, name="tenant", keep_idle=10)
    async with tenants.admit("a"):
        await asyncio.sleep(3)
    for _ in range(2):
        async with tenants.admit("b"):
            await asyncio.sleep(1)
    held = [tenants.try_admit("c"), tenants.try_admit("c")]
    with pytest.raises(QueueFull):
        tenants.try_admit("c", timeout=0.5)  # queue place free, but try_admit never waits
    a = live_gate(tenants, "a").stats()
    b = live_gate(tenants, "b").stats()
    assert (a.name, a.completed, a.run_seconds_total) == ("tenant/a", 1, 3)
    assert (b.completed, b.run_seconds_max) == (2, 1)
    stats = tenants.stats()
    assert isinstance(stats, KeyedStatistics)
    assert (stats.name, stats.keys, stats.busy_keys, stats.created, stats.dropped) == ("tenant", 3, 1, 3, 0)
    total = stats.total
    assert (total.name, total.running, total.waiting) == ("tenant", 2, 0)
    assert (total.admitted, total.completed, total.rejected) == (5, 3, 1)
    assert (total.run_seconds_total, total.run_seconds_max) == (5, 3)
    assert (total.max_running, total.max_waiting) == (6, 3)  # the live keys' limits, summed
    for permit in held:
        permit.release()


async def test_total_max_waiting_is_none_when_a_live_key_is_unbounded() -> None:
    tenants = KeyedGate(max_running=1, max_waiting=0, overrides={"u": GateLimits(1, None)})
    held = [tenants.try_admit("a"), tenants.try_admit("u")]
    assert tenants.stats().total.max_waiting is None
    for permit in held:
        permit.release()


async def test_total_peaks_are_peaks_of_the_sum_not_sums_of_peaks() -> None:
    # Key a peaks at 2 running, then key b peaks at 2: never more than 2 ran at once in all.
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=2, keep_idle=5)
    for key in ("a", "b"):
        held = [tenants.try_admit(key) for _ in range(2)]
        queued = [asyncio.create_task(tenants.admit(key).__aenter__()) for _ in range(2)]
        await asyncio.sleep(0)
        for permit in held:
            permit.release()
        for permit in await asyncio.gather(*queued):
            permit.release()
    total = tenants.stats().total
    assert (total.peak_running, total.peak_waiting) == (2, 2)
    assert (total.running, total.waiting, total.admitted, total.completed) == (0, 0, 8, 8)


async def test_total_counts_expiries_from_the_timer() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=3)
    holder = tenants.try_admit("a")
    results = await asyncio.gather(
        *(_enter(tenants.admit("a", timeout=t)) for t in (1, 2)), return_exceptions=True
    )
    assert all(isinstance(r, QueueExpired) for r in results)
    assert (tenants.running, tenants.waiting) == (1, 0)
    holder.release()
    total = tenants.stats().total
    assert (total.expired, total.waiting, total.queue_seconds_total) == (2, 0, 3)


async def _enter(permit: Permit) -> None:
    async with permit:
        pass


async def test_repr_shows_keys_and_counts() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="tenant", keep_idle=1)
    async with tenants.admit("a"):
        pass
    held = tenants.try_admit("b")
    assert repr(tenants) == "<KeyedGate 'tenant' [keys 2 (1 idle), running 1, waiting 0]>"
    assert "b" in tenants
    assert "c" not in tenants
    assert sorted(tenants) == ["a", "b"]
    held.release()


async def test_template_limits_are_readable() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=3, max_waiting=None, name="t")
    assert (tenants.name, tenants.max_running, tenants.max_waiting) == ("t", 3, None)


def test_keyed_gate_is_final_slotted_and_weakly_referenceable() -> None:
    import weakref

    for cls in (KeyedGate,):
        assert getattr(cls, "__final__", False)
        assert not hasattr(KeyedGate(max_running=1, max_waiting=0), "__dict__")
    assert weakref.ref(KeyedGate(max_running=1, max_waiting=0)) is not None
    assert weakref.ref(BoundedGate(max_running=1, max_waiting=0)) is not None


async def test_a_keyed_permit_moves_between_tasks_like_any_permit() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1)
    permit = tenants.try_admit("a", timeout=5)
    asyncio.get_running_loop().call_later(1, permit.release)
    async with tenants.admit("a") as second:
        assert second.started == permit.ended
    assert permit.status is Status.COMPLETED


# -- limits, checked ----------------------------------------------------------------------------


def test_limits_without_overrides_are_the_template() -> None:
    assert KeyedGate[str](max_running=3, max_waiting=None).limits("any") == GateLimits(3, None)


def test_an_override_may_leave_running_unlimited_or_waiting_unbounded() -> None:
    tenants: KeyedGate[str] = KeyedGate(
        max_running=1,
        max_waiting=0,
        overrides={"a": GateLimits(None, 5), "b": (2, None)},  # a plain pair, as the runtime takes
    )
    assert tenants.limits("a") == GateLimits(None, 5)
    assert tenants.limits("b") == GateLimits(2, None)


def test_an_override_with_a_bad_queue_is_refused_naming_nothing_but_the_setting() -> None:
    with pytest.raises(ValueError, match=r"^max_waiting must be >= 0, got -1$"):
        KeyedGate(max_running=1, max_waiting=0, overrides={"a": GateLimits(1, -1)})


def test_a_malformed_override_from_a_function_names_its_key() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, overrides=lambda key: 3)  # type: ignore[arg-type,return-value]
    message = r"^limits for 'acme' must be GateLimits\(max_running, max_waiting\), got 3$"
    with pytest.raises(TypeError, match=message):
        tenants.limits("acme")
