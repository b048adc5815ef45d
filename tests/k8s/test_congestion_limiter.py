"""The adaptive rate limit: pacing at the controller's rate, fed by the gateway's answers."""

from __future__ import annotations

import pytest
from execpods.core import ApiThrottled, PodSelector, SettingsError
from execpods.k8s import (
    AdaptiveRateLimiter,
    ApiGateway,
    ApiRateSettings,
    CongestionConfig,
    KubernetesApiClient,
    KubernetesPodOperations,
    Signal,
    TokenBucket,
    rate_limiter_for,
)
from execpods.k8s.congestion import PACED_SECONDS
from execpods.k8s.ratecontrol import DELIVERED
from execpods.kubesim import KubeSim
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.k8s.conftest import APP_ID
from tests.k8s.test_ratelimit import FakeTime


def limiter(time: FakeTime, *, initial: float = 100.0, burst: int = 10) -> AdaptiveRateLimiter:
    config = CongestionConfig(floor=5.0, ceiling=1000.0, initial=initial)
    return AdaptiveRateLimiter(config, clock=time.clock, sleep=time.sleep, burst=burst)


def test_calls_are_paced_at_the_rate_after_a_small_burst() -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0)
    time.now = 10.0  # idle for a while: `burst` calls may go at once
    waits = [paced.acquire() for _ in range(30)]
    burst = paced.burst
    assert waits[:burst] == [0.0] * burst
    assert waits[burst:] == pytest.approx([0.01] * (30 - burst))  # each sleeps to its own slot
    starts = paced.start_times()
    assert starts[-1] - starts[burst - 1] == pytest.approx(0.01 * (30 - burst))
    assert paced.peak_rate(1.0) <= paced.bound(1.0)


def test_a_429_holds_back_no_call_it_only_cuts_the_rate() -> None:
    # The Retry-After is the refused request's: the gateway sends that one again after it.
    time = FakeTime()
    paced = limiter(time)
    time.now = 5.0
    paced.answered(verb="create", seconds=0.01, status=429, retry_after=2.0)
    assert paced.rate == pytest.approx(50.0)
    assert paced.acquire() == 0.0
    # Nothing saved up survives the push-back: the next is paced at the cut rate, not burst.
    assert paced.acquire() == pytest.approx(1 / 50.0)


def test_the_rate_follows_the_answers() -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0)
    for _ in range(200):
        paced.acquire()
        paced.answered(verb="create", seconds=0.005, status=201)
    # Slow start: +1 per clean answer once calls wait for the rate (all but the first burst).
    before = paced.rate
    assert before == pytest.approx(100.0 + 200 - paced.burst, abs=1.5)
    delivered = paced.controller.delivered()
    paced.answered(verb="create", seconds=0.005, status=503)
    # Down by half, but not below what the server delivered in the last second.
    assert paced.rate == pytest.approx(max(before / 2, DELIVERED * delivered))
    assert paced.rate < before


def test_a_client_using_little_of_its_rate_does_not_raise_it() -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0)
    for _ in range(100):
        time.now += 0.1  # 10 calls a second against a rate of 100
        paced.acquire()
        paced.answered(verb="create", seconds=0.005, status=201)
    assert paced.rate == 100.0


def test_the_policy_setting_picks_the_limiter() -> None:
    adaptive = rate_limiter_for(ApiRateSettings.from_properties({}))
    assert isinstance(adaptive, AdaptiveRateLimiter)
    assert adaptive.rate == 200.0  # starts at api.qps
    assert adaptive.controller.config.floor == 5.0
    assert adaptive.controller.config.ceiling == 2000.0
    assert adaptive.burst == 300
    static = rate_limiter_for(
        ApiRateSettings.from_properties({"execpods.kubernetes.api.ratePolicy": "static"})
    )
    assert isinstance(static, TokenBucket)
    assert (static.qps, static.burst) == (200.0, 300)


def test_the_peak_rate_core_sizes_rounds_by_is_the_policys_most() -> None:
    adaptive = ApiRateSettings.from_properties(
        {"execpods.kubernetes.api.qps": "10", "execpods.kubernetes.api.maxQps": "12"}
    )
    assert adaptive.peak_qps == 12.0
    static = ApiRateSettings.from_properties(
        {"execpods.kubernetes.api.qps": "10", "execpods.kubernetes.api.ratePolicy": "static"}
    )
    assert static.peak_qps == 10.0


def test_a_floor_above_the_ceiling_is_refused_naming_both_properties() -> None:
    with pytest.raises(SettingsError, match=r"minQps=50.0 is invalid.*maxQps=20.0"):
        ApiRateSettings.from_properties(
            {"execpods.kubernetes.api.minQps": "50", "execpods.kubernetes.api.maxQps": "20"}
        )


def test_the_gateway_feeds_answers_and_sends_a_refused_call_again_after_its_retry_after(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0)
    gateway = ApiGateway(
        api_client,
        namespace="default",
        request_timeout=5,
        rate_limiter=paced,
        throttle_retries=2,
        sleep=time.sleep,
    )
    operations = KubernetesPodOperations(gateway)
    selector = PodSelector(labels={"spark-app-selector": APP_ID})
    for _ in range(5):
        operations.list(selector)
    assert paced.controller.signals[Signal.CLEAN] == 5
    sim.clear_requests()
    sim.throttle(1, retry_after=3)
    before = time.now
    operations.list(selector)  # refused, then sent again after the server's Retry-After
    assert time.now - before == pytest.approx(3.0, abs=0.05)
    assert [r.status for r in sim.requests()] == [429, 200]
    # Five calls a second never used the rate of 100: they earned nothing; the 429 halved it.
    assert paced.rate == pytest.approx(50.0)
    sim.throttle(3, retry_after=1)
    with pytest.raises(ApiThrottled):  # refused three times: two retries, then the caller knows
        operations.list(selector)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.floats(0.0, 0.05), st.sampled_from([201, 201, 201, 429, 503])),
        min_size=1,
        max_size=400,
    ),
    window=st.sampled_from([0.1, 0.5, 1.0]),
)
def test_never_more_calls_in_any_window_than_the_ceiling_allows_plus_the_burst(
    steps: list[tuple[float, int]], window: float
) -> None:
    time = FakeTime()
    config = CongestionConfig(floor=5.0, ceiling=300.0, initial=100.0)
    paced = AdaptiveRateLimiter(config, clock=time.clock, sleep=time.sleep, burst=20)
    for gap, status in steps:
        time.now += gap
        paced.acquire()
        paced.answered(verb="create", seconds=0.01, status=status, retry_after=0.5)
        assert 5.0 <= paced.rate <= 300.0
    assert paced.peak_rate(window) <= paced.bound(window) + 1e-6


def test_after_a_push_back_an_idle_spell_saves_up_only_a_tenth_of_a_second() -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0, burst=50)
    paced.answered(verb="create", seconds=0.01, status=503)  # rate 50, slow start over
    time.now += 60.0
    waits = [paced.acquire() for _ in range(20)]
    saved = round(50 * PACED_SECONDS) + 1
    assert waits[:saved] == [0.0] * saved
    assert all(w > 0 for w in waits[saved:])


def test_a_push_back_forfeits_what_was_saved_up() -> None:
    time = FakeTime()
    paced = limiter(time, initial=100.0, burst=50)
    paced.answered(verb="create", seconds=0.01, status=503)
    time.now += 60.0
    paced.answered(verb="create", seconds=0.01, status=503)  # after the holdoff: rate 25
    assert paced.acquire() == 0.0
    assert paced.acquire() == pytest.approx(1 / 25)
