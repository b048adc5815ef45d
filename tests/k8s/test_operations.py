"""Pod operations over HTTP against the simulator: results, selectors and typed errors."""

from __future__ import annotations

import logging

import pytest
from execpods.core import (
    AllocatorNotice,
    ApiThrottled,
    ApiUnavailable,
    CoreSettings,
    ManualClock,
    NoticeKind,
    PodAdmissionRejected,
    PodConflict,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodSelector,
)
from execpods.core.testing import compose_deterministic
from execpods.k8s import (
    ApiGateway,
    ExecutorPodTemplateBuilder,
    KubernetesApiClient,
    KubernetesPodOperations,
    KubernetesSettings,
    connect,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import APP_ID, IMAGE, executor_pod, free_port

APP = PodSelector(labels={"spark-app-selector": APP_ID, "spark-role": "executor"})
APP_SELECTOR = APP.label_selector()


def _writes(sim: KubeSim) -> list[tuple[str, int, str]]:
    """The creates and deletes the simulator answered: (verb, status, label selector)."""
    return [
        (r.verb, r.status, r.query.get("labelSelector", ""))
        for r in sim.requests()
        if r.method in {"POST", "DELETE"}
    ]


def test_create_list_and_patch_labels(sim: KubeSim, operations: KubernetesPodOperations) -> None:
    for executor_id in (1, 2, 3):
        operations.create(executor_pod(executor_id))
    operations.create(executor_pod(1, app_id="other-app"))
    pods = operations.list(APP)
    assert sorted(p.name for p in pods) == [f"{APP_ID}-exec-{i}" for i in (1, 2, 3)]
    operations.patch_labels(f"{APP_ID}-exec-2", {"spark-exec-inactive": "true"})
    (patched,) = operations.list(
        PodSelector(labels={"spark-app-selector": APP_ID, "spark-exec-inactive": "true"})
    )
    assert patched.name == f"{APP_ID}-exec-2"
    assert patched.labels["spark-exec-id"] == "2"  # a merge, not a replacement


def test_delete_by_name_tolerates_a_missing_pod(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    operations.create(executor_pod(1))
    operations.delete(f"{APP_ID}-exec-1")
    assert sim.pod(f"{APP_ID}-exec-1") is None
    operations.delete(f"{APP_ID}-exec-1")  # already gone: not an error


def test_delete_by_selector_with_ids_and_phase(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    for executor_id in (1, 2, 3, 4):
        operations.create(executor_pod(executor_id))
    sim.run_until_idle()  # all running now
    operations.create(executor_pod(5))  # pending
    operations.create(executor_pod(6))  # pending
    pending_among = PodSelector(
        labels=dict(APP.labels),
        label_in={"spark-exec-id": frozenset({"3", "5"})},
        phase="Pending",
    )
    assert pending_among.label_selector().endswith("spark-exec-id in (3,5)")
    assert operations.delete_by_selector(pending_among) == 1
    assert sim.pod(f"{APP_ID}-exec-5") is None
    assert sim.pod(f"{APP_ID}-exec-3") is not None
    by_ids = PodSelector(labels=dict(APP.labels), label_in={"spark-exec-id": frozenset({"1", "2"})})
    assert operations.delete_by_selector(by_ids) == 2
    sim.run_until_idle()
    remaining = sorted(p.labels["spark-exec-id"] for p in operations.list(APP))
    assert remaining == ["3", "4", "6"]


@pytest.fixture(params=[0, 4], ids=["official client", "lean transport"])
def either_path(
    request: pytest.FixtureRequest, api_client: KubernetesApiClient
) -> KubernetesPodOperations:
    """Pod operations whose creates go through the official client or the lean transport."""
    gateway = ApiGateway(
        api_client, namespace="default", request_timeout=5, create_pool=request.param
    )
    assert (gateway.create_transport is not None) == (request.param > 0)
    return KubernetesPodOperations(gateway)


def test_creation_errors_arrive_typed(sim: KubeSim, either_path: KubernetesPodOperations) -> None:
    operations = either_path
    operations.create(executor_pod(1))
    with pytest.raises(PodConflict) as conflict:
        operations.create(executor_pod(1))
    assert conflict.value.status == 409

    sim.reject_creates(403)
    with pytest.raises(PodAdmissionRejected):
        operations.create(executor_pod(2))

    sim.reject_creates(422)
    with pytest.raises(PodAdmissionRejected) as quota:
        operations.create(executor_pod(3))
    assert quota.value.status == 422
    assert "exceeded quota" in str(quota.value)

    sim.reject_creates(403, message='User "spark" cannot create pods')
    with pytest.raises(PodForbidden):
        operations.create(executor_pod(4))

    invalid = executor_pod(5)
    invalid["spec"]["containers"] = []
    with pytest.raises(PodInvalid):
        operations.create(invalid)

    sim.fail_requests(500, count=1)
    with pytest.raises(ApiUnavailable) as unavailable:
        operations.create(executor_pod(6))
    assert unavailable.value.outcome_unknown

    sim.throttle(1, retry_after=7)
    with pytest.raises(ApiThrottled) as throttled:
        operations.create(executor_pod(7))
    assert throttled.value.retry_after == 7.0

    operations.create(executor_pod(8))  # every fault was one-shot
    assert sim.pod(f"{APP_ID}-exec-8") is not None


def test_other_errors_arrive_typed(sim: KubeSim, operations: KubernetesPodOperations) -> None:
    with pytest.raises(PodNotFound):
        operations.get("nope")
    with pytest.raises(PodNotFound):
        operations.patch_labels("nope", {"a": "b"})
    sim.fail_requests(503, count=1)
    with pytest.raises(ApiUnavailable):
        operations.list(APP)
    sim.throttle(1, retry_after=2)
    with pytest.raises(ApiThrottled):
        operations.delete("anything")


def test_an_unreachable_server_is_unavailable() -> None:
    client = connect(api_url=f"http://127.0.0.1:{free_port()}")
    operations = KubernetesPodOperations(ApiGateway(client, namespace="default", request_timeout=2))
    with pytest.raises(ApiUnavailable, match="list pods"):
        operations.list(APP)
    client.close()


def test_a_slow_server_times_out_as_unavailable(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    operations = KubernetesPodOperations(
        ApiGateway(api_client, namespace="default", request_timeout=0.2)
    )
    sim.set_latency(1.0)
    with pytest.raises(ApiUnavailable, match="Timeout"):
        operations.list(APP)


def test_creation_errors_reach_the_core_allocator_typed(
    sim: KubeSim,
    operations: KubernetesPodOperations,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The core's allocator over the adapter: it decides from the error's type alone."""
    builder = ExecutorPodTemplateBuilder(
        settings=KubernetesSettings(container_image=IMAGE), namespace="default"
    )
    clock = ManualClock()
    composed = compose_deterministic(
        # Refused creates count as executor failures: a limit this test does not reach.
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "100"}),
        app_id=APP_ID,
        pod_builder=builder,
        pod_operations=operations,
        clock=clock,
    )
    allocator, store = composed.allocator, composed.store
    notices: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(notices.append)
    allocator.start(APP_ID)
    sim.reject_creates(422, count=3)  # a quota: the pods were refused, nothing to track
    with caplog.at_level(logging.WARNING, logger="execpods.core"):
        allocator.set_total_expected_executors(3)  # a round at once (the store is deterministic)
    assert "PodAdmissionRejected" in caplog.text
    assert "exceeded quota" in caplog.text
    assert sum(n.count for n in notices if n.kind is NoticeKind.CREATE_REFUSED) == 3
    assert allocator.outstanding_pods == 0, "refused creates are not tracked"
    assert sim.pods() == []
    caplog.clear()
    clock.advance(60)  # past the refusal's backoff
    sim.fail_requests(500, count=1)  # the answer is lost: the pod may exist, so it is tracked
    with caplog.at_level(logging.WARNING, logger="execpods.core"):
        allocator.on_new_snapshots([store.current_snapshot])
    assert "ApiUnavailable" in caplog.text
    # Executor 4's answer was lost, so it is tracked and holds the profile back; 5 and 6 went in.
    refused = [("create", 422, "")] * 3
    assert _writes(sim) == [*refused, ("create", 500, ""), ("create", 201, ""), ("create", 201, "")]
    assert allocator.outstanding_pods == 3
    allocator.on_new_snapshots([store.current_snapshot])
    assert len(_writes(sim)) == 6, "held back by the unseen executors"
    clock.advance(composed.backend.settings.pod_creation_timeout + 1)
    allocator.on_new_snapshots([store.current_snapshot])
    writes = _writes(sim)
    # Executor 4's create is confirmed lost by reading it back (one list of that id) instead of
    # being deleted blind; 5 and 6, created but never seen, are deleted; three replacements follow.
    confirm = [
        r
        for r in sim.requests()
        if r.verb == "list" and "spark-exec-id" in r.query.get("labelSelector", "")
    ]
    assert [r.query["labelSelector"] for r in confirm] == [f"{APP_SELECTOR},spark-exec-id in (4)"]
    assert writes[6] == ("deletecollection", 200, f"{APP_SELECTOR},spark-exec-id in (5,6)")
    assert writes[7:] == [("create", 201, "")] * 3


def _lists(sim: KubeSim) -> list[dict[str, str]]:
    """The query of every list the simulator answered (watches are lists too: left out)."""
    return [r.query for r in sim.requests() if r.verb == "list"]


def test_lists_are_read_a_page_at_a_time_as_one_consistent_list(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    for executor_id in range(1, 6):
        sim.create_pod(executor_pod(executor_id))
    version_before_pages = sim.resource_version
    listed: list[str] = []

    def between_pages(call: object) -> None:
        # A pod created while the pages are read is not in this list: the pages are one snapshot.
        if len(listed) == 0:
            listed.append("first page")
            sim.create_pod(executor_pod(6))

    paged = KubernetesPodOperations(
        ApiGateway(api_client, namespace="default", request_timeout=5, telemetry=between_pages),
        page_size=2,
    )
    pods, version = paged.list_with_version(APP_SELECTOR)
    assert sorted(int(p.labels["spark-exec-id"]) for p in pods) == [1, 2, 3, 4, 5]
    assert version == version_before_pages
    queries = _lists(sim)
    assert [q.get("limit") for q in queries] == ["2", "2", "2"]
    assert "continue" not in queries[0]
    assert all(q.get("continue") for q in queries[1:])
    assert all("resourceVersion" not in q for q in queries[1:])  # the token carries it
    assert len(paged.list(APP)) == 6


def test_an_expired_continue_token_restarts_the_list_in_one_answer(
    sim: KubeSim, api_client: KubernetesApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    for executor_id in range(1, 6):
        sim.create_pod(executor_pod(executor_id))
    calls: list[object] = []

    def expire_after_first_page(call: object) -> None:
        calls.append(call)
        if len(calls) == 1:  # the server moves on and forgets the first page's version
            sim.create_pod(executor_pod(6))
            sim.compact()

    paged = KubernetesPodOperations(
        ApiGateway(
            api_client, namespace="default", request_timeout=5, telemetry=expire_after_first_page
        ),
        page_size=2,
    )
    with caplog.at_level(logging.INFO, logger="execpods.k8s.operations"):
        pods, version = paged.list_with_version(APP_SELECTOR)
    assert sorted(int(p.labels["spark-exec-id"]) for p in pods) == [1, 2, 3, 4, 5, 6]
    assert version == sim.resource_version
    pages = [
        (r.query.get("limit"), "continue" in r.query, r.status)
        for r in sim.requests()
        if r.verb == "list"
    ]
    # The first page, the second refused (410), then one unpaginated list.
    assert pages == [("2", False, 200), ("2", True, 410), (None, False, 200)]
    assert "expired after 2 pods" in caplog.text


def test_a_page_size_of_zero_lists_in_one_answer(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    for executor_id in range(1, 4):
        sim.create_pod(executor_pod(executor_id))
    whole = KubernetesPodOperations(ApiGateway(api_client, namespace="default"), page_size=0)
    assert len(whole.list(APP)) == 3
    assert [q.get("limit") for q in _lists(sim)] == [None]
    with pytest.raises(ValueError, match="page_size"):
        KubernetesPodOperations(ApiGateway(api_client, namespace="default"), page_size=-1)
