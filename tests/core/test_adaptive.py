"""The adaptive controller on real traffic: size explains latency, and a 529 shows the capacity.

A provider that reads an 80,000-token prompt before its first token is slow for that request, not
congested; a controller that compares it with the 1,000-token prompts of an earlier window cuts C
for nothing, window after window (C fell 32 -> 13 on the conversation traces). And a 529 with n
requests in flight says the provider took n - 1: a controller that grows back past that at once
passes a 529 on every few windows that a static gate never sees.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from boundedgate import Adaptive, AdaptiveLimit
from boundedgate._core._adaptive import size_class

SETTINGS = Adaptive(window=1.0, min_samples=10, decrease=0.9)


def window(
    controller: AdaptiveLimit, start: float, latencies: list[float], sizes: list[float | None]
) -> None:
    """One busy window: every sample at full load, the last one closing it a second after the first."""
    for i, (latency, size) in enumerate(zip(latencies, sizes, strict=True)):
        now = start + i / (len(latencies) - 1)
        controller.sample(latency, 0.5, now, controller.limit, size)


def held(controller: AdaptiveLimit) -> int | None:
    """The capacity the controller holds C to, read afresh (an attribute a check narrowed may move)."""
    return controller.capacity


def prefill(tokens: float) -> float:
    """A first token that the prompt's size alone explains: 0.2 s, plus 5,000 tokens a second."""
    return 0.2 + tokens / 5_000


def test_latency_that_the_sizes_explain_cuts_nothing_and_the_same_latency_unsized_does() -> None:
    small, large = [1_000.0] * 10, [64_000.0] * 10
    sized = AdaptiveLimit(SETTINGS, 20)
    unsized = AdaptiveLimit(SETTINGS, 20)
    for controller, sizes in ((sized, (small, large)), (unsized, ([None] * 10, [None] * 10))):
        start = 0.0
        for _ in range(3):  # windows of short prompts, then one of long ones
            window(controller, start, [prefill(s) for s in small], list(sizes[0]))
            start += 2
        window(controller, start, [prefill(s) for s in large], list(sizes[1]))
        start += 2
        window(controller, start, [prefill(s) for s in large], list(sizes[1]))
    assert sized.cuts == 0
    assert sized.limit > 20  # busy and clean: it grew
    assert unsized.cuts >= 1
    assert unsized.limit < sized.limit - 5  # the long prompts' windows cut it twice


def test_a_size_class_still_sees_congestion() -> None:
    controller = AdaptiveLimit(SETTINGS, 20)
    sizes: list[float | None] = [8_000.0] * 10
    start = 0.0
    for _ in range(3):
        window(controller, start, [prefill(8_000)] * 10, sizes)
        start += 2
    grown = controller.limit
    window(controller, start, [prefill(8_000) + 3.0] * 10, sizes)  # the provider queues 3 s
    assert controller.cuts == 1
    assert controller.limit < grown


def test_the_baseline_is_the_mean_of_the_early_windows_not_the_first() -> None:
    controller = AdaptiveLimit(Adaptive(window=1.0, min_samples=10, baseline_windows=20), 20)
    window(controller, 0.0, [1.0] * 10, [None] * 10)
    assert controller.baseline == 1.0
    window(controller, 2.0, [1.4] * 10, [None] * 10)
    assert controller.baseline == pytest.approx(1.2)  # the mean of the two, not 1 + 0.4 / 20
    window(controller, 4.0, [1.6] * 10, [None] * 10)
    assert controller.baseline == pytest.approx(4 / 3)  # the mean of the three
    assert controller.cuts == 0  # 1.6 is within 1.5 x 4 / 3


def test_an_overload_with_the_requests_in_flight_shows_the_capacity_and_cuts_as_always() -> None:
    controller = AdaptiveLimit(SETTINGS, 40)
    assert controller.signal("overloaded", 0.0, in_flight=28) == 36  # 40 x 0.9: multiplicative
    assert controller.capacity == 27
    unknown = AdaptiveLimit(SETTINGS, 40)
    assert unknown.signal("overloaded", 0.0) == 36
    assert unknown.capacity is None
    idle = AdaptiveLimit(SETTINGS, 40)  # told from outside any request: no capacity shown
    assert idle.signal("overloaded", 0.0, in_flight=0) == 36
    assert idle.capacity is None
    low = AdaptiveLimit(SETTINGS, 40)  # a 529 at a moment of low load
    assert low.signal("overloaded", 0.0, in_flight=1) == 36
    assert low.capacity == 1  # the floor
    window(low, 2.0, [1.0] * 10, [None] * 10)
    assert low.limit == 36  # not grown while the capacity is remembered, nor cut to it


def test_C_does_not_grow_past_a_capacity_shown_until_it_is_forgotten() -> None:
    controller = AdaptiveLimit(Adaptive(window=1.0, min_samples=10, remember_capacity=30.0), 16)
    assert controller.signal("overloaded", 0.0, in_flight=17) == 14  # 16 x 0.9; capacity 16
    start = 2.0
    while start < 29:  # busy clean windows (of 1 s): back to 16, and no further
        window(controller, start, [1.0] * 10, [None] * 10)
        start += 2
    assert controller.limit == 16
    assert controller.capacity == 16
    window(controller, 31.0, [1.0] * 10, [None] * 10)  # 30 s after the signal: probing again
    assert held(controller) is None
    assert controller.limit == 17


def test_a_later_overload_may_lower_the_capacity_but_not_keep_it_longer() -> None:
    controller = AdaptiveLimit(Adaptive(window=1.0, remember_capacity=30.0), 30)
    controller.signal("overloaded", 0.0, in_flight=25)
    controller.signal("overloaded", 0.5, in_flight=28)  # suppressed: within the window of the cut
    assert controller.capacity == 24
    assert (controller.cuts, controller.suppressed) == (1, 1)
    controller.signal("overloaded", 20.0, in_flight=21)
    assert controller.capacity == 20
    assert controller.limit == 24  # 30 x 0.9 x 0.9
    window(controller, 27.0, [1.0] * 10, [None] * 10)  # closes at 28 s
    assert controller.capacity == 20
    window(controller, 31.0, [1.0] * 10, [None] * 10)  # 30 s after the first signal: forgotten
    assert held(controller) is None
    forgetful = AdaptiveLimit(Adaptive(window=1.0, remember_capacity=0.0), 30)
    forgetful.signal("overloaded", 0.0, in_flight=25)
    window(forgetful, 1.0, [1.0] * 10, [None] * 10)
    assert forgetful.capacity is None


@pytest.mark.parametrize(
    ("initial", "settings", "grown"),
    [
        (5, Adaptive(window=1.0), 6),  # a tenth of 5 is less than one: additive
        (40, Adaptive(window=1.0), 44),  # a tenth of C
        (40, Adaptive(window=1.0, increase_ratio=0), 41),  # classic AIMD
        (40, Adaptive(window=1.0, increase=8), 48),  # increase is the least a window adds
        (40, Adaptive(window=1.0, ceiling=42), 42),
    ],
)
def test_a_clean_busy_window_grows_C_by_increase_or_a_share_of_it(
    initial: int, settings: Adaptive, grown: int
) -> None:
    controller = AdaptiveLimit(settings, initial)
    window(controller, 0.0, [1.0] * 10, [None] * 10)
    assert (controller.limit, controller.grown) == (grown, 1)


def test_growth_by_a_share_climbs_back_about_as_fast_as_the_cuts_came_down() -> None:
    # Four overload signals, a window apart, cut 45 to 28; the window that heard the last one does
    # not grow, and the next four bring C back to 42, where one slot a window gets to 32.
    for ratio, climbed in ((0.1, [28, 31, 34, 38, 42]), (0.0, [28, 29, 30, 31, 32])):
        controller = AdaptiveLimit(Adaptive(window=1.0, remember_capacity=0, increase_ratio=ratio), 45)
        for t in range(4):
            controller.signal("overloaded", 2.0 * t)
        assert controller.limit == 28
        seen = []
        for t in range(4, 9):
            window(controller, 2.0 * t, [1.0] * 10, [None] * 10)
            seen.append(controller.limit)
        assert seen == climbed


@given(st.one_of(st.none(), st.floats(min_value=0, max_value=1e18, allow_nan=False)))
@example(2.0**53 - 1)  # log2() rounds it up to 53.0
@example(0.75)
def test_size_classes_span_a_factor_of_two(size: float | None) -> None:
    kind = size_class(size)
    if size is None or size == 0:
        assert kind is None
    else:
        assert kind is not None
        assert 2**kind <= size < 2 ** (kind + 1)


@pytest.mark.parametrize("field", ["remember_capacity", "increase_ratio"])
def test_the_shares_may_be_zero_not_negative(field: str) -> None:
    assert getattr(Adaptive(**{field: 0}), field) == 0.0
    with pytest.raises(ValueError, match=field):
        Adaptive(**{field: -1})
    with pytest.raises(TypeError, match=field):
        Adaptive(**{field: "30"})  # type: ignore[arg-type]
