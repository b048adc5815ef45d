"""The congestion controller on a manual clock: each rule of `execpods.k8s.ratecontrol`."""

from __future__ import annotations

import pytest
from execpods.core import ManualClock
from execpods.k8s.ratecontrol import (
    DELIVERED,
    MIN_SAMPLES,
    CongestionConfig,
    RateController,
    Signal,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FAST = 0.01


def controller(
    *, floor: float = 5.0, ceiling: float = 1000.0, initial: float = 100.0
) -> tuple[RateController, ManualClock]:
    clock = ManualClock(100.0)
    config = CongestionConfig(floor=floor, ceiling=ceiling, initial=initial)
    return RateController(config, clock=clock.monotonic), clock


def clean(ctl: RateController, clock: ManualClock, count: int, *, verb: str = "create") -> None:
    for _ in range(count):
        clock.advance(1.0 / ctl.rate)
        assert ctl.answered(verb=verb, seconds=FAST, status=201) is Signal.CLEAN


def leave_slow_start(ctl: RateController, clock: ManualClock) -> None:
    ctl.answered(verb="create", seconds=FAST, status=503)
    clock.advance(1.0)


def test_slow_start_doubles_the_rate_per_second_of_clean_answers() -> None:
    ctl, clock = controller(initial=100.0)
    clean(ctl, clock, 100)
    assert ctl.slow_start
    assert ctl.rate == pytest.approx(200.0)


def test_after_congestion_the_rate_grows_additively() -> None:
    ctl, clock = controller(initial=200.0)
    leave_slow_start(ctl, clock)
    assert ctl.rate == pytest.approx(100.0)
    assert not ctl.slow_start
    start = clock.monotonic()
    clean(ctl, clock, 400)  # about three seconds at ~100-250 calls a second
    seconds = clock.monotonic() - start
    # `increase` (50) calls a second per second of full use, whatever the rate.
    assert ctl.rate == pytest.approx(100.0 + 50.0 * seconds, rel=0.05)


def test_an_idle_client_earns_nothing() -> None:
    ctl, clock = controller()
    clock.advance(3600.0)
    assert ctl.rate == 100.0


def test_a_client_that_does_not_use_its_rate_earns_no_more() -> None:
    ctl, clock = controller(initial=100.0)
    for _ in range(50):
        clock.advance(0.1)
        assert ctl.answered(verb="create", seconds=FAST, status=201, demand=False) is Signal.CLEAN
    assert ctl.rate == 100.0


@pytest.mark.parametrize(
    ("status", "signal"),
    [
        (429, Signal.THROTTLED),
        (500, Signal.SERVER_ERROR),
        (503, Signal.SERVER_ERROR),
        (0, Signal.SERVER_ERROR),
    ],
)
def test_a_429_a_5xx_or_no_answer_halves_the_rate(status: int, signal: Signal) -> None:
    ctl, _ = controller(initial=400.0)
    assert ctl.answered(verb="create", seconds=FAST, status=status) is signal
    assert ctl.rate == pytest.approx(200.0)


def test_client_errors_are_answers_not_congestion() -> None:
    ctl, clock = controller(initial=100.0)
    for status in (404, 409, 422, 403):
        clock.advance(0.01)
        assert ctl.answered(verb="delete", seconds=FAST, status=status) is Signal.CLEAN
    assert ctl.rate == pytest.approx(104.0)


def test_latency_well_above_its_floor_brings_the_rate_down_to_what_was_delivered() -> None:
    # A queue builds at the server: the client sends faster than the server delivers.
    ctl, clock = controller(initial=400.0)
    leave_slow_start(ctl, clock)  # 200
    for _ in range(100):  # a second in which the server delivered 100 answers
        clock.advance(0.01)
        ctl.answered(verb="create", seconds=FAST, status=201, demand=False)
    assert ctl.rate == pytest.approx(200.0)
    signals = []
    for _ in range(10):  # 10 ms -> 300 ms
        clock.advance(0.001)
        signals.append(ctl.answered(verb="create", seconds=0.3, status=201))
    assert Signal.SLOW in signals
    assert ctl.rate == pytest.approx(0.7 * 200.0, rel=0.01), "by latency_decrease at most"
    clock.advance(0.65)  # past the holdoff; 40-odd answers left in the last second
    ctl.answered(verb="create", seconds=0.3, status=201)
    assert ctl.rate == pytest.approx(0.7 * 0.7 * 200.0, rel=0.01), "a holdoff later, again"
    clock.advance(0.61)
    ctl.answered(verb="create", seconds=0.3, status=201)
    assert ctl.rate == pytest.approx(max(0.7**3 * 200.0, ctl.delivered()), rel=0.01)


def test_latency_from_a_busy_machine_neither_cuts_nor_holds_a_rate_the_server_delivers() -> None:
    # The client's own waits raise its latency, but it is answered as fast as it sends: no
    # queue grows at the server, so the rate keeps growing (a fixed cut on latency, or a hold,
    # kept the plugin path and a busy sidecar far under the server's rate).
    ctl, clock = controller(initial=200.0)
    leave_slow_start(ctl, clock)  # 100
    for _ in range(150):  # over a second at the rate, promptly
        clock.advance(1.0 / ctl.rate)
        ctl.answered(verb="create", seconds=FAST, status=201)
    before = ctl.rate
    signals = []
    for _ in range(100):  # answered as fast as sent, each 300 ms late
        clock.advance(1.0 / ctl.rate)
        signals.append(ctl.answered(verb="create", seconds=0.3, status=201))
    assert Signal.SLOW not in signals
    assert ctl.rate > before


def test_slow_start_ends_only_on_a_refusal_or_a_failure() -> None:
    ctl, clock = controller(initial=100.0)
    clean(ctl, clock, MIN_SAMPLES)
    for _ in range(50):  # late answers, while the rate runs ahead of them by design
        clock.advance(0.001)
        assert ctl.answered(verb="create", seconds=0.5, status=201) is Signal.CLEAN
    assert ctl.slow_start
    ctl.answered(verb="create", seconds=FAST, status=429)
    assert not ctl.slow_start


def test_latency_of_one_verb_does_not_judge_another() -> None:
    ctl, clock = controller(initial=200.0)
    leave_slow_start(ctl, clock)
    clean(ctl, clock, MIN_SAMPLES, verb="create")
    before = ctl.rate
    for _ in range(MIN_SAMPLES * 2):  # lists of 500 pods are slow, steadily
        clock.advance(0.05)
        assert ctl.answered(verb="list", seconds=0.4, status=200) is Signal.CLEAN
    assert ctl.rate > before


def test_a_small_absolute_rise_over_a_tiny_floor_is_not_congestion() -> None:
    ctl, clock = controller(initial=200.0)
    for _ in range(MIN_SAMPLES):
        clock.advance(0.005)
        ctl.answered(verb="create", seconds=0.001, status=201)
    for _ in range(20):  # 1 ms -> 80 ms: 80x the floor, but under the 100 ms margin
        clock.advance(0.005)
        assert ctl.answered(verb="create", seconds=0.08, status=201) is Signal.CLEAN


def test_one_decrease_per_holdoff_then_decreases_again() -> None:
    ctl, clock = controller(initial=800.0)
    assert ctl.answered(verb="create", seconds=0.05, status=429) is Signal.THROTTLED
    assert ctl.rate == pytest.approx(400.0)
    clock.advance(0.1)  # in flight when the server pushed back: holdoff max(0.2, 2 x 0.05)
    assert ctl.answered(verb="create", seconds=0.05, status=429) is Signal.IGNORED
    assert ctl.rate == pytest.approx(400.0)
    clock.advance(0.1001)
    assert ctl.answered(verb="create", seconds=0.05, status=429) is Signal.THROTTLED
    assert ctl.rate == pytest.approx(200.0)


def test_the_holdoff_is_twice_a_slow_answers_latency() -> None:
    ctl, clock = controller(initial=800.0)
    ctl.answered(verb="create", seconds=1.0, status=503)
    clock.advance(1.99)
    assert ctl.answered(verb="create", seconds=1.0, status=503) is Signal.IGNORED
    clock.advance(0.0101)
    assert ctl.answered(verb="create", seconds=1.0, status=503) is Signal.SERVER_ERROR


def test_a_decrease_stops_just_under_what_the_server_delivered() -> None:
    # A server that caps its rate delivers its cap however fast it is asked: a 429 puts the
    # rate just under it at once, where halving would saw between half the cap and the cap.
    ctl, clock = controller(initial=300.0)
    leave_slow_start(ctl, clock)  # 150
    for _ in range(100):  # 100 clean answers a second: what the server delivers
        clock.advance(0.01)
        ctl.answered(verb="create", seconds=FAST, status=201, demand=False)
    assert ctl.rate == pytest.approx(150.0)
    assert ctl.delivered() == pytest.approx(100.0)
    assert ctl.answered(verb="create", seconds=FAST, status=429) is Signal.THROTTLED
    assert ctl.rate == pytest.approx(DELIVERED * 100.0), "not half of 150: 90"


def test_a_decrease_never_raises_the_rate() -> None:
    ctl, clock = controller(initial=50.0)
    leave_slow_start(ctl, clock)  # 25
    for _ in range(100):  # the server delivered more than the rate (calls of an earlier rate)
        clock.advance(0.005)
        ctl.answered(verb="list", seconds=FAST, status=200, demand=False)
    ctl.answered(verb="create", seconds=FAST, status=503)
    assert ctl.rate == pytest.approx(25.0)


def test_a_short_burst_of_5xx_costs_a_tenth_of_the_rate_not_half() -> None:
    ctl, clock = controller(initial=200.0)
    leave_slow_start(ctl, clock)  # 100
    clean(ctl, clock, 100)  # a second at about the rate
    before = ctl.rate
    delivered = ctl.delivered()
    for _ in range(3):
        clock.advance(0.05)
        ctl.answered(verb="create", seconds=FAST, status=503)
    assert ctl.rate == pytest.approx(DELIVERED * delivered, rel=0.02)
    assert ctl.rate > 0.6 * before


def test_a_429_holds_back_no_other_call() -> None:
    # Its Retry-After is the refused request's, which the gateway sends again after it.
    ctl, _clock = controller()
    ctl.answered(verb="create", seconds=FAST, status=429, retry_after=30.0)
    assert not hasattr(ctl, "blocked_for")
    assert ctl.rate == pytest.approx(50.0)


def test_a_latency_that_stays_high_becomes_the_floor_after_the_window() -> None:
    # A latency that stays high is the new normal after one floor window.
    ctl, clock = controller(initial=200.0)
    leave_slow_start(ctl, clock)
    clean(ctl, clock, 50)
    slow = 0.5
    signals = []
    for _ in range(300):
        clock.advance(0.1)
        signals.append(ctl.answered(verb="create", seconds=slow, status=201))
    assert Signal.SLOW in signals[: 10 * MIN_SAMPLES]
    window = int(ctl.config.floor_window / 0.1) + 1
    assert Signal.SLOW not in signals[window:], "a steady latency is no queue"


def test_the_ceiling_caps_growth_and_the_floor_caps_decrease() -> None:
    ctl, clock = controller(floor=20.0, ceiling=150.0, initial=100.0)
    clean(ctl, clock, 500)
    assert ctl.rate == 150.0
    for _ in range(20):
        clock.advance(10.0)
        ctl.answered(verb="create", seconds=FAST, status=429)
    assert ctl.rate == 20.0


def test_the_start_is_within_the_bounds() -> None:
    clock = ManualClock()
    high = CongestionConfig(floor=5, ceiling=50, initial=200)
    assert RateController(high, clock=clock.monotonic).rate == 50
    low = CongestionConfig(floor=5, ceiling=50, initial=1)
    assert RateController(low, clock=clock.monotonic).rate == 5


@pytest.mark.parametrize(
    "kwargs",
    [
        {"floor": 0, "ceiling": 10, "initial": 5},
        {"floor": 20, "ceiling": 10, "initial": 5},
        {"floor": 1, "ceiling": 10, "initial": 5, "decrease": 1.0},
        {"floor": 1, "ceiling": 10, "initial": 5, "decrease": 0.0},
        {"floor": 1, "ceiling": 10, "initial": 5, "latency_decrease": 1.0},
        {"floor": 1, "ceiling": 10, "initial": 5, "latency_factor": 1.0},
        {"floor": 1, "ceiling": float("inf"), "initial": 5},
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"."):
        CongestionConfig(**kwargs)


answers = st.tuples(
    st.floats(0.0, 5.0),  # seconds since the previous answer
    st.sampled_from(["create", "delete", "list"]),
    st.floats(0.0, 10.0),  # latency
    st.sampled_from([200, 201, 404, 409, 429, 500, 503, 0]),
    st.one_of(st.none(), st.floats(0.0, 600.0)),  # Retry-After
)


@settings(max_examples=300, deadline=None)
@given(
    floor=st.floats(0.1, 100.0),
    span=st.floats(0.0, 2000.0),
    initial=st.floats(0.1, 5000.0),
    sequence=st.lists(answers, max_size=200),
)
def test_the_rate_never_leaves_its_bounds(
    floor: float,
    span: float,
    initial: float,
    sequence: list[tuple[float, str, float, int, float | None]],
) -> None:
    clock = ManualClock()
    config = CongestionConfig(floor=floor, ceiling=floor + span, initial=initial)
    ctl = RateController(config, clock=clock.monotonic)
    assert floor <= ctl.rate <= config.ceiling
    for gap, verb, seconds, status, retry_after in sequence:
        clock.advance(gap)
        ctl.answered(verb=verb, seconds=seconds, status=status, retry_after=retry_after)
        assert floor <= ctl.rate <= config.ceiling
