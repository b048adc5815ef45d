"""The client-side rate limit: a token bucket every API call takes a token from."""

from __future__ import annotations

from execpods.core import PodSelector
from execpods.k8s import ApiGateway, KubernetesApiClient, KubernetesPodOperations, TokenBucket
from execpods.kubesim import KubeSim
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.k8s.conftest import APP_ID


class FakeTime:
    """A clock that only the bucket's sleeps (and the test) move."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def bucket(qps: float, burst: int, time: FakeTime) -> TokenBucket:
    return TokenBucket(qps=qps, burst=burst, clock=time.clock, sleep=time.sleep)


@settings(max_examples=200, deadline=None)
@given(
    qps=st.integers(1, 500),
    burst=st.integers(1, 500),
    gaps=st.lists(st.floats(0.0, 0.05), min_size=1, max_size=600),
    window=st.sampled_from([0.1, 0.5, 1.0, 2.0]),
)
def test_never_more_calls_in_any_window_than_burst_plus_qps_times_the_window(
    qps: int, burst: int, gaps: list[float], window: float
) -> None:
    time = FakeTime()
    limiter = bucket(qps, burst, time)
    for gap in gaps:
        time.now += gap  # callers arrive whenever they like; the bucket makes them wait
        limiter.acquire()
    starts = limiter.start_times()
    assert len(starts) == len(gaps)
    for first, at in enumerate(starts):
        inside = sum(1 for later in starts[first:] if later - at < window)
        assert inside <= burst + qps * window + 1e-6
    assert limiter.peak_rate(window) <= limiter.bound(window) + 1e-6


def test_a_full_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    time = FakeTime()
    limiter = bucket(10, 3, time)
    waits = [limiter.acquire() for _ in range(6)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == [0.1, 0.1, 0.1]
    assert limiter.start_times() == [0.0, 0.0, 0.0, 0.1, 0.2, 0.30000000000000004]


def test_every_gateway_call_takes_a_token(sim: KubeSim, api_client: KubernetesApiClient) -> None:
    time = FakeTime()
    limiter = bucket(5, 2, time)
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, rate_limiter=limiter)
    operations = KubernetesPodOperations(gateway)
    before = sum(sim.request_counts().values())
    selector = PodSelector(labels={"spark-app-selector": APP_ID})
    for _ in range(7):
        operations.list(selector)
    operations.delete_by_selector(selector)
    made = sum(sim.request_counts().values()) - before
    assert made == 8
    assert limiter.calls == 8
    assert time.now == (8 - 2) / 5, "the bucket held the calls back to 5 a second after the burst"
