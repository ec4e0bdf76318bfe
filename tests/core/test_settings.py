"""Every refused setting, with its message pinned."""

from __future__ import annotations

import math

import pytest

from boundedgate._core import (
    check_deadline,
    check_max_running,
    check_max_waiting,
    check_name,
    check_priority,
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
