"""Every API call path honours the server: 429 Retry-After and jittered back-off on 5xx.

On the landed code (8171a79) only the watch backed off; a create answered 429 `Retry-After: 5`
was followed by deletes, lists and the next round's creates at full speed. Here the gateway asks
one shared `ApiBackoffGate` before every call. The property runs the gate against random fault
sequences and impatient callers on a fake clock and bounds what reaches the server.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from execpods.core import SPARK_LABELS, ApiThrottled, ApiUnavailable, PodConflict, PodSelector
from execpods.k8s import ApiBackoffGate, ApiGateway, KubernetesApiClient, KubernetesPodOperations
from execpods.k8s.backoff import RETRY_AFTER_CAP
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


def test_a_429_holds_back_creates_deletes_lists_and_watches(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    clock = FakeClock()
    gate = ApiBackoffGate(initial=INITIAL, maximum=MAXIMUM, clock=clock, rng=random.Random(1))
    operations = gated_operations(api_client, gate)
    selector = PodSelector.executors_of(SPARK_LABELS, APP_ID)
    sim.throttle(1, retry_after=5)
    with pytest.raises(ApiThrottled):
        operations.create(executor_pod(1))
    sim.clear_requests()
    clock.now = 4.9  # within Retry-After: nothing is sent, whatever the call
    calls: list[Callable[[], object]] = [
        lambda: operations.create(executor_pod(2)),
        lambda: operations.delete_by_selector(selector),
        lambda: operations.list(selector),
        lambda: operations.gateway.watch_pods(
            selector.label_selector(), resource_version=None, timeout_seconds=1, read_timeout=2
        ),
    ]
    for call in calls:
        with pytest.raises(ApiThrottled) as refused:
            call()
        assert refused.value.retry_after == pytest.approx(0.1)
    assert sim.requests() == []
    clock.now = 5.0
    operations.create(executor_pod(2))  # the wait is over: sent, answered, and the gate resets
    assert [r.verb for r in sim.requests()] == ["create"]
    assert gate.remaining() == 0.0


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
    blocked_until = 0.0
    steps = int(end / period) + 1
    for step in range(steps):
        clock.now = step * period
        for _ in range(callers):
            try:
                gate.check("call")
            except ApiThrottled:
                continue
            fault = fault_at(clock.now)
            assert clock.now >= blocked_until - 1e-9, "sent inside a Retry-After"
            sent.append((clock.now, fault))
            if fault.kind == "ok":
                gate.succeeded()
            elif fault.kind == "429":
                retry_after = min(fault.retry_after, RETRY_AFTER_CAP)
                gate.failed(ApiThrottled("429", retry_after=fault.retry_after))
                blocked_until = max(blocked_until, clock.now + retry_after)
            else:
                gate.failed(ApiUnavailable(fault.kind))
    # In every failing stretch the server sees at most one call per back-off floor, plus the
    # calls of one instant (the callers that were already past the gate together).
    for a, b, fault in schedule:
        if fault.kind == "ok":
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
        asked = [
            t + min(f.retry_after, RETRY_AFTER_CAP) for t, f in sent if f.kind == "429" and t < a
        ]
        free = max([a, *asked])
        if b - free > MAXIMUM + 2 * period:
            late = [t for t, f in sent if free + MAXIMUM + period <= t < b]
            assert late, "a healthy server was not called long after the faults ended"
