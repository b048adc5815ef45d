"""Issue 11's watch defects: the back-off outliving the outage, and "too large resource version".

Both fail on the landed code (8171a79): its back-off reset only when a watch ended cleanly, so a
stream cut after an outage waited as long as the outage's last retry; and it treated a 504 "Too
large resource version" as an outage, asking again for the version the server has not reached.
"""

from __future__ import annotations

import random

from execpods.core import ExecutorState
from execpods.k8s import (
    ApiGateway,
    KubernetesPodOperations,
    KubernetesSettings,
    WatchSource,
    connect,
)
from execpods.k8s.errors import (
    ResourceExpired,
    ResourceVersionTooLarge,
    error_from_status,
    status_event_error,
)
from execpods.kubesim import KubeSim
from execpods.kubesim.errors import ApiError

from tests.k8s.conftest import APP_ID, FAST, RecordingStore, executor_pod
from tests.k8s.test_watch_source import (
    _RUNNING,
    CannedApiServer,
    VirtualWaiter,
    api_pod,
    start_watch,
    state_of,
)

SLOW_GROWTH = KubernetesSettings(backoff_initial=0.5, backoff_max=30, container_image="spark:t")


def test_the_backoff_resets_once_the_watch_works_again(
    sim: KubeSim, operations: KubernetesPodOperations, store: RecordingStore
) -> None:
    waiter = VirtualWaiter(sim)
    source = start_watch(sim, operations, store, waiter=waiter, settings=SLOW_GROWTH)
    sim.fail_requests(503, count=7)  # an outage: seven retries, the back-off grows to its cap
    sim.drop_watches(abrupt=True)
    assert waiter.wait_for_waits(8)
    assert sim.wait_for_watchers(1, 10)
    sim.create_pod(executor_pod(1))  # the watch works again: it delivers
    assert store.wait_snapshot(lambda s: 1 in s)
    waits_before = len(waiter.waits)
    sim.drop_watches(abrupt=True)  # a routine cut, long after the outage
    assert waiter.wait_for_waits(waits_before + 1)
    after_cut = waiter.waits[waits_before]
    assert after_cut <= SLOW_GROWTH.backoff_initial, waiter.waits  # a fresh back-off
    assert max(waiter.waits[:waits_before]) > 4 * SLOW_GROWTH.backoff_initial  # it had grown
    assert sim.wait_for_watchers(1, 10)
    source.stop()


def test_too_large_resource_version_is_its_own_error_as_client_go_reads_it() -> None:
    status = ApiError.too_large_resource_version(120, 100).status()
    error = status_event_error(status, what="watch")
    assert isinstance(error, ResourceVersionTooLarge)
    assert isinstance(error, ResourceExpired)  # the watch re-lists on it, as after a 410
    # Only the cause (or the message) makes a 504 one: a plain gateway timeout is an outage.
    plain = error_from_status(504, "Timeout: request did not complete", what="watch")
    assert not isinstance(plain, ResourceExpired)
    old_server = {"code": 504, "message": "Timeout: Too large resource version: 9, current: 3"}
    assert isinstance(status_event_error(old_server, what="watch"), ResourceVersionTooLarge)


def test_a_watch_answered_too_large_relists_instead_of_asking_again(
    store: RecordingStore,
) -> None:
    too_large = ApiError.too_large_resource_version(10, 7).status()
    pod_list: dict[str, object] = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "10"},
        "items": [api_pod(1, "Running")],
    }
    server = CannedApiServer(pod_list, [{"type": "ERROR", "object": too_large}])
    client = connect(api_url=server.url)
    operations = KubernetesPodOperations(ApiGateway(client, namespace="default", request_timeout=5))
    source = WatchSource(store, operations, settings=FAST, rng=random.Random(7))
    _RUNNING.append(source)
    try:
        source.start(APP_ID)
        assert store.wait_for(lambda s: len(s.replacements) >= 2)  # listed again from scratch
        assert source.stats.too_large == 1
        assert source.stats.failures == 0  # not an outage to wait out
        assert state_of(store.current_snapshot, 1) is ExecutorState.RUNNING
    finally:
        source.stop()
        client.close()
        server.close()
