"""Issue 20's defect 13: the watch no longer sleeps through the end of an outage.

After an outage the watch had scheduled its retry up to its back-off cap away (14.6 s after a 5 s
outage), so new executors showed on the stream ~10 s after they ran. Now the gateway's back-off
gate tells the watch when any other call succeeds again, and the retry wait ends then. Fails on
fde8f25: the watch waits out its full back-off.
"""

from __future__ import annotations

import pytest
from execpods.core import SPARK_LABELS, ApiUnavailable, PodSelector
from execpods.k8s import (
    ApiBackoffGate,
    ApiGateway,
    KubernetesApiClient,
    KubernetesPodOperations,
    KubernetesSettings,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, WAIT, RecordingStore, eventually, executor_pod
from tests.k8s.test_watch_source import SignallingWaiter, start_watch

SLOW_RETRIES = KubernetesSettings(backoff_initial=60, backoff_max=60)
"""The watch's own retry waits are 6-60 s: far longer than the test may take."""


def test_a_failing_watch_retries_as_soon_as_another_call_succeeds(
    sim: KubeSim, api_client: KubernetesApiClient, store: RecordingStore
) -> None:
    gate = ApiBackoffGate(initial=0.001, maximum=0.001)
    gateway = ApiGateway(api_client, namespace="default", request_timeout=5, backoff=gate)
    operations = KubernetesPodOperations(gateway)
    waiter = SignallingWaiter()
    source = start_watch(sim, operations, store, waiter=waiter, settings=SLOW_RETRIES)
    everything = PodSelector.executors_of(SPARK_LABELS, APP_ID)

    sim.fail_requests(503)  # the outage: the watch is cut, and the other loops' calls fail
    sim.drop_watches(abrupt=True)
    assert waiter.waiting.wait(WAIT)  # the watch backs off: 6-60 s
    with pytest.raises(ApiUnavailable):
        operations.list(everything)
    sim.clear_faults()
    assert eventually(lambda: gate.remaining() == 0)

    operations.list(everything)  # the API answers again: the watch's wait ends now
    assert sim.wait_for_watchers(1, timeout=3.0)  # well inside the 6 s floor of its wait
    assert source.stats.recoveries == 1
    sim.create_pod(executor_pod(5))
    assert store.wait_snapshot(lambda s: 5 in s, timeout=3.0)
    source.stop()
