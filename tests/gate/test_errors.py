"""The typed errors: stable codes, named fields made by keyword, HTTP mapping, pickling."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boundedgate import (
    BoundedGate,
    DeadlineCut,
    Evicted,
    GateError,
    GateUnavailable,
    Infeasible,
    Late,
    QueueExpired,
    QueueFull,
    RateLimited,
)

#: The fields every refusal has, as a gate named "openai" with C=2 and Q=3 would fill them.
COMMON: dict[str, Any] = {
    "gate": "openai",
    "max_running": 2,
    "max_waiting": 3,
    "running": 2,
    "waiting": 3,
    "waited": 0.0,
    "elapsed": 0.0,
}

#: Each class with the fields of one of its instances, by name: its own after the common ones.
FIELDS: dict[type[GateError], dict[str, Any]] = {
    QueueFull: {**COMMON, "recent_run": 4.0, "paused_for": 0.0},
    RateLimited: {**COMMON, "waiting": 0, "limit": "rpm", "retry_after": 59.2},
    Infeasible: {**COMMON, "predicted_wait": 6.0, "budget": 5.0},
    QueueExpired: {
        **COMMON,
        "waiting": 1,
        "waited": 1.5,
        "elapsed": 1.5,
        "deadline": 11.5,
        "recent_run": None,
        "paused_for": 0.0,
    },
    Evicted: {**COMMON, "waited": 0.5, "elapsed": 0.5, "priority": 2, "recent_run": 1.0, "paused_for": 0.0},
    Late: {
        **COMMON,
        "max_waiting": None,
        "running": 1,
        "waiting": 0,
        "waited": 0.5,
        "elapsed": 9.0,
        "deadline": 8.0,
        "overrun": 1.0,
    },
    DeadlineCut: {
        **COMMON,
        "max_waiting": None,
        "running": 1,
        "waiting": 0,
        "waited": 0.5,
        "elapsed": 8.0,
        "deadline": 8.0,
        "overrun": 0.0,
    },
    GateUnavailable: {**COMMON, "waited": 0.25, "elapsed": 1.5, "reason": "unreachable"},
}

FULL = QueueFull(**FIELDS[QueueFull])
EXPIRED = QueueExpired(**FIELDS[QueueExpired])
LATE = Late(**FIELDS[Late])
EVERY = [cls(**fields) for cls, fields in FIELDS.items()]


def _ids(error: GateError) -> str:
    return type(error).__name__


def test_codes_and_statuses() -> None:
    assert [(e.code, e.http_status) for e in EVERY] == [
        ("queue_full", 503),
        ("rate_limited", 429),
        ("infeasible", 503),
        ("queue_expired", 503),
        ("evicted", 503),
        ("late", 504),
        ("cut", 504),
        ("gate_unavailable", 503),
    ]


@pytest.mark.parametrize("error", EVERY, ids=_ids)
def test_every_field_is_a_named_attribute_made_by_keyword(error: GateError) -> None:
    fields = FIELDS[type(error)]
    assert {name: getattr(error, name) for name in fields} == fields
    assert error.args == ()  # the fields are not positional args: nothing is read by index


@pytest.mark.parametrize("cls", list(FIELDS), ids=lambda cls: cls.__name__)
def test_fields_are_keyword_only(cls: type[GateError]) -> None:
    with pytest.raises(TypeError, match=r"positional argument"):
        cls(*FIELDS[cls].values())  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", list(FIELDS), ids=lambda cls: cls.__name__)
def test_a_missing_or_unknown_field_is_refused(cls: type[GateError]) -> None:
    fields = dict(FIELDS[cls])
    del fields["gate"]
    with pytest.raises(TypeError, match=r"'gate'"):
        cls(**fields)
    with pytest.raises(TypeError, match=r"'pace'"):
        cls(**FIELDS[cls], pace=1.0)  # type: ignore[call-arg]


def test_a_queue_refusal_may_leave_out_its_pace_and_pause() -> None:
    for cls, extra in ((QueueFull, {}), (QueueExpired, {"deadline": 1.0}), (Evicted, {"priority": 1})):
        error = cls(**COMMON, **extra)
        assert (error.recent_run, error.paused_for, error.retry_after) == (None, 0.0, None)


def test_retry_after_estimate() -> None:
    # paused_for + (waiting + 1) * recent_run / max_running
    assert FULL.retry_after == (3 + 1) * 4.0 / 2
    assert EXPIRED.retry_after is None
    assert LATE.retry_after is None
    paused = QueueFull(**{**FIELDS[QueueFull], "paused_for": 60.0})
    assert paused.retry_after == 60 + (3 + 1) * 4.0 / 2
    no_pace = QueueExpired(**{**FIELDS[QueueExpired], "paused_for": 42.0})
    assert no_pace.retry_after == 42.0
    assert RateLimited(**FIELDS[RateLimited]).retry_after == 59.2
    assert Infeasible(**FIELDS[Infeasible]).retry_after == 6.0  # the predicted wait


def test_messages() -> None:
    assert str(FULL) == "gate 'openai' [running 2/2, waiting 3/3] is full"
    assert str(EXPIRED) == (
        "deadline passed after waiting 1.500s in the queue of gate 'openai' [running 2/2, waiting 1/3]"
    )
    assert str(LATE) == (
        "finished 1.000s past its deadline, 9.000s after arrival, "
        "at gate 'openai' [running 1/2, waiting 0/unbounded]"
    )
    assert repr(FULL) == "QueueFull(\"gate 'openai' [running 2/2, waiting 3/3] is full\")"


def test_a_rate_limiter_without_slots_says_its_running_count_is_unbounded() -> None:
    fields = {**FIELDS[RateLimited], "max_running": None, "running": 0}
    assert "[running 0/unbounded, " in str(RateLimited(**fields))


def test_to_dict_is_a_json_body_for_a_503() -> None:
    body = FULL.to_dict()
    assert json.loads(json.dumps(body)) == body
    assert body == {
        "code": "queue_full",
        "error": str(FULL),
        "gate": "openai",
        "max_running": 2,
        "max_waiting": 3,
        "running": 2,
        "waiting": 3,
        "waited": 0.0,
        "elapsed": 0.0,
        "retry_after": 8.0,
    }
    assert FULL.headers() == {"Retry-After": "8"}
    quick = QueueFull(**{**COMMON, "waiting": 0, "max_waiting": 0, "recent_run": 0.01})
    assert quick.headers() == {"Retry-After": "1"}


@pytest.mark.parametrize("error", EVERY, ids=_ids)
def test_to_dict_names_each_value_as_its_field(error: GateError) -> None:
    body = error.to_dict()
    assert (body.pop("code"), body.pop("error")) == (error.code, str(error))
    assert body == {name: getattr(error, name) for name in body}
    assert set(body) <= {*FIELDS[type(error)], "retry_after"}


@pytest.mark.parametrize("error", EVERY, ids=_ids)
def test_errors_survive_pickle_and_copy(error: GateError) -> None:
    error.add_note("seen at the edge")
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is type(error)
        assert {name: getattr(clone, name) for name in FIELDS[type(error)]} == FIELDS[type(error)]
        assert (str(clone), clone.to_dict(), clone.headers()) == (
            str(error),
            error.to_dict(),
            error.headers(),
        )
        assert clone.__notes__ == ["seen at the edge"]


_NUMBER = st.floats(min_value=0, max_value=1e6, allow_nan=False)
_LIMIT = st.one_of(st.none(), st.integers(min_value=1, max_value=10**6))
_COMMON = {
    "gate": st.text(max_size=20),
    "max_running": _LIMIT,
    "max_waiting": st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
    "running": st.integers(min_value=0, max_value=10**6),
    "waiting": st.integers(min_value=0, max_value=10**6),
    "waited": _NUMBER,
    "elapsed": _NUMBER,
}
_OWN: dict[type[GateError], dict[str, st.SearchStrategy[Any]]] = {
    QueueFull: {"recent_run": st.one_of(st.none(), _NUMBER), "paused_for": _NUMBER},
    RateLimited: {"limit": st.text(max_size=10), "retry_after": _NUMBER},
    Infeasible: {"predicted_wait": _NUMBER, "budget": _NUMBER},
    QueueExpired: {"deadline": _NUMBER, "recent_run": st.one_of(st.none(), _NUMBER), "paused_for": _NUMBER},
    Evicted: {
        "priority": st.integers(min_value=0, max_value=99),
        "recent_run": st.one_of(st.none(), _NUMBER),
        "paused_for": _NUMBER,
    },
    Late: {"deadline": _NUMBER, "overrun": _NUMBER},
    DeadlineCut: {"deadline": _NUMBER, "overrun": _NUMBER},
    GateUnavailable: {"reason": st.sampled_from(["unreachable", "waiter_lease_lost"])},
}


@given(
    st.sampled_from(list(_OWN)).flatmap(
        lambda cls: st.tuples(st.just(cls), st.fixed_dictionaries({**_COMMON, **_OWN[cls]}))
    )
)
def test_any_error_round_trips_through_pickle_with_its_fields(
    made: tuple[type[GateError], dict[str, Any]],
) -> None:
    cls, fields = made
    error = cls(**fields)
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is cls
    assert {name: getattr(clone, name) for name in fields} == fields
    assert str(clone) == str(error)
    assert clone.retry_after == error.retry_after


def test_the_base_class_is_not_raised_itself() -> None:
    with pytest.raises(TypeError, match=r"^GateError is a base class; raise one of its subclasses$"):
        GateError(**COMMON)


async def test_a_refusal_during_a_pause_names_the_pause_as_a_field() -> None:
    gate = BoundedGate(max_running=1, max_waiting=0, name="openai")
    held = gate.try_admit()
    with pytest.raises(QueueFull) as not_paused:
        gate.try_admit()
    assert not_paused.value.paused_for == 0.0
    gate.pause(42)
    with pytest.raises(QueueFull) as paused:
        gate.try_admit()
    assert (paused.value.gate, paused.value.paused_for, paused.value.recent_run) == ("openai", 42.0, None)
    assert paused.value.retry_after == 42.0
    held.release()
