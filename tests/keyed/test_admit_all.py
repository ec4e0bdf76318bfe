"""admit_all: several gates for one call, in one order, under one deadline; all or nothing.

A step that is refused, expires or is cancelled gives back every gate already taken at once (as a
slot handed over but never used: ``cancelled``, not ``admitted``) and raises its own error, naming
its gate. The combined permit releases every gate exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest

from boundedgate import (
    BoundedGate,
    CombinedPermit,
    GateLimits,
    KeyedGate,
    Late,
    QueueExpired,
    QueueFull,
    Status,
    admit_all,
)
from boundedgate._driver import _order
from tests.helpers import Boom, live_gate


def _status(permit: CombinedPermit) -> Status:
    """``permit.status`` read afresh: mypy would keep the narrowing of an earlier assert on it."""
    return permit.status


def _gates() -> tuple[KeyedGate[str], BoundedGate]:
    return KeyedGate(max_running=1, max_waiting=2, name="tenant"), BoundedGate(
        max_running=1, max_waiting=2, name="openai"
    )


async def test_takes_every_gate_in_order_and_releases_them_all_once() -> None:
    tenants, openai = _gates()
    async with admit_all((tenants, "acme"), openai, timeout=30) as permit:
        assert isinstance(permit, CombinedPermit)
        assert permit.status is Status.RUNNING
        assert [g.name for g in permit.gates] == ["tenant/acme", "openai"]
        assert all(p.status is Status.RUNNING for p in permit.permits)
        assert (tenants.running, openai.running) == (1, 1)
        assert permit.started == permit.arrival
        assert permit.arrival is not None
        assert permit.deadline == permit.arrival + 30
    assert _status(permit) is Status.COMPLETED
    assert all(p.status is Status.COMPLETED for p in permit.permits)
    assert (tenants.running, openai.running, len(tenants)) == (0, 0, 0)
    permit.release()
    assert (tenants.stats().total.completed, openai.stats().completed) == (1, 1)


async def test_each_step_waits_only_what_is_left_of_the_one_budget() -> None:
    tenants, openai = _gates()
    loop = asyncio.get_running_loop()
    tenant_holder = tenants.try_admit("acme")
    openai_holder = openai.try_admit()
    loop.call_later(3, tenant_holder.release)  # the tenant slot frees at 3 s
    loop.call_later(10, openai_holder.release)  # the provider slot only at 10 s
    start = loop.time()
    with pytest.raises(QueueExpired) as expired:
        async with admit_all((tenants, "acme"), openai, timeout=5):
            pytest.fail("must not start")
    assert loop.time() - start == 5  # not 3 + 5
    assert expired.value.gate == "openai"
    # The provider's queue got what was left (2 s), but the refusal reports the whole call, as Late does.
    assert (expired.value.waited, expired.value.elapsed, expired.value.deadline) == (5, 5, 5)
    tenant = tenants.stats().total
    assert (tenant.admitted, tenant.cancelled, tenant.completed) == (1, 1, 1)  # the holder, and us
    assert tenants.running == 0  # given back at once
    await asyncio.sleep(5)


async def test_a_refused_step_gives_back_the_earlier_gates_at_once_uncounted_as_work() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=1, name="tenant")
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    held = openai.try_admit()
    combined = admit_all((tenants, "acme"), openai)
    with pytest.raises(QueueFull) as refused:
        async with combined:
            pytest.fail("must not start")
    assert refused.value.gate == "openai"
    assert combined.status is Status.REJECTED
    tenant_permit, openai_permit = combined.permits
    assert tenant_permit.status is Status.CANCELLED
    assert tenant_permit.started is None
    assert openai_permit.status is Status.REJECTED
    assert combined.ended == combined.arrival
    stats = tenants.stats()
    assert (stats.total.admitted, stats.total.cancelled, stats.total.completed, stats.keys) == (0, 1, 0, 0)
    assert openai.stats().rejected == 1
    held.release()


async def test_the_slot_given_back_passes_to_the_next_waiter_at_that_instant() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=2, name="tenant")
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    tenant_holder = tenants.try_admit("acme")
    held = openai.try_admit()
    loop = asyncio.get_running_loop()
    combined = asyncio.create_task(admit_all((tenants, "acme"), openai).__aenter__())
    await asyncio.sleep(0)
    waiter = tenants.admit("acme")
    waiter_task = asyncio.create_task(waiter.__aenter__())
    await asyncio.sleep(1)
    tenant_holder.release()  # to the combined admission, which is refused by openai: passes on now
    with pytest.raises(QueueFull):
        await combined
    assert await waiter_task is waiter
    assert waiter.started == loop.time()
    waiter.release()
    held.release()


async def test_cancelled_while_waiting_at_a_later_step_gives_everything_back() -> None:
    tenants, openai = _gates()
    held = openai.try_admit()
    combined = admit_all((tenants, "acme"), openai, timeout=60)
    task = asyncio.create_task(combined.__aenter__())
    await asyncio.sleep(1)
    assert combined.status is Status.QUEUED
    assert (tenants.running, openai.waiting) == (1, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _status(combined) is Status.CANCELLED
    assert [p.status for p in combined.permits] == [Status.CANCELLED, Status.CANCELLED]
    assert (tenants.running, openai.running, openai.waiting) == (0, 1, 0)
    held.release()
    assert (tenants.stats().total.cancelled, openai.stats().cancelled) == (1, 1)


async def test_a_caller_cancelled_before_it_arrives_touches_no_counter() -> None:
    tenants, openai = _gates()

    async def request() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        async with admit_all((tenants, "acme"), openai):
            pytest.fail("a cancelled caller must not start")

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(request())
    assert (tenants.stats().total.arrived, openai.stats().arrived) == (0, 0)


async def test_a_deadline_already_passed_is_refused_before_anything_is_counted() -> None:
    tenants, openai = _gates()
    now = asyncio.get_running_loop().time()
    combined = admit_all((tenants, "acme"), openai, deadline=now)
    with pytest.raises(QueueExpired) as expired:
        async with combined:
            pytest.fail("must not start")
    assert expired.value.gate == "tenant/acme"
    assert combined.status is Status.EXPIRED
    assert (tenants.stats().total.arrived, openai.stats().arrived) == (0, 0)


async def test_a_body_that_raises_fails_every_gate_and_propagates_unchanged() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai)
    with pytest.raises(Boom):
        async with combined:
            raise Boom
    assert combined.status is Status.FAILED
    assert [p.status for p in combined.permits] == [Status.FAILED, Status.FAILED]
    assert (tenants.stats().total.failed, openai.stats().failed) == (1, 1)


async def test_a_body_finishing_past_the_deadline_is_late_at_every_gate() -> None:
    tenants, openai = _gates()
    tenant_holder = tenants.try_admit("acme")
    asyncio.get_running_loop().call_later(2, tenant_holder.release)
    combined = admit_all((tenants, "acme"), openai, timeout=5)
    with pytest.raises(Late) as late:
        async with combined:
            await asyncio.sleep(4)
    assert combined.status is Status.LATE
    assert [p.status for p in combined.permits] == [Status.LATE, Status.LATE]
    error = late.value
    assert (error.gate, error.waited, error.elapsed, error.overrun) == ("openai", 2, 6, 1)
    assert error.deadline == combined.deadline
    assert (tenants.stats().total.late, openai.stats().late) == (1, 1)


async def test_release_is_idempotent_and_works_from_another_task() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai)
    combined.release()  # not entered yet: nothing
    await combined.__aenter__()

    async def consumer() -> None:  # what a stream wrapper does with a permit handed to it
        await asyncio.sleep(1)
        combined.release()

    await asyncio.create_task(consumer())
    combined.release()
    assert combined.status is Status.COMPLETED
    assert combined.arrival is not None
    assert combined.ended == combined.arrival + 1
    async with admit_all((tenants, "acme"), openai) as second:
        second.release()
        assert (tenants.running, openai.running) == (0, 0)
        third = openai.try_admit()  # the slot really is free
    assert second.status is Status.COMPLETED  # the exit released nothing more
    assert openai.running == 1
    third.release()
    assert (tenants.stats().total.completed, openai.stats().completed) == (2, 3)
    assert (tenants.running, openai.running) == (0, 0)


async def test_a_combined_permit_is_used_once() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai)
    async with combined:
        pass
    with pytest.raises(RuntimeError, match="already used"):
        await combined.__aenter__()


async def test_a_keyed_step_is_resolved_when_its_turn_comes() -> None:
    openai = BoundedGate(max_running=1, max_waiting=1, name="openai")
    sessions: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="session")
    held = openai.try_admit()
    asyncio.get_running_loop().call_later(2, held.release)
    task = asyncio.create_task(admit_all(openai, (sessions, "s1")).__aenter__())
    await asyncio.sleep(1)
    assert len(sessions) == 0  # nothing created while the provider is waited for
    combined = await task
    assert combined.gates[1] is sessions.get("s1")
    combined.release()
    assert len(sessions) == 0


async def test_a_keyed_gates_own_gate_may_be_given_directly() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=0, name="tenant", keep_idle=1)
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    async with tenants.admit("acme") as first:
        pass
    kept = tenants.get("acme")
    assert kept is first.gate
    async with admit_all(kept, openai) as combined:
        assert combined.gates[0] is kept
    async with tenants.admit("other"):
        pass  # acme's gate is dropped: only one idle key is kept
    assert "acme" not in tenants
    async with admit_all(kept, openai) as combined:  # a dropped gate: the key's new gate is used
        assert combined.gates[0] is tenants.get("acme") is not kept
    assert tenants.stats().total.completed == 4


async def test_a_single_gate_admission_is_just_that_gate() -> None:
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    async with admit_all(openai, timeout=math.inf) as combined:
        assert combined.deadline == math.inf
        assert openai.running == 1
    assert openai.stats().completed == 1


async def test_repr_names_the_gates_and_the_status() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai)
    assert repr(combined) == "<CombinedPermit of 2 gates: new>"
    async with combined:
        assert repr(combined) == "<CombinedPermit of 'tenant/acme', 'openai': running>"


def test_combined_permit_is_final_and_slotted() -> None:
    assert getattr(CombinedPermit, "__final__", False)
    assert not hasattr(admit_all(BoundedGate(max_running=1, max_waiting=0)), "__dict__")


# -- arguments and the order ---------------------------------------------------------------------


#: Where the refusals of admit_all() send their reader.
DOCS = 'docs/keys.md, "Several gates for one call"'


def test_arguments_are_checked_at_once() -> None:
    tenants, openai = _gates()
    with pytest.raises(ValueError, match=r"^admit_all\(\) needs at least one gate: pass the gates") as empty:
        admit_all()
    assert "admit_all((tenants, tenant_id), provider)" in str(empty.value)
    with pytest.raises(TypeError, match=r"takes gates and \(KeyedGate, key\) pairs, got 'openai'") as odd:
        admit_all("openai")  # type: ignore[arg-type]
    assert DOCS in str(odd.value)
    with pytest.raises(TypeError, match=r"^admit_all\(\) takes a key with a KeyedGate only") as keyed:
        admit_all((openai, "x"))  # type: ignore[arg-type]
    assert "pass the BoundedGate 'openai' alone" in str(keyed.value)
    with pytest.raises(TypeError, match="unhashable"):
        admit_all((tenants, ["acme"]))  # type: ignore[arg-type]  # unhashable on purpose
    with pytest.raises(ValueError, match=r"^give timeout or deadline, not both$"):
        admit_all(openai, timeout=1, deadline=1)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        admit_all(openai, timeout=-1)
    with pytest.raises(TypeError, match="deadline must be a number"):
        admit_all(openai, deadline="soon")  # type: ignore[arg-type]


def test_a_keyed_gate_without_its_key_is_refused_with_how_to_give_it() -> None:
    tenants, openai = _gates()
    with pytest.raises(TypeError, match=r"^admit_all\(\) takes a KeyedGate with its key") as refused:
        admit_all(tenants, openai)  # type: ignore[arg-type]
    assert "admit_all((keyed_gate, key), ...)" in str(refused.value)


@pytest.mark.parametrize("kind", ["BoundedGate", "KeyedGate"])
def test_a_gate_given_as_a_key_is_refused_with_how_to_pass_it(kind: str) -> None:
    # (keyed, gate) is almost surely a misplaced tuple element: (keyed, key), gate.
    tenants, openai = _gates()
    other = openai if kind == "BoundedGate" else KeyedGate(max_running=1, max_waiting=0, name="models")
    with pytest.raises(TypeError, match=rf"^admit_all\(\) takes no gate as a key: the {kind} ") as refused:
        admit_all((tenants, other))
    assert "admit_all((keyed_gate, key), gate)" in str(refused.value)
    assert DOCS in str(refused.value)


@pytest.mark.parametrize("given", [list, tuple])
def test_gates_in_a_list_are_refused_with_how_to_pass_them(given: type) -> None:
    gates = given(BoundedGate(max_running=1, max_waiting=0, name=name) for name in "ab")
    with pytest.raises(TypeError, match=r"^admit_all\(\) takes each gate as an argument") as refused:
        admit_all(gates)
    assert "admit_all(*gates)" in str(refused.value)


def test_a_gate_twice_is_refused() -> None:
    tenants, openai = _gates()
    with pytest.raises(ValueError, match=r"^'openai' appears twice in one admission"):
        admit_all(openai, openai)
    with pytest.raises(ValueError, match=r"^'tenant' appears twice"):
        admit_all((tenants, "a"), openai, (tenants, "b"))  # two keys of one keyed gate: no order


async def test_a_keyed_gates_own_gate_and_the_keyed_gate_are_one_family() -> None:
    tenants, _ = _gates()
    permit = tenants.try_admit("a")
    with pytest.raises(ValueError, match=r"^'tenant' appears twice"):
        admit_all(permit.gate, (tenants, "b"))
    permit.release()


def test_opposite_orders_are_refused_before_anything_is_taken() -> None:
    tenants, openai = _gates()
    admit_all((tenants, "a"), openai)
    admit_all((tenants, "b"), openai)  # same families, same order: fine
    with pytest.raises(ValueError, match="takes 'openai' before 'tenant' here") as refused:
        admit_all(openai, (tenants, "a"))
    assert "can deadlock" in str(refused.value)


def test_opposite_orders_through_other_gates_are_refused() -> None:
    a, b, c = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "abc")
    admit_all(a, b)
    admit_all(b, c)
    with pytest.raises(ValueError, match="takes 'c' before 'a'"):
        admit_all(c, a)
    admit_all(a, c)  # consistent with a -> b -> c
    admit_all(a, b, c)


def test_the_refusal_names_the_pair_that_contradicts_the_order() -> None:
    a, b, c = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "abc")
    admit_all(b, c)
    with pytest.raises(ValueError, match="can deadlock") as refused:
        admit_all(a, c, b)
    assert str(refused.value) == (
        "admit_all() takes 'c' before 'b' here, but another admission took 'b' before 'c' (directly or "
        "through other gates): taking gates in opposite orders can deadlock, so use one order everywhere, "
        f"the scarce shared gate last (see {DOCS})"
    )


def test_a_gate_twice_is_refused_with_the_reason() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="g")
    with pytest.raises(ValueError, match="appears twice") as refused:
        admit_all(gate, gate)
    assert str(refused.value) == (
        "'g' appears twice in one admission; each gate (each keyed gate, with one key) may be taken "
        f"once: take it once, or make two gates (see {DOCS})"
    )


def test_an_order_checked_once_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "ab")
    admit_all(a, b)

    def must_not_run(*args: object) -> None:
        raise AssertionError("the fast path should have answered")

    monkeypatch.setattr(_order, "_check", must_not_run)
    admit_all(a, b)
    with pytest.raises(AssertionError):
        admit_all(b, a)  # not seen before: checked (and refused, were it not for the patch)


async def test_gates_admitted_again_in_one_order_are_still_checked_as_what_they_are() -> None:
    tenants, openai = _gates()
    admit_all((tenants, "acme"), openai)
    with pytest.raises(TypeError, match="takes a KeyedGate with its key"):
        admit_all(tenants, openai)  # type: ignore[arg-type]  # the keyed gate itself is no step
    async with tenants.admit("acme") as held:
        key_gate = held.gate  # a key's gate is its keyed gate's family, even when seen again
        admit_all(key_gate, openai)
        admit_all(key_gate, openai)
        with pytest.raises(ValueError, match="can deadlock"):
            admit_all(openai, (tenants, "other"))
    lone = BoundedGate(max_running=1, max_waiting=0, name="lone")
    admit_all(openai, lone)
    admit_all(openai, lone)
    with pytest.raises(ValueError, match="takes 'lone' before 'openai'"):
        admit_all(lone, openai)
    with pytest.raises(ValueError, match=r"priority must be >= 0 and < 1"):
        admit_all(openai, lone, priority=1)  # a sequence found again still checks its arguments


def test_the_order_check_visits_each_gate_once_however_many_paths_lead_to_it() -> None:
    # A ladder of 40 diamonds has 2**40 paths from top to bottom; the check must not walk them.
    class Family:
        def __init__(self, name: str) -> None:
            self.name = name

    rungs = [(Family(f"a{i}"), Family(f"b{i}")) for i in range(41)]
    for upper, lower in itertools.pairwise(rungs):
        for first in upper:
            for then in lower:
                _order.check_order([first, then])
    top = Family("top")
    _order.check_order([top, rungs[0][0]])  # is top reachable from the ladder? every rung is visited
    with pytest.raises(ValueError, match="can deadlock"):
        _order.check_order([rungs[-1][1], rungs[0][0]])


def test_a_refused_order_leaves_no_edge_behind() -> None:
    a, b, c = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "abc")
    admit_all(b, c)
    with pytest.raises(ValueError, match="takes 'c' before 'b'"):
        admit_all(a, c, b)  # a -> c would be new, c -> b contradicts: neither is kept
    admit_all(c, a)  # possible only if the refused a -> c was not recorded


# -- seed 004, L05: tenant A saturated, tenant B keeps its own max_inflight --------------------


async def test_l05_a_saturated_tenant_never_delays_another() -> None:
    # Seed 004's tenant layer: max_inflight 5, queue_max 50, queue_timeout_sec 30.
    tenants: KeyedGate[str] = KeyedGate(max_running=5, max_waiting=50, name="tenant")
    loop = asyncio.get_running_loop()
    starts: dict[str, list[float]] = {"A": [], "B": []}

    async def request(tenant: str) -> str:
        try:
            async with tenants.admit(tenant, timeout=30):
                starts[tenant].append(loop.time())
                await asyncio.sleep(10)
        except QueueFull:
            return "rejected"
        except QueueExpired:
            return "expired"
        except Late:
            return "late"
        return "completed"

    flood = [asyncio.create_task(request("A")) for _ in range(200)]
    await asyncio.sleep(1)
    assert (live_gate(tenants, "A").running, live_gate(tenants, "A").waiting) == (5, 50)
    begin = loop.time()
    others = await asyncio.gather(*(request("B") for _ in range(5)))
    assert others == ["completed"] * 5
    assert starts["B"] == [begin] * 5  # all five at once: B waited for nothing
    outcomes = await asyncio.gather(*flood)
    # 5 run at once and 50 queue; 10 s each against 30 s from arrival: two rounds complete, the
    # third finishes at its deadline (late), and the rest of the queue expires.
    assert outcomes.count("rejected") == 145
    assert outcomes.count("completed") == 10
    assert outcomes.count("late") == 5
    assert outcomes.count("expired") == 40
    b = tenants.stats().total
    assert (b.running, b.waiting) == (0, 0)


async def test_l05_through_a_shared_provider_taken_last() -> None:
    # Tenant, then provider: A's overflow waits at A's gate holding nothing, so A never holds more
    # than its 5 provider slots and B runs at once.
    tenants: KeyedGate[str] = KeyedGate(max_running=5, max_waiting=50, name="tenant")
    openai = BoundedGate(max_running=8, max_waiting=100, name="openai")
    loop = asyncio.get_running_loop()
    b_started: list[float] = []

    async def request(tenant: str) -> None:
        try:
            async with admit_all((tenants, tenant), openai, timeout=30):
                if tenant == "B":
                    b_started.append(loop.time())
                await asyncio.sleep(10)
        except (QueueFull, QueueExpired, Late):
            pass

    flood = [asyncio.create_task(request("A")) for _ in range(100)]
    await asyncio.sleep(1)
    assert (openai.running, openai.waiting) == (5, 0)
    begin = loop.time()
    await asyncio.gather(*(request("B") for _ in range(3)))
    assert b_started == [begin] * 3
    await asyncio.gather(*flood)
    assert openai.stats().peak_running == 8


async def test_taking_the_provider_first_would_let_a_saturated_tenant_starve_the_others() -> None:
    # Why the order is the caller's to choose, and why the provider goes last: here A's overflow
    # holds provider slots idle while it queues at its own tenant gate, and B cannot get one.
    tenants: KeyedGate[str] = KeyedGate(max_running=5, max_waiting=50, name="tenant")
    openai = BoundedGate(max_running=8, max_waiting=100, name="openai")

    async def request(tenant: str) -> None:
        async with admit_all(openai, (tenants, tenant), timeout=100):
            await asyncio.sleep(10)

    flood = [asyncio.create_task(request("A")) for _ in range(20)]
    await asyncio.sleep(1)
    assert (openai.running, tenants.running) == (8, 5)  # three provider slots held by A's queue
    with pytest.raises(QueueExpired):
        async with admit_all(openai, (tenants, "B"), timeout=5):
            pass
    await asyncio.gather(*flood, return_exceptions=True)


def test_gates_that_died_neither_constrain_nor_vouch_for_new_ones() -> None:
    import gc

    for _ in range(20):  # new gates often reuse the addresses of the ones just freed
        a, b = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "ab")
        admit_all(a, b)
        del a, b
        gc.collect()
        c, d = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "cd")
        admit_all(d, c)  # no order recorded for these yet
        with pytest.raises(ValueError, match="takes 'c' before 'd'"):
            admit_all(c, d)


# -- what is forwarded to every step, and what a refusal leaves -----------------------------------


async def test_timing_attributes_are_none_until_entered() -> None:
    combined = admit_all(BoundedGate(max_running=1, max_waiting=0), timeout=5)
    assert (combined.arrival, combined.started, combined.ended) == (None, None, None)
    assert combined.deadline == math.inf  # until arrival starts the budget
    assert combined.permits == ()


async def test_a_step_whose_gate_cannot_be_made_gives_back_the_gates_taken() -> None:
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    models: KeyedGate[str] = KeyedGate(
        max_running=1, max_waiting=0, name="model", overrides=lambda key: GateLimits(0, 0)
    )
    combined = admit_all(openai, (models, "gpt"))
    with pytest.raises(ValueError, match="max_running must be >= 1"):
        await combined.__aenter__()
    assert combined.status is Status.CANCELLED
    assert [p.gate.name for p in combined.permits] == ["openai"]
    assert combined.permits[0].status is Status.CANCELLED
    assert (openai.running, openai.stats().cancelled, openai.stats().admitted) == (0, 1, 0)


async def test_the_call_arrives_with_its_first_step_and_takes_its_deadline() -> None:
    first, second = (BoundedGate(max_running=1, max_waiting=0, name=name) for name in "ab")
    await asyncio.sleep(1)  # arrival at 1, so that a budget and a deadline differ
    async with admit_all(first, second, timeout=30, max_wait=5) as combined:
        step = combined.permits[0]
        assert (combined.arrival, combined.deadline) == (step.arrival, step.deadline) == (1, 31)
        assert step.max_wait == 5
        assert combined.permits[1].deadline == 31


@pytest.mark.parametrize("failure", ["gate cannot be made", "cancelled before arriving"])
async def test_a_first_step_that_never_arrives_still_times_the_call(failure: str) -> None:
    models: KeyedGate[str] = KeyedGate(
        max_running=1, max_waiting=0, name="model", overrides=lambda key: GateLimits(0, 0)
    )
    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")
    await asyncio.sleep(1)
    combined = admit_all((models, "gpt") if failure == "gate cannot be made" else openai, timeout=30)

    async def enter() -> None:
        if failure == "cancelled before arriving":
            asyncio.current_task().cancel()  # type: ignore[union-attr]
        await combined.__aenter__()

    with pytest.raises(ValueError if failure == "gate cannot be made" else asyncio.CancelledError):
        await asyncio.create_task(enter())
    assert (combined.arrival, combined.deadline, combined.ended) == (1, 31, 1)
    assert combined.status is Status.CANCELLED
    assert openai.stats().arrived == 0


async def test_the_priority_is_every_step_s() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=1, max_waiting=2, name="tenant", priorities=2)
    openai = BoundedGate(max_running=1, max_waiting=2, name="openai", priorities=2)
    holder = openai.try_admit()
    calm = asyncio.create_task(openai.admit(priority=1).__aenter__())
    await asyncio.sleep(0)
    urgent = asyncio.create_task(admit_all((tenants, "acme"), openai, priority=0).__aenter__())
    await asyncio.sleep(0)
    assert live_gate(tenants, "acme").running == 1
    holder.release()  # the urgent request jumps the calm one at the provider
    combined = await urgent
    assert not calm.done()
    combined.release()
    (await calm).release()


async def test_late_names_the_last_gate_with_its_limits_and_counts() -> None:
    tenants: KeyedGate[str] = KeyedGate(max_running=2, max_waiting=3, name="tenant")
    models = BoundedGate(max_running=4, max_waiting=5, name="model")
    openai = BoundedGate(max_running=6, max_waiting=7, name="openai")
    other = openai.try_admit()
    await asyncio.sleep(1)  # arrival at 1, so that a sum and a difference of times differ
    with pytest.raises(Late) as late:
        async with admit_all((tenants, "acme"), models, openai, timeout=2):
            await asyncio.sleep(3)
    error = late.value
    assert error.gate == "openai"
    assert (error.max_running, error.max_waiting, error.running, error.waiting) == (6, 7, 1, 0)
    assert (error.waited, error.elapsed, error.deadline, error.overrun) == (0, 3, 3, 1)
    other.release()


async def test_a_refusal_at_a_later_step_reports_the_whole_call_s_wait() -> None:
    tenants, openai = _gates()
    loop = asyncio.get_running_loop()
    tenant_holder = tenants.try_admit("acme")
    openai_holder = openai.try_admit()
    loop.call_later(4, tenant_holder.release)
    fillers = [asyncio.create_task(openai.admit().__aenter__()) for _ in range(2)]
    with pytest.raises(QueueFull) as full:
        async with admit_all((tenants, "acme"), openai, timeout=30):
            pytest.fail("must not start")
    assert (full.value.gate, full.value.waited, full.value.elapsed) == ("openai", 4, 4)
    for filler in fillers:
        filler.cancel()
    await asyncio.gather(*fillers, return_exceptions=True)
    openai_holder.release()


async def test_a_combined_permit_entered_again_is_refused_and_keeps_its_gates() -> None:
    tenants, openai = _gates()
    async with admit_all((tenants, "acme"), openai) as permit:
        with pytest.raises(RuntimeError, match=r"is already entered; a permit is entered once"):
            async with permit:
                raise AssertionError("a second body ran on one set of slots")
        assert (permit.status, openai.running, tenants.running) == (Status.RUNNING, 1, 1)
    assert (permit.status, openai.running, tenants.running) == (Status.COMPLETED, 0, 0)


def test_the_order_graph_forgets_gates_once_they_are_collected() -> None:
    import gc
    import tracemalloc

    openai = BoundedGate(max_running=1, max_waiting=0, name="openai")

    def churn(pairs: int) -> None:
        for i in range(pairs):  # a short-lived gate per request in front of one shared provider
            admit_all(BoundedGate(max_running=1, max_waiting=0, name=f"session{i}"), openai)
        gc.collect()
        probe = BoundedGate(max_running=1, max_waiting=0, name="probe")
        admit_all(probe, openai)  # the first check after the collection unlinks the dead

    churn(100)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        churn(20_000)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(
        stat.size_diff
        for stat in after.compare_to(before, "filename")
        if stat.traceback[0].filename == _order.__file__
    )
    assert kept < 20_000, kept  # bytes: what 20,000 pairs left behind, once collected (it was megabytes)


def test_unrelated_gates_do_not_share_a_graph() -> None:
    a, b, c, d = (BoundedGate(max_running=1, max_waiting=0, name=n) for n in "abcd")
    admit_all(a, b)
    admit_all(c, d)
    assert _order._nodes[a].after == {_order._nodes[b]}
    assert _order._nodes[b].before == {_order._nodes[a]}
    assert not _order._nodes[b].after  # nothing of c and d is reachable from a and b
    assert _order._nodes[c].after == {_order._nodes[d]}


# -- a client that leaves while the call waits (disconnect) ---------------------------------------


@pytest.mark.parametrize("where", ["first", "later"])
async def test_a_client_that_leaves_while_queued_is_disconnected_at_every_gate(where: str) -> None:
    tenants, openai = _gates()
    held = tenants.try_admit("acme") if where == "first" else openai.try_admit()
    combined = admit_all((tenants, "acme"), openai, timeout=60)
    task = asyncio.create_task(combined.__aenter__())
    await asyncio.sleep(1)
    assert combined.status is Status.QUEUED
    combined.disconnect()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _status(combined) is Status.DISCONNECTED
    assert all(p.status is Status.DISCONNECTED for p in combined.permits)
    assert len(combined.permits) == (1 if where == "first" else 2)
    held.release()
    assert (tenants.running, tenants.waiting, openai.running, openai.waiting) == (0, 0, 0, 0)
    tenant_stats, openai_stats = tenants.stats().total, openai.stats()
    assert (tenant_stats.disconnected, tenant_stats.cancelled) == (1, 0)
    assert (openai_stats.disconnected, openai_stats.cancelled) == (0 if where == "first" else 1, 0)


async def test_a_disconnect_in_the_turn_the_last_slot_is_handed_over_passes_it_on() -> None:
    tenants, openai = _gates()
    held = openai.try_admit()
    combined = admit_all((tenants, "acme"), openai, timeout=60)
    task = asyncio.create_task(combined.__aenter__())
    await asyncio.sleep(1)
    held.release()  # the slot is handed to the combined permit's step in this turn...
    combined.disconnect()  # ...and its client leaves before it resumed
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _status(combined) is Status.DISCONNECTED
    assert (tenants.running, openai.running) == (0, 0)
    assert (tenants.stats().total.disconnected, openai.stats().disconnected) == (1, 1)


async def test_disconnect_does_nothing_unless_the_call_waits() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai, timeout=60)
    combined.disconnect()  # not arrived: nothing to leave
    assert combined.status is Status.NEW
    async with combined:
        combined.disconnect()  # running: a running request is aborted, not disconnected
        assert _status(combined) is Status.RUNNING
    assert _status(combined) is Status.COMPLETED


async def test_gates_held_for_a_request_held_back_further_in_are_given_back_unused() -> None:
    tenants, openai = _gates()
    combined = admit_all((tenants, "acme"), openai, timeout=60)
    await combined.__aenter__()
    combined._give_back_unused()
    assert _status(combined) is Status.DISCONNECTED
    assert (tenants.running, openai.running) == (0, 0)
    assert (tenants.stats().total.admitted, openai.stats().admitted) == (0, 0)
    assert (tenants.stats().total.disconnected, openai.stats().disconnected) == (1, 1)
    await combined.__aexit__(None, None, None)  # nothing left to release
    assert openai.stats().completed == 0
