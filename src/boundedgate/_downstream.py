"""Refusals from downstream (a provider's 429s), counted for the exports and the alert on them.

The gate cannot see what the provider answers; the code that calls the provider can. It calls
:func:`downstream_refused` for each refusal it gets, and the metrics exports read the counts at
collection time (``boundedgate_downstream_refusals_total`` in Prometheus). The alert that the
downstream 429s "do not go back to zero" is written on that counter. The counter serves the
exports alone, so they are where it is public: ``boundedgate.prometheus.downstream_refused`` and
``boundedgate.otel.downstream_refused`` are this function; the HTTP transport calls it itself.
"""

from __future__ import annotations

import threading

__all__ = ("downstream_refusals", "downstream_refused")

_lock = threading.Lock()
_counts: dict[tuple[str, int], int] = {}


def downstream_refused(gate: str, status: int = 429) -> None:
    """Count one refusal (HTTP ``status``, 429 by default) from the service behind gate ``gate``.

    Safe from any thread. An HTTP transport calls it for every 429 it reads; so can your code.
    """
    if not isinstance(gate, str):
        raise TypeError(f"gate must be a gate's name (a str), got {gate!r}")
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int, got {status!r}")
    with _lock:
        _counts[gate, status] = _counts.get((gate, status), 0) + 1


def downstream_refusals() -> dict[tuple[str, int], int]:
    """The counts so far, by (gate name, HTTP status): a copy."""
    with _lock:
        return dict(_counts)
