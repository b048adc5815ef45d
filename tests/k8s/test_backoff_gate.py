"""Every API call path honours the server: 429 Retry-After and jittered back-off on 5xx.

On the landed code (8171a79) only the watch backed off. Here the gateway asks one shared
`ApiBackoffGate` before every call: after a 5xx nothing is sent for a jittered, growing delay. A
429 holds back only the request it refused, which waits its Retry-After and is sent again, as
client-go does (issue 34: closing every call for one 429 ran a rate-capped server at half its
cap). The property runs the gate against random fault sequences and impatient callers on a fake
clock and bounds what reaches the server.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest
from execpods.core import SPARK_LABELS, ApiThrottled, ApiUnavailable, PodConflict, PodSelector
from execpods.k8s import ApiBackoffGate, ApiGateway, KubernetesApiClient, KubernetesPodOperations
from execpods.kubesim import KubeSim
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.k8s.conftest import APP_ID, executor_pod

INITIAL = 0.5
MAXIMUM = 30.0
FLOOR = INITIAL * 0.1


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gated_operations(
    api_client: KubernetesApiClient, gate: ApiBackoffGate
) -> KubernetesPodOperations:
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, backoff=gate)
    return KubernetesPodOperations(gateway)


def test_a_429_holds_back_only_the_call_it_refused(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    # As client-go: the refused call waits its Retry-After and is sent again; the others go on
    # (closing every call for one 429 ran a rate-capped server at about half its cap).
    clock = FakeClock()
    gate = ApiBackoffGate(initial=INITIAL, maximum=MAXIMUM, clock=clock, rng=random.Random(1))
    slept: list[float] = []
    gateway = ApiGateway(
        api_client,
        namespace="default",
        request_timeout=5,
        backoff=gate,
        throttle_retries=3,
        sleep=slept.append,
        create_pool=2,
    )
    operations = KubernetesPodOperations(gateway)
    selector = PodSelector.executors_of(SPARK_LABELS, APP_ID)
    sim.throttle(1, retry_after=5)
    operations.create(executor_pod(1))
    assert slept == [5.0]
    assert [(r.verb, r.status) for r in sim.requests()] == [("create", 429), ("create", 201)]
    sim.throttle(1, retry_after=5)
    with pytest.raises(ApiThrottled):  # no retries left for this caller: it hears the 429
        gated_operations(api_client, gate).create(executor_pod(2))
    assert gate.remaining() == 0.0
    sim.clear_requests()
    operations.create(executor_pod(3))  # nothing is held back by the other call's 429
    operations.delete_by_selector(selector)
    operations.list(selector)
    assert [r.verb for r in sim.requests()] == ["create", "deletecollection", "list"]


def test_5xx_and_refused_connections_back_off_with_jitter_and_normal_answers_reset(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    clock = FakeClock()
    gate = ApiBackoffGate(initial=INITIAL, maximum=MAXIMUM, clock=clock, rng=random.Random(2))
    operations = gated_operations(api_client, gate)
    sim.fail_requests(500, count=3)
    waits = []
    for _ in range(3):
        with pytest.raises(ApiUnavailable):
            operations.create(executor_pod(1))
        waits.append(gate.remaining())
        clock.now += waits[-1]
    assert all(FLOOR <= w <= min(MAXIMUM, INITIAL * 2**i) for i, w in enumerate(waits)), waits
    operations.create(executor_pod(1))
    with pytest.raises(PodConflict):  # a normal answer: the server is fine, no back-off
        operations.create(executor_pod(1))
    assert gate.remaining() == 0.0


@dataclass(frozen=True)
class Fault:
    seconds: float
    kind: str  # "ok", "500", "429", "refused"
    retry_after: float = 0.0


faults = st.lists(
    st.builds(
        Fault,
        seconds=st.floats(0.1, 40.0),
        kind=st.sampled_from(["ok", "500", "429", "refused"]),
        retry_after=st.sampled_from([0.0, 1.0, 5.0, 30.0, 1000.0]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(
    plan=faults,
    callers=st.integers(1, 8),
    period=st.floats(0.1, 1.0),
    seed=st.integers(0, 2**16),
)
def test_the_request_rate_stays_bounded_over_any_fault_sequence(
    plan: list[Fault], callers: int, period: float, seed: int
) -> None:
    """Callers retry every `period` seconds whatever they are told (a reconciler's rounds, a
    watch loop, a kill); the server sees what the gate lets through."""
    clock = FakeClock()
    gate = ApiBackoffGate(initial=INITIAL, maximum=MAXIMUM, clock=clock, rng=random.Random(seed))
    schedule: list[tuple[float, float, Fault]] = []
    start = 0.0
    for fault in plan:
        schedule.append((start, start + fault.seconds, fault))
        start += fault.seconds
    end = start

    def fault_at(now: float) -> Fault:
        return next((f for a, b, f in schedule if a <= now < b), Fault(seconds=0, kind="ok"))

    sent: list[tuple[float, Fault]] = []
    steps = int(end / period) + 1
    for step in range(steps):
        clock.now = step * period
        for _ in range(callers):
            try:
                gate.check("call")
            except ApiThrottled:
                continue
            fault = fault_at(clock.now)
            sent.append((clock.now, fault))
            if fault.kind == "ok":
                gate.succeeded()
            elif fault.kind == "429":  # one refused request: the gate stays as it was
                was = gate.remaining()
                gate.failed(ApiThrottled("429", retry_after=fault.retry_after))
                assert gate.remaining() == was
            else:
                gate.failed(ApiUnavailable(fault.kind))
    # In every failing stretch the server sees at most one call per back-off floor, plus the
    # calls of one instant (the callers that were already past the gate together).
    for a, b, fault in schedule:
        if fault.kind in ("ok", "429"):  # 429s are paced by the rate controller, not the gate
            continue
        inside = [t for t, f in sent if a <= t < b]
        assert len(inside) <= callers * (1 + (b - a) / FLOOR), (fault, len(inside))
        failures = sorted(set(inside))
        gaps = [later - earlier for earlier, later in itertools.pairwise(failures)]
        assert all(gap >= FLOOR - 1e-9 for gap in gaps), gaps
    # Healthy stretches are served again within one capped back-off after every wait the server
    # asked for has passed.
    for a, b, fault in schedule:
        if fault.kind != "ok":
            continue
        free = a
        if b - free > MAXIMUM + 2 * period:
            late = [t for t, f in sent if free + MAXIMUM + period <= t < b]
            assert late, "a healthy server was not called long after the faults ended"
