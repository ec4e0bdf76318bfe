"""Validation of every number a caller hands the gate: the only place settings are checked.

Type first, then value, with short messages that name the setting. Booleans are refused where an
int is needed (``True`` is an ``int`` to Python, never a limit to us), and so are floats, NaN and
infinities: a limit is a count.
"""

from __future__ import annotations

import functools
import math
import operator
from fractions import Fraction

__all__ = (
    "check_cost",
    "check_deadline",
    "check_jump_share",
    "check_max_pause",
    "check_max_running",
    "check_max_wait",
    "check_max_waiting",
    "check_name",
    "check_pause",
    "check_priorities",
    "check_priority",
    "check_timeout",
)


def _shown(value: object) -> str:
    """``value`` for a message: its repr, but an int too long to read (or to print) by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return repr(value)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None


def check_max_running(value: object) -> int:
    """Return ``value`` as the number of running slots, an int >= 1."""
    count = _count("max_running", value)
    if count < 1:
        raise ValueError(f"max_running must be >= 1, got {count}")
    return count


def check_max_waiting(value: object) -> int | None:
    """Return ``value`` as the number of queue places: an int >= 0, or None for no bound.

    ``0`` means no waiting room at all, not "unbounded" as in ``asyncio.Queue(maxsize=0)``.
    """
    if value is None:
        return None
    if isinstance(value, float) and math.isinf(value):
        raise TypeError("max_waiting must be an int, got inf (use None for an unbounded queue)")
    count = _count("max_waiting", value)
    if count < 0:
        raise ValueError(f"max_waiting must be >= 0, got {count}")
    return count


def _float(name: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range (its repr could run to thousands of digits)
        raise ValueError(f"{name} is out of range: beyond a float's (about ±1.8e308)") from None


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    seconds = _float(name, value)
    if math.isnan(seconds):
        raise ValueError(f"{name} must not be NaN")
    return seconds


def check_timeout(value: object) -> float:
    """Return a relative budget in seconds (>= 0; ``inf`` or None means no deadline)."""
    if value is None:
        return math.inf
    seconds = _seconds("timeout", value)
    if seconds < 0:
        raise ValueError(f"timeout must be >= 0, got {value!r}")
    return seconds


def check_max_wait(value: object) -> float:
    """Return a queue budget in seconds from arrival (>= 0; None means as long as the deadline allows)."""
    if value is None:
        return math.inf
    seconds = _seconds("max_wait", value)
    if seconds < 0:
        raise ValueError(f"max_wait must be >= 0, got {value!r}")
    return seconds


def check_deadline(value: object) -> float:
    """Return an absolute deadline on the gate's clock (None means no deadline)."""
    if value is None:
        return math.inf
    return _seconds("deadline", value)


def check_pause(value: object, name: str = "seconds") -> float:
    """Return the length of a pause in seconds: a finite number >= 0 (a pause always ends).

    ``name`` is the argument's, for the message: ``seconds`` of ``pause()``, ``retry_after`` of
    ``signal()``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {_shown(value)}")
    seconds = _float(name, value)
    if not 0 <= seconds < math.inf:
        raise ValueError(
            f"{name} must be a finite number >= 0, got {_shown(value)}: give the seconds until the "
            "provider's reset (a pause always ends; pause again to extend it)"
        )
    return seconds


def check_max_pause(value: object) -> float:
    """Return the longest pause a provider's signal may set, in seconds: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"max_pause must be a number of seconds, got {_shown(value)}")
    seconds = _float("max_pause", value)
    if not 0 <= seconds < math.inf:
        raise ValueError(
            f"max_pause must be a finite number >= 0, got {_shown(value)}: the longest a provider's "
            "reset may pause the gate (a longer reset is obeyed that long, then the gate tries again)"
        )
    return seconds


def check_name(value: object) -> str:
    """Return the gate's name, a str."""
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, got {value!r}")
    return value


def check_priorities(value: object) -> int:
    """Return the number of priority classes, an int >= 1."""
    count = _count("priorities", value)
    if count < 1:
        raise ValueError(f"priorities must be >= 1, got {count}")
    return count


def check_priority(value: object, classes: int) -> int:
    """Return a request's priority class, an int in ``range(classes)`` (0 is the most urgent)."""
    priority = _count("priority", value)
    if not 0 <= priority < classes:
        raise ValueError(f"priority must be >= 0 and < {classes} (the gate's priorities), got {priority}")
    return priority


def check_jump_share(value: object) -> Fraction:
    """Return the share of starts that may jump the queue: a number in [0, 1), as an exact fraction.

    A float is the simplest fraction (denominator at most 1000) that rounds to it, else its exact
    binary value: ``0.2`` is 1/5, ``1 / 3`` is 1/3, ``0.9995`` is what the float holds, below 1.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise TypeError(f"jump_share must be a number, got {value!r}")
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("jump_share must not be NaN")
    if not 0 <= value < 1:
        raise ValueError(f"jump_share must be >= 0 and < 1, got {value!r}")
    return _fraction(value)


@functools.lru_cache(maxsize=64)
def _fraction(value: float | Fraction) -> Fraction:
    # A float stands for the simplest fraction (denominator at most 1000) that rounds to it, as 0.2
    # for 1/5, else for its exact value: never for a fraction nearby, which could be 1 (0.9995 is
    # nearer 1 than 999/1000) and lose the no-starvation bound. Making a Fraction costs more than
    # the rest of a gate put together; keyed gates make many.
    exact = Fraction(value)
    if isinstance(value, float):
        simple = exact.limit_denominator(1000)
        if float(simple) == value:
            return simple
    return exact


def check_cost(value: object) -> float:
    """Return a request's rate cost: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"cost must be a number, got {value!r}")
    cost = _float("cost", value)
    if not (cost >= 0 and math.isfinite(cost)):
        raise ValueError(f"cost must be a finite number >= 0, got {value!r}")
    return cost
