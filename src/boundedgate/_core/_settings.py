"""Validation of every number a caller hands the gate: the only place settings are checked.

Type first, then value, with short messages that name the setting. Booleans are refused where an
int is needed (``True`` is an ``int`` to Python, never a limit to us), and so are floats, NaN and
infinities: a limit is a count. A count is at most :data:`MAX_COUNT` (beyond it, a limit is no
limit: None says so), a number of seconds or a factor at most a float's range (an int beyond it is
refused by name, not with an ``OverflowError`` from deep inside), and a flag is ``True`` or
``False``, nothing that merely has a truth value. Every public constructor and setter checks here,
in the code both builds share, before it changes anything: the compiled build reads the arguments
of its entry points as ``object`` (see ``_native.py``), so it never refuses one itself, and it
compiles this module with the core (every admission checks its arguments here), which declares
what it is given ``object`` too.
"""

from __future__ import annotations

import functools
import math
import operator
import sys
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

__all__ = (
    "MAX_COUNT",
    "check_at_least",
    "check_cost",
    "check_count",
    "check_deadline",
    "check_flag",
    "check_fraction",
    "check_jump_share",
    "check_max_pause",
    "check_max_running",
    "check_max_wait",
    "check_max_waiting",
    "check_name",
    "check_number",
    "check_pause",
    "check_positive",
    "check_priorities",
    "check_priority",
    "check_remaining",
    "check_timeout",
    "shown",
)

#: The largest count a setting takes (``sys.maxsize``): the core counts in machine-sized ints, and
#: ``max_running=sys.maxsize`` is already no limit on running.
MAX_COUNT: Final = sys.maxsize


def shown(value: object) -> str:
    """``value`` for a message: its repr, but what is too long to read (or to print) by its size.

    An int beyond 64 bits is given by its size in bits (a 5000-digit int cannot even be printed);
    a repr longer than a line is cut, with the type and length of the whole.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({type(value).__name__} of {len(text)} characters)"


def _count(name: str, value: object) -> int:
    if type(value) is int:  # an int itself (a bool is an int of another type)
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {shown(value)}") from None


def check_count(name: str, value: object, least: int = 0, none: str = "", most: int = MAX_COUNT) -> int:
    """Return ``value`` as the count ``name``: an int from ``least`` to ``most`` (:data:`MAX_COUNT`).

    ``none`` says, for a setting that takes None, what None means (the way out of a refused huge
    count): ``"no limit"``, ``"an unbounded queue"``.
    """
    count = _count(name, value)
    if count < least:
        raise ValueError(f"{name} must be >= {least}, got {shown(count)}")
    if count > most:
        instead = f" (None for {none})" if none else ""
        raise ValueError(f"{name} must be <= {most}{instead}, got {shown(count)}")
    return count


def check_max_running(value: object) -> int:
    """Return ``value`` as the number of running slots, an int >= 1 (at most :data:`MAX_COUNT`)."""
    return check_count("max_running", value, 1, "no limit on running")


def check_max_waiting(value: object) -> int | None:
    """Return ``value`` as the number of queue places: an int >= 0, or None for no bound.

    ``0`` means no waiting room at all, not "unbounded" as in ``asyncio.Queue(maxsize=0)``.
    """
    if value is None:
        return None
    if isinstance(value, float) and math.isinf(value):
        raise TypeError("max_waiting must be an int, got inf (use None for an unbounded queue)")
    return check_count("max_waiting", value, 0, "an unbounded queue")


def _float(name: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range (its repr could run to thousands of digits)
        raise ValueError(f"{name} is out of range: beyond a float's (about ±1.8e308)") from None


def _as_float(name: str, value: object, what: str) -> float:
    # A number (not a bool), as a float (NaN included): an int beyond a float's range refused.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {what}, got {shown(value)}")
    return _float(name, value)


def check_number(name: str, value: object, what: str = "a number") -> float:
    """Return ``value`` as the setting ``name``: a number (not a bool, not NaN) in a float's range.

    ``what`` names the kind for the message (``"a number of seconds"``).
    """
    number = _as_float(name, value, what)
    if math.isnan(number):
        raise ValueError(f"{name} must not be NaN")
    return number


def _seconds(name: str, value: object) -> float:
    return check_number(name, value, "a number of seconds")


def check_positive(name: str, value: object) -> float:
    """Return ``value`` as the setting ``name``: a finite number > 0, as a float."""
    number = _as_float(name, value, "a number")  # NaN fails the range
    if not 0 < number < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {shown(value)}")
    return number


def check_at_least(name: str, value: object, least: float) -> float:
    """Return ``value`` as the setting ``name``: a finite number >= ``least``, as a float."""
    number = _as_float(name, value, "a number")  # NaN fails the range
    if not least <= number < math.inf:
        raise ValueError(f"{name} must be a finite number >= {least:g}, got {shown(value)}")
    return number


def check_fraction(name: str, value: object) -> float:
    """Return ``value`` as the setting ``name``: a number strictly between 0 and 1, as a float."""
    number = _as_float(name, value, "a number")  # NaN fails the range
    if not 0 < number < 1:
        raise ValueError(f"{name} must be in (0, 1), got {shown(value)}")
    return number


def check_flag(name: str, value: object) -> bool:
    """Return ``value``, a flag: ``True`` or ``False`` (not 0, 1, None, or a string).

    Both builds refuse anything else here, in the pure code they share.
    """
    if value is not True and value is not False:
        raise TypeError(f"{name} must be True or False, got {shown(value)}")
    return value


def check_timeout(value: object) -> float:
    """Return a relative budget in seconds (>= 0; ``inf`` or None means no deadline)."""
    if value is None:
        return math.inf
    seconds = _seconds("timeout", value)
    if seconds < 0:
        raise ValueError(f"timeout must be >= 0, got {shown(value)}")
    return seconds


def check_max_wait(value: object) -> float:
    """Return a queue budget in seconds from arrival (>= 0; None means as long as the deadline allows)."""
    if value is None:
        return math.inf
    seconds = _seconds("max_wait", value)
    if seconds < 0:
        raise ValueError(f"max_wait must be >= 0, got {shown(value)}")
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
        raise TypeError(f"{name} must be a number of seconds, got {shown(value)}")
    seconds = _float(name, value)
    if not 0 <= seconds < math.inf:  # NaN fails it too
        raise ValueError(
            f"{name} must be a finite number >= 0, got {shown(value)}: give the seconds until the "
            "provider's reset (a pause always ends; pause again to extend it)"
        )
    return seconds


def check_max_pause(value: object) -> float:
    """Return the longest pause a provider's signal may set, in seconds: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"max_pause must be a number of seconds, got {shown(value)}")
    seconds = _float("max_pause", value)
    if not 0 <= seconds < math.inf:
        raise ValueError(
            f"max_pause must be a finite number >= 0, got {shown(value)}: the longest a provider's "
            "reset may pause the gate (a longer reset is obeyed that long, then the gate tries again)"
        )
    return seconds


def check_name(value: object) -> str:
    """Return the gate's name, a str."""
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, got {shown(value)}")
    return value


def check_priorities(value: object) -> int:
    """Return the number of priority classes, an int >= 1."""
    return check_count("priorities", value, 1)


def check_priority(value: object, classes: int, name: str = "priority") -> int:
    """Return a request's priority class, an int in ``range(classes)`` (0 is the most urgent)."""
    if type(value) is int and 0 <= value < classes:  # what nearly every call passes: no more to check
        return value
    priority = _count(name, value)
    if not 0 <= priority < classes:
        raise ValueError(
            f"{name} must be >= 0 and < {classes} (the gate's priorities), got {shown(priority)}"
        )
    return priority


def check_jump_share(value: object) -> Fraction:
    """Return the share of starts that may jump the queue: a number in [0, 1), as an exact fraction.

    A float is the simplest fraction (denominator at most 1000) that rounds to it, else its exact
    binary value: ``0.2`` is 1/5, ``1 / 3`` is 1/3, ``0.9995`` is what the float holds, below 1.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise TypeError(f"jump_share must be a number, got {shown(value)}")
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("jump_share must not be NaN")
    if not 0 <= value < 1:
        raise ValueError(f"jump_share must be >= 0 and < 1, got {shown(value)}")
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


def check_cost(value: object, name: str = "cost") -> float:
    """Return a request's rate cost: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {shown(value)}")
    cost = _float(name, value)
    if not (cost >= 0 and math.isfinite(cost)):
        raise ValueError(f"{name} must be a finite number >= 0, got {shown(value)}")
    return cost


def check_remaining(value: object) -> dict[str, float]:
    """Return a provider's remaining quotas: a mapping of resource names (str) to counts >= 0.

    As ``sync_rate_limits()`` takes them, e.g. ``{"requests": 3, "tokens": 1200}``.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"remaining must be a mapping of resource names to counts, got {shown(value)}")
    remaining: dict[str, float] = {}
    for resource, left in value.items():
        if not isinstance(resource, str):
            raise TypeError(
                f"remaining's keys must be resource names (str: 'requests', 'tokens', a rate "
                f"limit's name), got {shown(resource)}"
            )
        count = check_number(f"remaining[{resource!r}]", left)
        if count < 0:
            raise ValueError(f"remaining[{resource!r}] must be >= 0, got {shown(left)}")
        remaining[resource] = count
    return remaining
