"""Reading the command line's quantities: durations, rates, distributions, lists of limits.

Durations always carry a unit (``250ms``, ``2s``, ``1.5m``, ``1h``): a bare number would be
milliseconds in a script and seconds in an SDK, and a planner must not guess.
"""

from __future__ import annotations

import argparse
import math
import re

from ..sim import Exponential, Fixed, LogNormal
from ..sim._workload import Distribution

__all__ = ("distribution", "duration_ms", "limits", "optional_duration_ms", "rate", "whole_duration_ms")

_UNITS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_DURATION = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m|h)")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration_ms(text: str) -> float:
    """``250ms``, ``2s``, ``1.5m``, ``1h`` in milliseconds (> 0)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a number and a unit, e.g. 250ms, 2s, 5m"
        )
    value = float(match[1]) * _UNITS[match[2]]
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be > 0")
    return value


def whole_duration_ms(text: str) -> int:
    """A duration rounded to whole milliseconds (at least 1)."""
    return max(1, round(duration_ms(text)))


def optional_duration_ms(text: str) -> int | None:
    """A duration in whole milliseconds, or ``none``."""
    return None if text.strip().lower() == "none" else whole_duration_ms(text)


def rate(text: str) -> float:
    """Requests per second: ``20``, ``20/s``, ``1200/m``, ``72000/h``."""
    number, _, per = text.strip().partition("/")
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if per not in ("", *_PER) or not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a rate: give requests per second, e.g. 20, 20/s, 1200/m"
        )
    return value / _PER[per or "s"]


def distribution(text: str) -> Distribution:
    """A time distribution: ``2s`` or ``fixed:2s``, ``exp:2s`` (its mean), ``lognormal:2s,20s`` (mean, p99).

    The lognormal's parameters may be named: ``lognormal:mean=2s,p99=20s``.
    """
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "fixed", kind
    kind = kind.lower()
    params = [part.strip() for part in rest.split(",")] if rest else []
    named: dict[str, float] = {}
    positional: list[float] = []
    for param in params:
        key, eq, value = param.partition("=")
        if eq:
            named[key.strip().lower()] = duration_ms(value)
        else:
            positional.append(duration_ms(param))
    try:
        if kind == "fixed" and len(params) == 1 and positional:
            return Fixed(positional[0])
        if kind in ("exp", "exponential") and len(params) == 1:
            return Exponential(positional[0] if positional else named["mean"])
        if kind == "lognormal" and len(params) == 2:
            values = dict(zip(("mean", "p99"), positional, strict=False)) | named
            return LogNormal(values["mean"], values["p99"])
    except KeyError:
        pass
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a distribution: give 2s, fixed:2s, exp:2s (the mean) "
        "or lognormal:2s,20s (mean, p99)"
    )


def limits(text: str) -> list[int | None]:
    """A comma-separated list of limits: whole numbers >= 0, or ``none`` for unbounded."""
    values: list[int | None] = []
    for part in text.split(","):
        value = part.strip().lower()
        if value == "none":
            values.append(None)
        elif value.isdigit():
            values.append(int(value))
        else:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give whole numbers >= 0 separated by commas, or none for unbounded"
            )
    return values
