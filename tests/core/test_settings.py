"""Every refused setting, with its message pinned."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import pytest

from boundedgate._core import (
    MAX_COUNT,
    check_at_least,
    check_cost,
    check_count,
    check_deadline,
    check_flag,
    check_fraction,
    check_max_running,
    check_max_waiting,
    check_name,
    check_number,
    check_positive,
    check_priorities,
    check_priority,
    check_remaining,
    check_timeout,
)


class Index:
    """An int-like that is not an int (as numpy's integers are)."""

    def __index__(self) -> int:
        return 3


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, r"^max_running must be an int, not bool$"),
        (False, TypeError, r"^max_running must be an int, not bool$"),
        (0, ValueError, r"^max_running must be >= 1, got 0$"),
        (-3, ValueError, r"^max_running must be >= 1, got -3$"),
        (1.5, TypeError, r"^max_running must be an int, got 1.5$"),
        (2.0, TypeError, r"^max_running must be an int, got 2.0$"),
        (math.nan, TypeError, r"^max_running must be an int, got nan$"),
        (math.inf, TypeError, r"^max_running must be an int, got inf$"),
        ("2", TypeError, r"^max_running must be an int, got '2'$"),
        (None, TypeError, r"^max_running must be an int, got None$"),
    ],
)
def test_max_running_refused(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_max_running(value)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (True, TypeError, r"^max_waiting must be an int, not bool$"),
        (-1, ValueError, r"^max_waiting must be >= 0, got -1$"),
        (0.5, TypeError, r"^max_waiting must be an int, got 0.5$"),
        (math.nan, TypeError, r"^max_waiting must be an int, got nan$"),
        (math.inf, TypeError, r"^max_waiting must be an int, got inf \(use None for an unbounded queue\)$"),
    ],
)
def test_max_waiting_refused(value: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_max_waiting(value)


def test_accepted_limits() -> None:
    assert check_max_running(1) == 1
    assert check_max_running(Index()) == 3
    assert check_max_waiting(0) == 0
    assert check_max_waiting(None) is None
    assert type(check_max_running(Index())) is int


@pytest.mark.parametrize(
    ("check", "value", "expected"),
    [
        (check_timeout, None, math.inf),
        (check_timeout, 0, 0.0),
        (check_timeout, 2, 2.0),
        (check_timeout, math.inf, math.inf),
        (check_deadline, None, math.inf),
        (check_deadline, -5, -5.0),
        (check_deadline, 1.25, 1.25),
    ],
)
def test_accepted_seconds(check: object, value: object, expected: float) -> None:
    assert check(value) == expected  # type: ignore[operator]


def test_name() -> None:
    assert check_name("openai") == "openai"
    with pytest.raises(TypeError, match=r"^name must be a str, got 3$"):
        check_name(3)


def test_a_priority_is_any_class_from_the_most_urgent_to_the_last() -> None:
    assert [check_priority(p, 3) for p in range(3)] == [0, 1, 2]
    for bad in (-1, 3):
        message = rf"^priority must be >= 0 and < 3 \(the gate's priorities\), got {bad}$"
        with pytest.raises(ValueError, match=message):
            check_priority(bad, 3)


# -- adversarial numbers: huge ints, flags, the provider's remaining counts ----------------------


@pytest.mark.parametrize(
    ("check", "value", "error", "message"),
    [
        (
            check_max_running,
            10**400,
            ValueError,
            r"^max_running must be <= \d+ \(None for no limit on running\)",
        ),
        (check_max_running, 10**5000, ValueError, r", got an int of 16610 bits$"),  # unprintable in full
        (check_max_running, -(10**5000), ValueError, r"^max_running must be >= 1, got an int of 16610 bits$"),
        (check_max_running, sys.maxsize + 1, ValueError, r"^max_running must be <= "),
        (
            check_max_waiting,
            10**400,
            ValueError,
            r"^max_waiting must be <= \d+ \(None for an unbounded queue\)",
        ),
        (check_priorities, 10**400, ValueError, r"^priorities must be <= "),
        (check_timeout, 10**400, ValueError, r"^timeout is out of range"),
        (check_cost, 10**5000, ValueError, r"^cost is out of range"),
    ],
    ids=[
        "C 10**400",
        "C 10**5000",
        "C -10**5000",
        "C maxsize+1",
        "Q 10**400",
        "priorities",
        "timeout",
        "cost",
    ],
)
def test_a_huge_int_is_refused_by_name_never_with_an_overflow(
    check: Callable[[object], object], value: int, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check(value)


def test_the_largest_count_is_no_limit_and_accepted() -> None:
    assert check_max_running(MAX_COUNT) == sys.maxsize
    assert check_count("keep_idle", MAX_COUNT) == MAX_COUNT


@pytest.mark.parametrize("value", [1, 0, None, "yes", 1.0, Index()])
def test_a_flag_is_true_or_false_and_nothing_else(value: object) -> None:
    with pytest.raises(TypeError, match=r"^evict must be True or False, got "):
        check_flag("evict", value)
    assert check_flag("evict", True) is True
    assert check_flag("evict", False) is False


@pytest.mark.parametrize(
    ("check", "value", "error", "message"),
    [
        (check_positive, 0, ValueError, r"^x must be a finite number > 0, got 0$"),
        (check_positive, math.nan, ValueError, r"^x must be a finite number > 0, got nan$"),
        (check_positive, math.inf, ValueError, r"^x must be a finite number > 0, got inf$"),
        (check_positive, 10**400, ValueError, r"^x is out of range"),
        (check_positive, True, TypeError, r"^x must be a number, got True$"),
        (check_fraction, 1, ValueError, r"^x must be in \(0, 1\), got 1$"),
        (check_fraction, "0.5", TypeError, r"^x must be a number, got '0.5'$"),
        (check_number, math.nan, ValueError, r"^x must not be NaN$"),
        (check_number, None, TypeError, r"^x must be a number, got None$"),
    ],
)
def test_numbers_refused(
    check: Callable[[str, object], float], value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        check("x", value)


def test_at_least() -> None:
    assert check_at_least("tolerance", 1, 1) == 1.0
    with pytest.raises(ValueError, match=r"^tolerance must be a finite number >= 1, got 0.5$"):
        check_at_least("tolerance", 0.5, 1)


@pytest.mark.parametrize(
    ("remaining", "error", "message"),
    [
        ({1: 3}, TypeError, r"^remaining's keys must be resource names \(str"),
        ({"requests": "3"}, TypeError, r"^remaining\['requests'\] must be a number, got '3'$"),
        ({"requests": True}, TypeError, r"^remaining\['requests'\] must be a number"),
        ({"requests": -1}, ValueError, r"^remaining\['requests'\] must be >= 0, got -1$"),
        ({"requests": math.nan}, ValueError, r"^remaining\['requests'\] must not be NaN$"),
        ({"requests": 10**400}, ValueError, r"^remaining\['requests'\] is out of range"),
        ([("requests", 3)], TypeError, r"^remaining must be a mapping"),
    ],
)
def test_remaining_quotas_refused(remaining: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_remaining(remaining)


def test_remaining_quotas_accepted() -> None:
    assert check_remaining({"requests": 3, "tokens": math.inf}) == {"requests": 3.0, "tokens": math.inf}
