"""Publishing a gate's limits: a JSON document (a ``/capabilities`` endpoint) and the IETF fields.

The document names each gate's limits, ``null`` for unlimited, so that a client can refuse early
on its side what the server would refuse (a client SDK can). The ``RateLimit-Policy`` and
``RateLimit`` fields follow draft-ietf-httpapi-ratelimit-headers: a concurrency limit is a policy
whose quota unit is ``"concurrency"`` (``r`` is the slots free after this request started), a rate
limit is a policy with its quota ``q`` (the bucket's burst) over its window ``w`` (seconds to fill
it), and ``r`` its balance.

For a ``RedisGate`` both count the cluster, not this process: the running and waiting counts are
the cluster's as this process last heard them from Redis (``RedisGate.cluster_running``: every
reply to this process's admissions, releases and syncs carries them), so publishing them costs no
round trip. An admitted response's fields are as recent as its own admission, at least.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._core import RateLimit
from .._driver import KeyedGate
from ._types import Receive, Scope, Send

__all__ = ("chain_ratelimit_fields", "limits_app", "limits_document", "ratelimit_fields")


def _rate_limit(limit: RateLimit) -> dict[str, Any]:
    return {
        "name": limit.name,
        "unit": limit.unit,
        "per_second": limit.rate,
        "burst": limit.burst,
        "window_seconds": limit.burst / limit.rate,
    }


def _pending(max_running: int | None, max_waiting: int | None) -> int | None:
    return None if max_running is None or max_waiting is None else max_running + max_waiting


def limits_document(gates: Mapping[str, Any], *, live: bool = False) -> dict[str, Any]:
    """The limits of ``gates`` (by the name to publish them under), as a JSON-ready document.

    ::

        {"limits": {"openai": {"max_running": 50, "max_waiting": 100, "max_pending": 150,
                               "rate_limits": [], "per_key": false}}}

    ``max_pending`` is the pending limit (running plus queued: what a client
    may have outstanding). Each is ``None`` (JSON ``null``) when unlimited. For a
    :class:`KeyedGate` the limits are those of each key's gate (``per_key: true``; overrides are
    not listed). With ``live=True`` the document also carries the ``running`` and ``waiting``
    counts now: load that the public may not need to see, so it is off by default. A
    ``RedisGate``'s are the cluster's, as this process last heard them from Redis (every reply to
    its admissions, releases and syncs brings them; older while it is idle), not this process's.

    Args:
        gates: Each a :class:`BoundedGate`, :class:`KeyedGate` or ``RedisGate``.
        live: Add the current counts.
    """
    limits: dict[str, Any] = {}
    for name, gate in gates.items():
        entry: dict[str, Any] = {
            "max_running": gate.max_running,
            "max_waiting": gate.max_waiting,
            "max_pending": _pending(gate.max_running, gate.max_waiting),
            "rate_limits": [_rate_limit(limit) for limit in _rate_limits_of(gate)],
            "per_key": isinstance(gate, KeyedGate),
        }
        if live:
            entry["running"], entry["waiting"] = _counts(gate)
        limits[name] = entry
    return {"limits": limits}


def _counts(gate: Any) -> tuple[int, int]:
    """Running and waiting: a cluster gate's for the whole cluster (as last heard, no round trip)."""
    running = getattr(gate, "cluster_running", None)
    if running is None:
        return gate.running, gate.waiting
    return running, gate.cluster_waiting


def _rate_limits_of(gate: Any) -> tuple[RateLimit, ...]:
    if isinstance(gate, KeyedGate):
        return gate._rate_limits
    return tuple(getattr(gate, "rate_limits", ()))


def limits_app(gates: Mapping[str, Any], *, live: bool = False, max_age: int = 60) -> _LimitsApp:
    """An ASGI app that answers ``GET`` (and ``HEAD``) with :func:`limits_document`.

    Mount it beside the API (``app.mount("/limits", limits_app({...}))``, or as the app of one
    route). The document is cached by clients for ``max_age`` seconds (the limits change rarely);
    with ``live=True`` it carries the current counts and is never cached. Any other method gets 405.
    """
    return _LimitsApp(dict(gates), live, max_age)


class _LimitsApp:
    """See :func:`limits_app`."""

    __slots__ = ("_gates", "_live", "_max_age")

    def __init__(self, gates: dict[str, Any], live: bool, max_age: int) -> None:
        if isinstance(max_age, bool) or not isinstance(max_age, int) or max_age < 0:
            raise ValueError(f"max_age must be an int >= 0, got {max_age!r}")
        self._gates = gates
        self._live = live
        self._max_age = max_age

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise RuntimeError(
                f"the limits document is served over HTTP, not {scope['type']!r}: "
                "give it an HTTP route (app.add_route('/limits', limits_app(...)))"
            )
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            await send({"type": "http.response.start", "status": 405, "headers": [(b"allow", b"GET, HEAD")]})
            await send({"type": "http.response.body", "body": b""})
            return
        data = json.dumps(limits_document(self._gates, live=self._live)).encode()
        cache = b"no-store" if self._live else b"max-age=%d" % self._max_age
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"cache-control", cache),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else data})


def _sf_string(text: str) -> str:
    # A structured-field string (RFC 8941): printable ASCII, with \ and " escaped.
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in text)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ratelimit_fields(gate: Any) -> list[tuple[bytes, bytes]]:
    """The ``RateLimit-Policy`` and ``RateLimit`` header fields describing ``gate`` now.

    One policy per limit: the concurrency limit (when running is limited) and each rate limit, each
    named after the gate (``"openai"``, ``"openai/rpm"``...). The quota ``q`` of the concurrency
    policy is ``max_running`` and ``r`` the slots free now (for a ``RedisGate``, free in the
    whole cluster as this process last heard from Redis); a rate limit's ``q`` is its burst,
    ``w`` the seconds to refill it from empty, ``r`` the whole tokens in the bucket now and ``t``
    the seconds until it is full again. Its unit is ``"request"``, or ``"tokens"`` for a limit
    counted in tokens (the draft's registry has no unit for LLM tokens yet).
    """
    policies: list[str] = []
    remaining: list[str] = []
    name = gate.name
    if gate.max_running is not None:
        label = _sf_string(name)
        policies.append(f'{label};q={gate.max_running};qu="concurrency"')
        running, _ = _counts(gate)
        remaining.append(f"{label};r={max(0, gate.max_running - running)}")
    limits = _rate_limits_of(gate)
    balances = gate.stats().tokens if limits else ()
    if limits and len(balances) == len(limits):  # a RedisGate's balances live in Redis: not shown
        for limit, balance in zip(limits, balances, strict=True):
            label = _sf_string(f"{name}/{limit.name}")
            unit = "request" if limit.unit == "requests" else "tokens"  # "tokens": not a registered unit
            window = max(1, math.ceil(limit.burst / limit.rate))
            policies.append(f'{label};q={math.floor(limit.burst)};qu="{unit}";w={window}')
            missing = max(0.0, limit.burst - balance)
            reset = math.ceil(missing / limit.rate)
            remaining.append(f"{label};r={max(0, math.floor(balance))};t={reset}")
    if not policies:
        return []
    return [
        (b"ratelimit-policy", ", ".join(policies).encode()),
        (b"ratelimit", ", ".join(remaining).encode()),
    ]


def chain_ratelimit_fields(gates: Sequence[Any]) -> list[tuple[bytes, bytes]]:
    """:func:`ratelimit_fields` of every gate of a chain, in its order, as one field of each kind.

    Each gate's policies are named after it (``"tenant/acme"``, ``"openai"``), so a client sees
    every limit its request went through: the tightest is the one to pace by.
    """
    policies: list[bytes] = []
    remaining: list[bytes] = []
    for gate in gates:
        for name, value in ratelimit_fields(gate):
            (policies if name == b"ratelimit-policy" else remaining).append(value)
    if not policies:
        return []
    return [(b"ratelimit-policy", b", ".join(policies)), (b"ratelimit", b", ".join(remaining))]
