"""What the metrics exports share: weak references to gates, their snapshots, the histograms.

Imports neither OpenTelemetry nor prometheus_client: ``boundedgate.otel`` and
``boundedgate.prometheus`` are thin layers over this module.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ._core import OUTCOMES, GateStatistics, Outcome, RequestRecord
from ._driver import BoundedGate, KeyedGate

__all__ = (
    "GENAI_BUCKETS",
    "HISTOGRAMS",
    "REFUSALS",
    "Buckets",
    "Gates",
    "HistogramSpec",
    "Snapshot",
    "refusal",
)

#: The GenAI semantic conventions' advisory buckets (seconds): powers of two from 10 ms to 82 s.
GENAI_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip

#: The outcomes that are refusals: the caller got one of the gate's errors and never ran.
REFUSALS: tuple[Outcome, ...] = tuple(o for o in OUTCOMES if o.error_code is not None and not o.ran)

Gate = BoundedGate | KeyedGate[Any]


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One histogram fed by the records: its name (OpenTelemetry's), what it measures, and how."""

    name: str
    description: str
    #: The value a record gives it, or None when the record has nothing to give.
    value: Callable[[RequestRecord], float | None]
    #: It carries the outcome as an attribute.
    by_outcome: bool


def _queued(record: RequestRecord) -> float | None:
    return None if record.outcome.at_arrival else record.waited


HISTOGRAMS: tuple[HistogramSpec, ...] = (
    HistogramSpec(
        "boundedgate.request.time_in_queue",
        "Time requests spent in the gate's queue, by how they left it.",
        _queued,
        True,
    ),
    HistogramSpec(
        "boundedgate.request.lease.duration",
        "Time requests held a running slot.",
        lambda record: record.ran,
        True,
    ),
    HistogramSpec(
        "boundedgate.request.duration",
        "Time from a request's arrival at the gate to its outcome.",
        lambda record: record.end_to_end,
        True,
    ),
    HistogramSpec(
        "boundedgate.stream.time_to_first_chunk",
        "Time from a streamed request's start to the stream's first item.",
        lambda record: record.first_chunk,
        False,
    ),
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One gate's numbers at one collection."""

    name: str
    stats: GateStatistics
    #: Keys with a gate now (None for a plain gate).
    keys: int | None
    #: The names of its rate limits, in the order of ``stats.tokens`` (none for a keyed gate).
    limits: tuple[str, ...]


def refusal(export: str, given: object) -> TypeError:
    """Why ``export`` (``"GateCollector"``, ``"instrument"``) takes no ``given``, and what to do instead."""
    kind = type(given)
    if kind.__name__ == "RedisGate" and kind.__module__.startswith("boundedgate.redis"):
        return TypeError(
            f"{export}() takes in-process gates (BoundedGate, KeyedGate): a RedisGate has no observer "
            "hook to export yet; read this process's gate.stats() and the cluster's await "
            'gate.cluster_stats() instead (see docs/cluster.md, "What RedisGate does not have")'
        )
    if isinstance(given, tuple) and len(given) == 2 and isinstance(given[0], KeyedGate):
        return TypeError(
            f"{export}() exports a KeyedGate whole (all its keys together, one series per outcome): "
            f"pass the KeyedGate itself, not a (KeyedGate, key) pair"
        )
    if isinstance(given, list | tuple | set | frozenset):
        return TypeError(
            f"{export}() takes each gate as an argument, {export}(*gates), not a {kind.__name__} of them"
        )
    return TypeError(
        f"{export}() takes BoundedGate and KeyedGate objects, got {given!r} "
        '(see docs/metrics.md, "Metrics, traces and logs")'
    )


class Gates:
    """The gates an export reads, held weakly: a gate nobody else holds drops out of the export.

    Args:
        gates: The gates, each a ``BoundedGate`` or a ``KeyedGate``.
        export: The export's name, for the error that refuses anything else (see :func:`refusal`).
    """

    def __init__(self, gates: tuple[Gate, ...], export: str) -> None:
        for gate in gates:
            if not isinstance(gate, BoundedGate | KeyedGate):
                raise refusal(export, gate)
        self._refs = [weakref.ref(gate) for gate in gates]

    def alive(self) -> Iterator[Gate]:
        """The gates still alive."""
        self._refs = [ref for ref in self._refs if ref() is not None]
        for ref in self._refs:
            gate = ref()
            if gate is not None:
                yield gate

    def snapshots(self) -> Iterator[Snapshot]:
        """A snapshot of every gate still alive."""
        for gate in self.alive():
            if isinstance(gate, KeyedGate):
                # Each key has buckets of its own, whose balances add up to nothing: none exported.
                keyed = gate.stats()
                yield Snapshot(keyed.name, keyed.total, keyed.keys, ())
            else:
                limits = tuple(limit.name for limit in gate.rate_limits)
                yield Snapshot(gate.name, gate.stats(), None, limits)


class Buckets:
    """Cumulative histograms kept by label values: bucket counts, sum and count, for Prometheus."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # labels -> [counts per bound..., count above every bound], sum
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def add(self, labels: tuple[str, ...], value: float) -> None:
        """Count ``value`` under ``labels``."""
        entry = self.series.get(labels)
        if entry is None:
            entry = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        counts, total = entry
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                counts[index] += 1
                break
        else:
            counts[-1] += 1
        total[0] += value

    def cumulative(self, labels: tuple[str, ...]) -> tuple[list[tuple[str, int]], float]:
        """``(le, cumulative count)`` pairs ending at ``+Inf``, and the sum."""
        counts, total = self.series[labels]
        pairs: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), counts, strict=True):
            running += count
            pairs.append(("+Inf" if bound == math.inf else repr(bound), running))
        return pairs, total[0]
