"""The typed errors: stable codes, fields, HTTP mapping, pickling."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from boundedgate import GateError, Late, QueueExpired, QueueFull

FULL = QueueFull("openai", 2, 3, 2, 3, 0.0, 0.0, 4.0)
EXPIRED = QueueExpired("openai", 2, 3, 2, 1, 1.5, 1.5, 11.5, None)
LATE = Late("openai", 2, None, 1, 0, 0.5, 9.0, 8.0, 1.0)


def test_codes_and_statuses() -> None:
    assert [(e.code, e.http_status) for e in (FULL, EXPIRED, LATE)] == [
        ("queue_full", 503),
        ("queue_expired", 503),
        ("late", 504),
    ]


def test_common_fields() -> None:
    assert (FULL.gate, FULL.max_running, FULL.max_waiting, FULL.running, FULL.waiting) == (
        "openai",
        2,
        3,
        2,
        3,
    )
    assert (FULL.waited, FULL.elapsed) == (0.0, 0.0)
    assert (EXPIRED.waited, EXPIRED.elapsed, EXPIRED.deadline) == (1.5, 1.5, 11.5)
    assert (LATE.waited, LATE.elapsed, LATE.deadline, LATE.overrun) == (0.5, 9.0, 8.0, 1.0)
    assert LATE.retry_after is None


def test_retry_after_estimate() -> None:
    # (waiting + 1) * recent_run / max_running
    assert FULL.retry_after == (3 + 1) * 4.0 / 2
    assert EXPIRED.retry_after is None


def test_messages() -> None:
    assert str(FULL) == "gate 'openai' [running 2/2, waiting 3/3] is full"
    assert str(EXPIRED) == (
        "deadline passed after waiting 1.500s in the queue of gate 'openai' [running 2/2, waiting 1/3]"
    )
    assert str(LATE) == (
        "finished 1.000s past its deadline, 9.000s after arrival, "
        "at gate 'openai' [running 1/2, waiting 0/unbounded]"
    )


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
    assert QueueFull("g", 1, 0, 1, 0, 0.0, 0.0, 0.01).headers() == {"Retry-After": "1"}


@pytest.mark.parametrize("error", [FULL, EXPIRED, LATE])
def test_errors_survive_pickle_and_copy(error: GateError) -> None:
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is type(error)
        assert clone.args == error.args
        assert str(clone) == str(error)


def test_the_base_class_is_not_raised_itself() -> None:
    with pytest.raises(TypeError, match=r"^GateError is a base class; raise one of its subclasses$"):
        GateError("x")
