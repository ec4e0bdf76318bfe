"""Reading the command line's quantities: durations, rates, distributions, costs, limits, key mixes.

Durations always carry a unit (``250ms``, ``2s``, ``1.5m``, ``1h``): a bare number would be
milliseconds in a script and seconds in an SDK, and a planner must not guess. Costs and quotas are
plain numbers (tokens, requests).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._core import GateLimits
from ..sim import Exponential, Fixed, LogNormal, drift, steps
from ..sim._script import MAX_MS
from ..sim._text import human_ms
from ..sim._workload import Distribution

__all__ = (
    "Capacity",
    "amount",
    "capacity",
    "cost",
    "distribution",
    "duration_ms",
    "key_mix",
    "limits",
    "optional_duration_ms",
    "override",
    "quotas",
    "rate",
    "running_limits",
    "whole_duration_ms",
    "whole_number",
)

_UNITS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_DURATION = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|m|h)")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def whole_number(option: str) -> Callable[[str], int]:
    """A reader of a whole number >= 1 for ``option``, naming it when the text is not one."""

    def read(text: str) -> int:
        digits = text.strip()
        if not (digits.isascii() and digits.isdecimal()) or len(digits) > 30 or int(digits) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: {option} is a whole number >= 1")
        return int(digits)

    return read


def duration_ms(text: str) -> float:
    """``250ms``, ``2s``, ``1.5m``, ``1h`` in milliseconds (> 0, and at most a script's latest time)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give a number and a unit, e.g. 250ms, 2s, 5m"
        )
    value = float(match[1]) * _UNITS[match[2]]
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: a duration must be > 0")
    if value > MAX_MS:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration is at most {MAX_MS:g}ms (about 31,700 years)")
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


def amount(text: str) -> float:
    """A plain number > 0 (a quota, a burst, a cost): ``60``, ``1.5``, ``8e4``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number > 0")
    return value


def _distribution(text: str, value: Callable[[str], float], examples: str) -> Distribution:
    # `2s` or `fixed:2s`, `exp:2s`, `lognormal:2s,20s` or `lognormal:mean=2s,p99=20s`, with the
    # parameters read by `value`.
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "fixed", kind
    kind = kind.lower()
    params = [part.strip() for part in rest.split(",")] if rest else []
    named: dict[str, float] = {}
    positional: list[float] = []
    for param in params:
        key, eq, number = param.partition("=")
        if eq:
            named[key.strip().lower()] = value(number)
        else:
            positional.append(value(param))
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
    raise argparse.ArgumentTypeError(f"{text!r} is not a distribution: give {examples}")


def distribution(text: str) -> Distribution:
    """A time distribution: ``2s`` or ``fixed:2s``, ``exp:2s`` (its mean), ``lognormal:2s,20s`` (mean, p99).

    The lognormal's parameters may be named: ``lognormal:mean=2s,p99=20s``.
    """
    return _distribution(text, duration_ms, "2s, fixed:2s, exp:2s (the mean) or lognormal:2s,20s (mean, p99)")


def cost(text: str) -> Distribution:
    """A cost in tokens: ``2000``, ``exp:2000`` (its mean), ``lognormal:1200,6000`` (mean, p99)."""
    return _distribution(
        text, amount, "2000, fixed:2000, exp:2000 (the mean) or lognormal:1200,6000 (mean, p99), in tokens"
    )


def quotas(text: str) -> list[float | None]:
    """A comma-separated list of quotas per minute: numbers > 0, or ``none`` for no such limit."""
    values: list[float | None] = []
    for part in text.split(","):
        if part.strip().lower() == "none":
            values.append(None)
            continue
        try:
            values.append(amount(part))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give quotas per minute > 0 separated by commas, or none for no limit"
            ) from None
    return values


def running_limits(text: str) -> list[int | None]:
    """A comma-separated list of running limits: whole numbers >= 1, or ``none`` for no limit."""
    try:
        values = limits(text)
    except argparse.ArgumentTypeError:
        values = [0]
    if any(value is not None and value < 1 for value in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: max_running values are whole numbers >= 1, or none for no limit"
        )
    return values


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


def override(text: str) -> tuple[str, GateLimits]:
    """A key's limits, ``KEY=C,Q``: C a whole number >= 1 and Q one >= 0, each or ``none``.

    The key is everything before the last ``=``, as it is (empty: the default key).
    """
    key, sep, rest = text.rpartition("=")
    parts = [part.strip().lower() for part in rest.split(",")]
    if sep and len(parts) == 2:
        c, q = parts
        if (c == "none" or (c.isdigit() and int(c) >= 1)) and (q == "none" or q.isdigit()):
            return key, GateLimits(None if c == "none" else int(c), None if q == "none" else int(q))
    raise argparse.ArgumentTypeError(
        f"{text!r}: give KEY=C,Q, the running slots (>= 1) and queue places (>= 0) of KEY's gate, "
        "each a whole number or none; e.g. acme=4,10"
    )


def key_mix(text: str) -> dict[str, float]:
    """Keys and their weights: ``acme=3,globex=1`` (three requests in four are acme's)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        key, sep, weight = part.rpartition("=")
        try:
            value = float(weight)
        except ValueError:
            value = math.nan
        if not sep or not key.strip() or key.strip() in mix or not (value >= 0 and math.isfinite(value)):
            mix = {}
            break
        mix[key.strip()] = value
    if not mix or not sum(mix.values()) > 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give KEY=WEIGHT for each key, separated by commas, e.g. acme=3,globex=1 "
            "(three requests in four are acme's)"
        )
    return mix


@dataclass(frozen=True, slots=True)
class Capacity:
    """A provider's capacity K(t) as the command line gave it: a number, steps, or a drift (seconds)."""

    #: As given.
    text: str
    #: K at the start.
    initial: float
    #: ``(time, K)`` from which K is that, in time order (steps).
    changes: tuple[tuple[float, float], ...] = ()
    #: ``(end, over)``: K moves linearly from ``initial`` to ``end`` over ``over`` seconds (a drift).
    drift: tuple[float, float] | None = None

    def function(self) -> float | Callable[[float], float]:
        """The capacity as :class:`~boundedgate.sim.Provider` takes it."""
        if self.drift is not None:
            return drift(self.initial, self.drift[0], over=self.drift[1])
        if self.changes:
            return steps(self.initial, *self.changes)
        return self.initial

    def describe(self) -> str:
        """For people: ``K=20, 10 from 40.0s, 20 from 1m20s``."""
        if self.drift is not None:
            end, over = self.drift
            return f"K from {_k(self.initial)} to {_k(end)} over {human_ms(over * 1000)}, then {_k(end)}"
        changes = "".join(f", {_k(k)} from {human_ms(at * 1000)}" for at, k in self.changes)
        return f"K={_k(self.initial)}{changes}"

    def to_dict(self) -> dict[str, Any]:
        """For JSON: as given, and as steps or a drift."""
        if self.drift is not None:
            start = {"start": self.initial, "end": self.drift[0], "over_seconds": self.drift[1]}
            return {"given": self.text, "drift": start}
        return {"given": self.text, "steps": [[0.0, self.initial], *([at, k] for at, k in self.changes)]}


def _k(value: float) -> str:
    return f"{value:g}"


_CAPACITY_FORMS = (
    "give K (a number > 0), steps K,T:K,... (20,40s:10,80s:20: 20, 10 from 40s, 20 again from 80s), "
    "or a drift drift:START,END,OVER (drift:10,30,2m: from 10 to 30 over two minutes)"
)


def capacity(text: str) -> Capacity:
    """A provider's capacity: ``20``, steps ``20,40s:10,80s:20``, or a drift ``drift:10,30,2m``."""
    given = text.strip()
    kind, sep, rest = given.partition(":")
    try:
        if sep and kind.strip().lower() == "drift":
            start, end, over = (part.strip() for part in rest.split(","))
            return Capacity(given, amount(start), drift=(amount(end), duration_ms(over) / 1000))
        first, *others = given.split(",")
        changes = []
        for part in others:
            at, sep, k = part.partition(":")
            if not sep:
                raise ValueError
            changes.append((duration_ms(at) / 1000, amount(k)))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: {_CAPACITY_FORMS}") from None
    try:
        initial = amount(first)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: {_CAPACITY_FORMS}") from None
    times = [at for at, _ in changes]
    if times != sorted(set(times)):
        raise argparse.ArgumentTypeError(f"{text!r}: the steps' times must increase")
    return Capacity(given, initial, tuple(changes))
