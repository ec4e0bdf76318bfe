"""Workloads for planning: seeded, reproducible scripts of arrivals, service times and budgets.

A workload is arrivals (:class:`Poisson` at a rate, :class:`Bursts`, or several merged), a service
time distribution (:class:`Fixed`, :class:`Exponential`, :class:`LogNormal` given its mean and its
p99), a budget (none, a fixed one, or a distribution), and for rate limits counted in tokens a
declared cost and an actual one to settle (none, a fixed number, or a distribution: the same classes,
whose numbers are then tokens rather than milliseconds), and mixes that spread the requests over
priority classes and over keys by weight. Instead of a service time, a request may be given its
sizes, prompt and output tokens drawn from distributions of their own (:class:`LogNormal` fits
production traffic: most prompts short, a few very long); its service time is then the one a
:class:`~boundedgate.sim.Provider` of the default speeds takes. :func:`generate` turns it into a
script.

Each part draws from its own random stream, seeded from the workload's seed and the part's name,
so two workloads with the same seed and the same arrivals arrive at the same instants even when
their service times differ: a comparison between them is a comparison of the change alone. Only
``random.Random.random()`` is used (turned into each distribution by its inverse CDF), the one
method Python promises will give the same sequence in every version.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from ._provider import Provider
from ._script import MAX_MS, Job

__all__ = (
    "MAX_REQUESTS",
    "Arrivals",
    "Bursts",
    "Distribution",
    "Exponential",
    "Fixed",
    "LogNormal",
    "Poisson",
    "generate",
)

_Z99 = NormalDist().inv_cdf(0.99)
#: A lognormal's p99 is at most ``exp(z99 ** 2 / 2)`` (about 14.97) times its mean.
MAX_LOGNORMAL_P99_RATIO = math.exp(_Z99 * _Z99 / 2)
#: The most requests a workload makes: a million replay in about ten seconds and half a gigabyte.
MAX_REQUESTS = 1_000_000


def _too_many(what: str, duration_ms: int, count: float, about: bool) -> ValueError:
    approximately = "about " if about else ""
    return ValueError(
        f"{what} for {duration_ms} ms would make {approximately}{count:,.0f} requests; a workload makes "
        f"at most {MAX_REQUESTS:,}: lower the rate, the burst size or the duration"
    )


def _positive(name: str, value: object, most: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if value > most:
        raise ValueError(f"{name} must be at most {most:g}, got {value!r}")
    return float(value)


def _open_unit(rng: random.Random) -> float:
    """A uniform number in (0, 1): random() may return 0.0, which no inverse CDF accepts."""
    while True:
        u = rng.random()
        if u > 0.0:
            return u


@dataclass(frozen=True, slots=True)
class Poisson:
    """Arrivals at random, ``rate`` per second on average, independent of one another.

    Raises:
        TypeError, ValueError: A rate that is not a finite number > 0.
    """

    #: Mean arrivals per second.
    rate: float

    def __post_init__(self) -> None:
        _positive("rate", self.rate)

    def expected(self, duration_ms: int) -> float:
        """The mean number of arrivals in ``duration_ms``."""
        return self.rate * duration_ms / 1000.0

    def times(self, duration_ms: int, rng: random.Random) -> list[int]:
        """Arrival instants in ``[0, duration_ms)``, in whole milliseconds, in order.

        Raises:
            ValueError: More than :data:`MAX_REQUESTS` arrivals expected.
        """
        if self.expected(duration_ms) > MAX_REQUESTS:
            raise _too_many(f"Poisson(rate={self.rate:g})", duration_ms, self.expected(duration_ms), True)
        mean_gap = 1000.0 / self.rate
        times: list[int] = []
        t = 0.0
        while True:
            t -= mean_gap * math.log(_open_unit(rng))
            if t >= duration_ms:
                return times
            times.append(int(t))


@dataclass(frozen=True, slots=True)
class Bursts:
    """``size`` requests arriving at the same instant, at ``start_ms`` and then every ``every_ms``.

    Raises:
        TypeError, ValueError: A size that is not an int >= 1, a start that is not an int >= 0, or
            a period that is not None or an int >= 1.
    """

    #: Requests per burst.
    size: int
    #: The first burst's instant.
    start_ms: int = 0
    #: The time between bursts; None for a single burst.
    every_ms: int | None = None

    def __post_init__(self) -> None:
        for name, value, minimum in (("size", self.size, 1), ("start_ms", self.start_ms, 0)):
            if type(value) is not int:
                raise TypeError(f"{name} must be an int, got {value!r}")
            if value < minimum:
                raise ValueError(f"{name} must be >= {minimum}, got {value}")
        if self.every_ms is not None:
            if type(self.every_ms) is not int:
                raise TypeError(f"every_ms must be an int or None, got {self.every_ms!r}")
            if self.every_ms < 1:
                raise ValueError(f"every_ms must be >= 1, got {self.every_ms}")

    def _starts(self, duration_ms: int) -> Sequence[int]:
        if self.every_ms is None:
            return [self.start_ms] if self.start_ms < duration_ms else []
        return range(self.start_ms, duration_ms, self.every_ms)

    def expected(self, duration_ms: int) -> float:
        """The number of arrivals in ``duration_ms``."""
        if self.start_ms >= duration_ms:
            return 0
        bursts = 1 if self.every_ms is None else -(-(duration_ms - self.start_ms) // self.every_ms)
        return bursts * self.size

    def times(self, duration_ms: int, rng: random.Random) -> list[int]:
        """Arrival instants in ``[0, duration_ms)``, in order (``rng`` is not used).

        Raises:
            ValueError: More than :data:`MAX_REQUESTS` arrivals.
        """
        count = self.expected(duration_ms)
        if count > MAX_REQUESTS:
            every = "" if self.every_ms is None else f", every_ms={self.every_ms}"
            raise _too_many(f"Bursts(size={self.size}{every})", duration_ms, count, False)
        return [start for start in self._starts(duration_ms) for _ in range(self.size)]


@dataclass(frozen=True, slots=True)
class Fixed:
    """Always the same time, in milliseconds.

    Raises:
        TypeError, ValueError: A time that is not a finite number > 0.
    """

    #: The time.
    ms: float

    def __post_init__(self) -> None:
        _positive("ms", self.ms, MAX_MS)

    def sample(self, rng: random.Random) -> float:
        """The time, in milliseconds (``rng`` is not used)."""
        return self.ms

    @property
    def mean_ms(self) -> float:
        """The mean: the time itself."""
        return self.ms


@dataclass(frozen=True, slots=True)
class Exponential:
    """Exponentially distributed times with the given mean, in milliseconds.

    Raises:
        TypeError, ValueError: A mean that is not a finite number > 0.
    """

    #: The mean.
    mean_ms: float

    def __post_init__(self) -> None:
        _positive("mean_ms", self.mean_ms, MAX_MS)

    def sample(self, rng: random.Random) -> float:
        """One time, in milliseconds."""
        return -self.mean_ms * math.log(_open_unit(rng))


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Lognormal times with the given mean and 99th percentile, in milliseconds: a long tail.

    Service times of LLM calls look like this: most answers come in a few seconds, a few take ten
    times longer. A lognormal is fixed by its mean and its p99, which are what dashboards show. The
    p99 must exceed the mean, and a lognormal's p99 is at most about 14.97 times its mean
    (:data:`MAX_LOGNORMAL_P99_RATIO`).

    Raises:
        TypeError, ValueError: A mean or p99 that is not a finite number > 0, or a p99 not between
            the mean and 14.97 times the mean.
    """

    #: The mean.
    mean_ms: float
    #: The 99th percentile.
    p99_ms: float

    def __post_init__(self) -> None:
        mean = _positive("mean_ms", self.mean_ms, MAX_MS)
        p99 = _positive("p99_ms", self.p99_ms, MAX_MS)
        if not mean < p99 <= mean * MAX_LOGNORMAL_P99_RATIO:
            raise ValueError(
                f"a lognormal's p99 must be above its mean and at most {MAX_LOGNORMAL_P99_RATIO:.2f} "
                f"times it; got mean {mean:g} ms, p99 {p99:g} ms"
            )

    @property
    def sigma(self) -> float:
        """The standard deviation of the time's logarithm."""
        # mean = exp(mu + sigma^2 / 2) and p99 = exp(mu + z * sigma), so
        # sigma^2 / 2 - z * sigma + ln(p99 / mean) = 0; the smaller root keeps p99 above the mean.
        spread = math.log(self.p99_ms / self.mean_ms)
        return _Z99 - math.sqrt(max(_Z99 * _Z99 - 2 * spread, 0.0))

    @property
    def mu(self) -> float:
        """The mean of the time's logarithm."""
        sigma = self.sigma
        return math.log(self.mean_ms) - sigma * sigma / 2

    def sample(self, rng: random.Random) -> float:
        """One time, in milliseconds."""
        return math.exp(NormalDist(self.mu, self.sigma).inv_cdf(_open_unit(rng)))


Arrivals = Poisson | Bursts
Distribution = Fixed | Exponential | LogNormal


def _cumulative(mix: Iterable[float], name: str, each: str) -> list[float]:
    """The running sums of a mix's weights (``name`` and ``each`` say what it weighs, for errors)."""
    weights = list(mix)
    if not weights:
        raise ValueError(f"{name} needs a weight per {each}")
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise TypeError(f"{name} weights must be numbers, got {weight!r}")
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"{name} weights must be finite and >= 0, got {weight!r}")
    if not sum(weights) > 0:
        raise ValueError(f"{name} must give some {each} a weight > 0")
    return list(itertools.accumulate(weights))


def _pick(cumulative: Sequence[float], rng: random.Random) -> int:
    """An index drawn with the weights whose running sums are ``cumulative``."""
    index = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
    return min(index, len(cumulative) - 1)  # guards the float sum's last ulp


def _whole_ms(value: float) -> int:
    return min(MAX_MS, max(1, round(value)))  # a far tail's draw, cut at the latest a time may be


def _check_cost(name: str, value: object) -> None:
    if value is None or isinstance(value, (Fixed, Exponential, LogNormal)):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be None, a number or a distribution, got {value!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _size(tokens: Distribution, rng: random.Random) -> int:
    # Whole tokens, and at most what a script may hold.
    return min(MAX_MS, round(tokens.sample(rng)))


def _cost(value: float | Distribution, rng: random.Random) -> float:
    # Whole tokens, as LLM usage is counted.
    return value if isinstance(value, (int, float)) else round(value.sample(rng))


#: The provider whose speeds give a sized request its service time by default (see :func:`generate`).
_DEFAULT_SPEEDS = Provider(1)


def generate(
    arrivals: Arrivals | Sequence[Arrivals],
    service: Distribution | None,
    *,
    duration_ms: int,
    budget_ms: int | Distribution | None = None,
    priority_mix: Sequence[float] | None = None,
    key_mix: Mapping[str, float] | None = None,
    cost: float | Distribution | None = None,
    actual_cost: float | Distribution | None = None,
    prompt_tokens: Distribution | None = None,
    output_tokens: Distribution | None = None,
    speeds: Provider | None = None,
    seed: int = 0,
) -> list[Job]:
    """A reproducible script of requests, ready for :func:`simulate` or :func:`sweep`.

    ::

        jobs = generate(
            [Poisson(rate=20), Bursts(300, start_ms=60_000)],
            LogNormal(mean_ms=2_000, p99_ms=20_000),
            budget_ms=30_000,
            duration_ms=600_000,
        )

    A workload makes at most :data:`MAX_REQUESTS` (a million) requests: arrivals expected to make
    more are refused before anything is drawn. Times are rounded to whole milliseconds; service
    times and budgets are at least 1 ms. Requests are numbered in arrival order (``r00001``,
    ``r00002``...); several arrival processes are merged, and requests arriving at the same instant
    keep the order of ``arrivals``.

    Sized traffic gives each request its prompt and output tokens instead of a service time::

        jobs = generate(
            Poisson(rate=2),
            None,
            prompt_tokens=LogNormal(mean_ms=1_500, p99_ms=12_000),  # tokens, not milliseconds
            output_tokens=LogNormal(mean_ms=250, p99_ms=1_200),
            budget_ms=30_000,
            duration_ms=600_000,
        )

    Args:
        arrivals: One arrival process, or several to merge.
        service: The service time distribution; None with ``prompt_tokens`` and ``output_tokens``.
        duration_ms: Arrivals fall in ``[0, duration_ms)``, an int >= 1.
        budget_ms: Each request's budget: None for no deadline, an int, or a distribution.
        priority_mix: The weights of the priority classes 0, 1, 2... (``[1, 4]``: one request in
            five is of class 0); None puts every request in class 0.
        key_mix: The weights of the keys whose gates the requests go through (``{"acme": 3,
            "globex": 1}``: three requests in four are acme's); None gives every request the
            default key, ``""``.
        cost: Each request's declared cost for rate limits counted in tokens: None (0), a number,
            or a distribution of tokens (sampled costs are rounded to whole tokens).
        actual_cost: The cost each request settles as its body ends: None (nothing settled), a
            number, or a distribution of tokens, drawn independently of ``cost``.
        prompt_tokens: Each request's prompt size: a distribution of tokens (rounded to whole
            tokens), with ``output_tokens`` and no ``service``.
        output_tokens: Each request's answer size, likewise. A sized request's ``service_ms``
            is the time ``speeds`` takes to serve it (``Provider.service_seconds``); a provider
            of other speeds derives its own from the sizes (``plan --provider``,
            :class:`~boundedgate.sim.Request`).
        speeds: The :class:`~boundedgate.sim.Provider` whose speeds give a sized request its
            ``service_ms`` (default: ``Provider``'s default speeds).
        seed: The seed; the same arguments and seed give the same script.

    Returns:
        The jobs, sorted by arrival.

    Raises:
        TypeError, ValueError: Arrivals expected to make more than :data:`MAX_REQUESTS` requests
            in ``duration_ms``, a duration that is not an int >= 1, a fixed budget that is not an
            int >= 1, an arrival process or distribution of the wrong type, a priority or key
            mix that is empty, has a weight that is not a finite number >= 0, or weighs nothing,
            a key mix that is not a mapping from str, a fixed cost that is not a finite number
            >= 0, or not exactly one of ``service`` and the two sizes.
    """
    if type(duration_ms) is not int or not 1 <= duration_ms <= MAX_MS:
        raise ValueError(f"duration_ms must be an int >= 1 and <= {MAX_MS}, got {duration_ms!r}")
    processes = _processes(arrivals)
    _check_service(service, prompt_tokens, output_tokens)
    _check_budget(budget_ms)
    _check_cost("cost", cost)
    _check_cost("actual_cost", actual_cost)
    classes = None if priority_mix is None else _cumulative(priority_mix, "priority_mix", "class")
    keys, shares = _key_shares(key_mix)

    expected = sum(process.expected(duration_ms) for process in processes)
    if expected > MAX_REQUESTS and len(processes) > 1:
        raise _too_many("these arrivals", duration_ms, expected, True)
    arrival_rng = random.Random(f"boundedgate:{seed}:arrivals")
    times = sorted(t for process in processes for t in process.times(duration_ms, arrival_rng))
    sizes = (prompt_tokens, output_tokens)
    draw = _Draws(seed, service, budget_ms, classes, keys, shares, cost, actual_cost, sizes, speeds)
    width = len(str(len(times)))
    return [draw.job(f"r{number:0{width}d}", arrival) for number, arrival in enumerate(times, start=1)]


def _check_service(service: object, prompt_tokens: object, output_tokens: object) -> None:
    """Exactly one of a service time distribution and the two sizes' distributions."""
    sizes = (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens))
    for name, value in sizes:
        if value is not None and not isinstance(value, (Fixed, Exponential, LogNormal)):
            raise TypeError(f"{name} must be None or Fixed, Exponential or LogNormal (tokens), got {value!r}")
    if service is None:
        if prompt_tokens is None or output_tokens is None:
            raise ValueError(
                "give service (a time distribution), or both prompt_tokens and output_tokens "
                "(the service time then follows from the sizes)"
            )
        return
    if not isinstance(service, (Fixed, Exponential, LogNormal)):
        raise TypeError(f"service must be Fixed, Exponential or LogNormal, got {service!r}")
    if prompt_tokens is not None or output_tokens is not None:
        raise ValueError(
            "give service or the sizes (prompt_tokens and output_tokens), not both: a sized "
            "request's service time follows from its sizes"
        )


def _processes(arrivals: Arrivals | Sequence[Arrivals]) -> list[Arrivals]:
    processes = [arrivals] if isinstance(arrivals, (Poisson, Bursts)) else list(arrivals)
    for process in processes:
        if not isinstance(process, (Poisson, Bursts)):
            raise TypeError(f"arrivals must be Poisson or Bursts, got {process!r}")
    return processes


def _check_budget(budget_ms: object) -> None:
    if isinstance(budget_ms, bool) or not (
        budget_ms is None or isinstance(budget_ms, (int, Fixed, Exponential, LogNormal))
    ):
        raise TypeError(f"budget_ms must be None, an int or a distribution, got {budget_ms!r}")
    if isinstance(budget_ms, int) and budget_ms < 1:
        raise ValueError(f"budget_ms must be >= 1, got {budget_ms}")


def _key_shares(key_mix: Mapping[str, float] | None) -> tuple[list[str], list[float] | None]:
    """The keys of a key mix, and the running sums of their weights (None without a mix)."""
    if key_mix is None:
        return [], None
    if not isinstance(key_mix, Mapping):
        raise TypeError(f"key_mix must be a mapping from key to weight, got {key_mix!r}")
    keys = list(key_mix)
    for key in keys:
        if not isinstance(key, str):
            raise TypeError(f"key_mix's keys must be strings, got {key!r}")
    return keys, _cumulative(key_mix.values(), "key_mix", "key")


class _Draws:
    """A request's random parts, each drawn from a stream of its own (see the module)."""

    def __init__(
        self,
        seed: int,
        service: Distribution | None,
        budget_ms: int | Distribution | None,
        classes: list[float] | None,
        keys: list[str],
        shares: list[float] | None,
        cost: float | Distribution | None,
        actual_cost: float | Distribution | None,
        sizes: tuple[Distribution | None, Distribution | None] = (None, None),
        speeds: Provider | None = None,
    ) -> None:
        self.service = service
        self.budget_ms = budget_ms
        self.classes = classes
        self.keys = keys
        self.shares = shares
        self.cost = cost
        self.actual_cost = actual_cost
        self.service_rng = random.Random(f"boundedgate:{seed}:service")
        self.budget_rng = random.Random(f"boundedgate:{seed}:budget")
        self.priority_rng = random.Random(f"boundedgate:{seed}:priority")
        self.cost_rng = random.Random(f"boundedgate:{seed}:cost")
        self.actual_rng = random.Random(f"boundedgate:{seed}:actual_cost")
        self.key_rng = random.Random(f"boundedgate:{seed}:key")
        self.prompt_tokens, self.output_tokens = sizes
        self.speeds = _DEFAULT_SPEEDS if speeds is None else speeds
        self.prompt_rng = random.Random(f"boundedgate:{seed}:prompt_tokens")
        self.output_rng = random.Random(f"boundedgate:{seed}:output_tokens")

    def job(self, name: str, arrival: int) -> Job:
        """The next request, arriving at ``arrival``."""
        budget_ms = self.budget_ms
        if budget_ms is None or isinstance(budget_ms, int):
            budget = budget_ms
        else:
            budget = _whole_ms(budget_ms.sample(self.budget_rng))
        priority = 0 if self.classes is None else _pick(self.classes, self.priority_rng)
        key = "" if self.shares is None else self.keys[_pick(self.shares, self.key_rng)]
        prompt = output = None
        if self.service is not None:
            service_ms = _whole_ms(self.service.sample(self.service_rng))
        else:
            assert self.prompt_tokens is not None  # generate checks it
            assert self.output_tokens is not None
            prompt = _size(self.prompt_tokens, self.prompt_rng)
            output = _size(self.output_tokens, self.output_rng)
            service_ms = _whole_ms(1000 * self.speeds.service_seconds(prompt, output))
        declared = 0 if self.cost is None else _cost(self.cost, self.cost_rng)
        actual = None if self.actual_cost is None else _cost(self.actual_cost, self.actual_rng)
        return Job(
            name, arrival, service_ms, budget, priority, declared, actual, key,
            prompt_tokens=prompt, output_tokens=output,
        )  # fmt: skip
