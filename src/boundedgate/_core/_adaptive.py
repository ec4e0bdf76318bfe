"""An adaptive concurrency limit: C learned from typed provider signals and time to first token.

Pure like the rest of the core: an :class:`AdaptiveLimit` is told the time and the samples, and
answers the C it wants; the asyncio driver and the simulator apply that answer with
``GateState.set_limits`` (and a rate-limit signal with ``GateState.pause``), so a planned run and a
real one make the same decisions.

Theory of operation
===================

Signals are typed, because a provider's refusals mean different things (see :data:`SIGNALS`):

``rate_limited``
    A 429 with a reset: the request rate or tokens per minute ran out. It says nothing about
    concurrency, so C is left alone; the gate pauses new starts until the reset instead.
``overloaded``
    A 503, a 529 or a provider's "overloaded": too much work in flight. C is cut
    multiplicatively, ``C = max(floor, C * decrease)``, at most once per window: a burst of
    overload answers from one episode costs one cut, not a collapse to the floor. Told how many
    requests were in flight when it came (the refused one among them), the controller knows the
    provider took one fewer: for ``remember_capacity`` windows C does not grow above that (a
    later signal meanwhile may only lower it), so the controller does not probe again at once
    above a capacity the provider has just shown. The cut itself stays multiplicative: a 529 at a
    moment of low load does not drop C to the few requests then in flight. And the capacity is
    forgotten on time, whatever comes meanwhile: gates that share a provider see each their own
    share of it, and must go on probing to converge to fair shares (held 30 windows and renewed by
    each signal, four gates stayed at the shares they started from).
``ignored``
    A client that went away, a 4xx other than 429, a cancellation: not congestion, no sample.

Samples are the latency of requests that ran to an answer: time to first token for a stream (it
measures the provider's queueing and prefill; the total time mostly measures the output's
length), else the run time. They are gathered in windows of at least ``window`` seconds, one
recent run time and ``min_samples`` samples.

A request's own size explains much of its latency: a prompt of 80,000 tokens takes seconds to
read before its first token, one of 1,000 a tenth of that, with no queueing at all. So a sample
that comes with its size (the cost the request declared, in tokens) is compared with requests of
its size: sizes fall in classes of a factor of two (1-2, 2-4... tokens; every sample without a
size in one class of its own), and each class has its baseline. At the end of a window, each
class's ``quantile`` (p90) of the window moves its baseline (the mean of the class's windows for
its first ``baseline_windows``, then an exponentially weighted mean over that many windows, in
the manner of Netflix's Gradient2 and Envoy's gradient controller: no single early window sets
it), and the window's ``recent`` is the ``quantile`` of each sample's latency over its class's
baseline. The gradient ``tolerance / recent`` is clamped to [0.5, 1] (without sizes: the
classic ``baseline * tolerance / recent`` of the window's quantile):

* a gradient below 1 (latency beyond ``tolerance`` times the baseline, the provider queues)
  while the gate was full cuts C to ``C * max(gradient, decrease)``;
* else, with no overload signal in the window and the gate's limit binding (its peak in flight
  reached C), C grows by ``increase`` or by ``increase_ratio`` of C, whichever is more, but never
  beyond ``max_limit_factor`` times the window's peak in flight: a gate whose callers, not its
  provider, are the bottleneck does not creep upward. A small C grows by one (additive: AIMD's
  fairness between gates sharing a provider); from ten up, by a tenth, so that C climbs back
  about as fast as the overload signals cut it once the provider's capacity comes back (windows
  last a run: by one a window, a C of 21 took over a minute to climb back to 38).

The defaults follow the anchors: a cut of 0.9 (Netflix's AIMD backoff; a deeper cut leaves slots
idle while C climbs back), growth by one or a tenth of C (the cut's own share: on the production
traces of docs/adaptive.md where the provider's capacity halves and comes back, it gave the
recommended configuration up to a fifth more answers on time than one a window on the conversation
windows, where C is 38 to 45, and as many on the code ones, where C is 9 to 16), a tolerance of 1.5
(Gradient2's), the p90 of windows of at least 1 s and 10 samples, a baseline over 20 windows,
growth capped at twice the peak in flight;
a capacity shown by a 529 remembered for 3 windows (on the production traces of docs/adaptive.md,
with feasible admission and a cut, it passed on a tenth fewer 529s for as many answers on time;
held ten windows, it gave up answers where K came back, and held for 30, gates sharing a provider
no longer converged).

C stays within [``floor``, ``ceiling``]. The baselines forget slowly, so a sustained slowdown of the
provider is not taken as the new normal within a few windows, and a baseline that is far above the
recent latency (more than twice) decays by 5 % a window (Gradient2's correction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ._settings import (
    check_at_least,
    check_count,
    check_fraction,
    check_max_pause,
    check_max_running,
    check_pause,
    check_positive,
    shown,
)

__all__ = ("MAX_PAUSE", "SIGNALS", "Adaptive", "AdaptiveLimit", "provider_pause")

#: The kinds of signal a controller understands, and what each does.
SIGNALS: dict[str, str] = {
    "rate_limited": "a rate-limit 429 with a reset: pause new starts until it, C unchanged",
    "overloaded": "a 503, 529 or 'overloaded': cut C multiplicatively, at most once per window",
    "ignored": "a client disconnect, a 4xx other than 429, a cancellation: not congestion",
}

#: The longest pause a provider's rate-limit signal gets by default, in seconds (``max_pause``): a
#: reset further away (a daily quota, a ``Retry-After: 1e15``) is obeyed this long, then the gate
#: tries again, and a 429 pauses it again.
MAX_PAUSE: Final = 300.0


def provider_pause(retry_after: object, max_pause: object = MAX_PAUSE) -> float:
    """The pause a provider's rate-limit signal sets: ``retry_after`` seconds, at most ``max_pause``.

    0 without a ``retry_after`` (the provider named no reset: no pause).

    Raises:
        TypeError, ValueError: ``retry_after`` or ``max_pause`` is not a finite number >= 0
            (an infinite reset is no reset: the gate would never start again).
    """
    longest = check_max_pause(max_pause)
    return 0.0 if retry_after is None else min(check_pause(retry_after, "retry_after"), longest)


@dataclass(frozen=True, slots=True)
class Adaptive:
    """The settings of an adaptive concurrency limit (every default documented here).

    Args:
        floor: The lowest C (>= 1).
        ceiling: The highest C.
        decrease: The factor an overload signal multiplies C by, in (0, 1).
        increase: What a clean, busy window adds to C at least.
        increase_ratio: What a clean, busy window adds to C as a share of C, when more than
            ``increase`` (0: ``increase`` alone, as classic AIMD).
        tolerance: How far the recent latency may exceed the baseline before C is cut (> 1).
        quantile: The quantile of a window's latencies compared with the baseline.
        window: The shortest window in seconds (a window also lasts one recent run time).
        min_samples: The fewest samples that close a window.
        baseline_windows: The span, in windows, of the baseline's moving average.
        max_limit_factor: C never grows beyond this multiple of the window's peak in flight.
        remember_capacity: For how many windows (of the current length, :meth:`AdaptiveLimit.span`)
            after an overload signal told with the requests in flight C does not grow above the
            capacity it showed (0: not at all). A later signal meanwhile may lower that capacity,
            not keep it longer.

    Every field is checked when the settings are made, and kept as the controller computes with it
    (the counts as ints, the others as floats).

    Raises:
        TypeError: A field that is not a number (a bool, a str), or a count that is not an int.
        ValueError: A field out of its range (above), infinite or NaN, an int beyond a float's range,
            a count beyond ``sys.maxsize``, or ``floor > ceiling``.
    """

    floor: int = 1
    ceiling: int = 256
    decrease: float = 0.9
    increase: float = 1.0
    increase_ratio: float = 0.1
    tolerance: float = 1.5
    quantile: float = 0.9
    window: float = 1.0
    min_samples: int = 10
    baseline_windows: int = 20
    max_limit_factor: float = 2.0
    remember_capacity: float = 3.0

    def __post_init__(self) -> None:
        # Every field checked before any is kept, each as the controller computes with it (a
        # float field as a float: an int beyond a float's range is refused here, not mid-window).
        checked = {
            "floor": check_count("floor", self.floor, 1),
            "ceiling": check_count("ceiling", self.ceiling, 1),
            "decrease": check_fraction("decrease", self.decrease),
            "increase": check_positive("increase", self.increase),
            "increase_ratio": check_at_least("increase_ratio", self.increase_ratio, 0),
            "tolerance": check_at_least("tolerance", self.tolerance, 1),
            "quantile": check_fraction("quantile", self.quantile),
            "window": check_positive("window", self.window),
            "min_samples": check_count("min_samples", self.min_samples, 1),
            "baseline_windows": check_count("baseline_windows", self.baseline_windows, 1),
            "max_limit_factor": check_positive("max_limit_factor", self.max_limit_factor),
            "remember_capacity": check_at_least("remember_capacity", self.remember_capacity, 0),
        }
        if checked["floor"] > checked["ceiling"]:
            raise ValueError(f"need floor <= ceiling, got {self.floor} and {self.ceiling}")
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def size_class(size: float | None) -> int | None:
    """The class of latencies a request of ``size`` is compared with: sizes within a factor of two.

    None for a request without a size (None or 0): those share a class of their own.
    """
    if size is None or not size > 0:
        return None
    return math.frexp(size)[1] - 1  # exact, where floor(log2()) rounds 2**53 - 1 up to 53


class AdaptiveLimit:
    """The controller of one gate's C: told signals and samples with the time, it answers C.

    ``limit`` is the C it wants now (an int); ``cuts``, ``suppressed`` (overload signals within a
    window of the last cut), ``grown`` and ``windows`` count what it did; ``baselines`` holds each
    size class's baseline (:func:`size_class`), ``capacity`` the capacity the latest overload
    signal showed while C is held to it (else None). Whoever sets the gate's C otherwise
    (``set_limits()`` by hand) tells it with :meth:`rebase`, so that its next decision starts from
    the C in force, not from its own.
    """

    __slots__ = (
        "_capacity_until",
        "_count",
        "_overloaded",
        "_peak",
        "_recent_run",
        "_samples",
        "_started",
        "_windows_seen",
        "baselines",
        "capacity",
        "cuts",
        "grown",
        "last_cut",
        "settings",
        "suppressed",
        "value",
        "windows",
    )

    def __init__(self, settings: Adaptive | None = None, initial: int = 8) -> None:
        if settings is not None and not isinstance(settings, Adaptive):
            raise TypeError(
                f"settings must be Adaptive settings (or None for the defaults), got {shown(settings)}"
            )
        self.settings = settings = Adaptive() if settings is None else settings
        #: The limit as a real number; C is its integer part (``initial`` held within the bounds).
        self.value = float(min(max(check_max_running(initial), settings.floor), settings.ceiling))
        #: The long moving baseline of each size class's latency (a class appears with its first window).
        self.baselines: dict[int | None, float] = {}
        self._windows_seen: dict[int | None, int] = {}
        #: The capacity the latest overload signal showed, while C is held to it (else None).
        self.capacity: int | None = None
        self._capacity_until = -math.inf
        self.last_cut = -math.inf
        self.cuts = 0
        self.suppressed = 0
        self.grown = 0
        self.windows = 0
        self._samples: list[tuple[int | None, float]] = []
        self._started: float | None = None
        self._peak = 0
        self._overloaded = False
        self._recent_run: float | None = None
        self._count = 0

    @property
    def limit(self) -> int:
        """The C the controller wants now."""
        return int(self.value)

    @property
    def baseline(self) -> float | None:
        """The baseline of the requests sampled without a size (None before their first window)."""
        return self.baselines.get(None)

    def span(self) -> float:
        """The window's shortest length in seconds: ``max(window, one recent run time)``."""
        recent = self._recent_run
        return self.settings.window if recent is None else max(self.settings.window, recent)

    def signal(self, kind: str, now: float, in_flight: int | None = None) -> int:
        """A provider's signal at ``now`` (one of :data:`SIGNALS`); returns the C wanted after it.

        Only ``overloaded`` changes C here (``rate_limited`` is a pause, which the gate applies).
        ``in_flight``: the requests running at the gate when it came, the refused one among them
        (None: not known); the provider took one fewer, a capacity C does not grow above for
        ``remember_capacity`` windows.

        Raises:
            ValueError: An unknown kind.
        """
        if kind not in SIGNALS:
            raise ValueError(f"unknown signal {kind!r}; expected one of {sorted(SIGNALS)}")
        if kind == "overloaded":
            self._overloaded = True
            settings = self.settings
            if in_flight is not None and in_flight >= 1:
                self._remember(max(settings.floor, in_flight - 1), now)
            if now - self.last_cut >= self.span():
                # From the C in force (its integer part): a fraction left over from growth must not
                # let a cut of a small C leave it where it was.
                self.value = max(float(settings.floor), self.limit * settings.decrease)
                self.last_cut = now
                self.cuts += 1
            else:
                self.suppressed += 1
        return self.limit

    def _remember(self, capacity: int, now: float) -> None:
        if self.capacity is not None and now < self._capacity_until:
            self.capacity = min(capacity, self.capacity)  # the provider took fewer still
            return
        self.capacity = capacity
        self._capacity_until = now + self.settings.remember_capacity * self.span()

    def rebase(self, limit: int) -> None:
        """C was set to ``limit`` elsewhere (``set_limits()``): decide from it from now on.

        A fraction of growth is kept while C is unchanged (the controller's own answer, applied);
        the window's samples, the baseline and the time of the last cut are kept.
        """
        if int(self.value) != limit:
            self.value = float(limit)

    def adopt(
        self, limit: int, now: float, since_cut: float | None = None, overload: bool | None = None
    ) -> None:
        """Take a C decided elsewhere: a cluster gate's, which every process's controller shares.

        ``limit`` becomes C (a fraction of growth is kept while C is unchanged); ``since_cut`` is
        how long ago that C was last cut (None: not known), so this controller's next cut waits a
        window from it; ``overload`` says that this process heard an overload signal, which the
        cluster applied as its cut (True, counted in ``cuts``) or suppressed (False).
        """
        self.rebase(limit)
        if since_cut is not None and now - since_cut > self.last_cut:
            self.last_cut = now - since_cut
        if overload is not None:
            self._overloaded = True
            if overload:
                self.cuts += 1
            else:
                self.suppressed += 1

    def sample(
        self, latency: float, ran: float, now: float, in_flight: int, size: float | None = None
    ) -> int:
        """One request that ran to an answer ended at ``now``; returns the C wanted after it.

        ``latency`` is its signal (time to first token, or run time), ``ran`` its run time (it
        sizes the window), ``in_flight`` the requests running at the gate as it ended, itself
        included, ``size`` what it declared (its cost in tokens; None or 0: no size).
        """
        recent = self._recent_run
        self._recent_run = ran if recent is None else recent + 0.2 * (ran - recent)
        if self._started is None:
            self._started = now
        self._samples.append((size_class(size), latency))
        if in_flight > self._peak:
            self._peak = in_flight
        if len(self._samples) >= self.settings.min_samples and now - self._started >= self.span():
            self._close(now)
        return self.limit

    def _close(self, now: float) -> None:
        settings = self.settings
        samples = self._samples
        peak = self._peak
        self.windows += 1
        if now >= self._capacity_until:
            self.capacity = None
        self._move_baselines(samples)
        baselines = self.baselines
        ratios = [latency / baselines[kind] for kind, latency in samples if baselines[kind] > 0]
        recent = _quantile(ratios, settings.quantile) if ratios else 0.0
        gradient = 1.0 if recent <= 0 else max(0.5, min(1.0, settings.tolerance / recent))
        value = self.value
        if gradient < 1.0 and peak >= int(value):
            if now - self.last_cut >= self.span():
                value = max(float(settings.floor), value * max(gradient, settings.decrease))
                self.last_cut = now
                self.cuts += 1
        elif not self._overloaded and peak >= int(value):
            step = max(settings.increase, settings.increase_ratio * value)
            grown = min(value + step, settings.max_limit_factor * peak)
            if self.capacity is not None:
                grown = min(grown, max(value, self.capacity))
            if grown > value:
                value = grown
                self.grown += 1
        self.value = min(float(settings.ceiling), max(float(settings.floor), value))
        self._samples = []
        self._started = None
        self._peak = 0
        self._overloaded = False

    def _move_baselines(self, samples: list[tuple[int | None, float]]) -> None:
        """Move each size class's baseline by the window's quantile of its samples."""
        settings = self.settings
        by_class: dict[int | None, list[float]] = {}
        for kind, latency in samples:
            by_class.setdefault(kind, []).append(latency)
        for kind, latencies in by_class.items():
            recent = _quantile(latencies, settings.quantile)
            seen = self._windows_seen.get(kind, 0) + 1
            self._windows_seen[kind] = seen
            baseline = self.baselines.get(kind)
            if baseline is None:
                baseline = recent
            else:
                if baseline > 2 * recent:
                    baseline *= 0.95
                baseline += (recent - baseline) / min(seen, settings.baseline_windows)
            self.baselines[kind] = baseline
