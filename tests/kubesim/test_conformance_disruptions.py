"""Conformance, the faults issue 20's scenarios need: finalizers holding a terminating pod, denied
deletes, and disruptions (evictions, preemption, the taint manager, the eviction subresource).

The pinned official ``kubernetes`` client, over HTTP, against the simulator in deterministic
mode: no sleeps, the virtual clock moves the kubelet.
"""

from __future__ import annotations

from typing import Any

import pytest
from execpods.kubesim import KubeSim
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, open_watch, pod_body, read_events
from tests.kubesim.support import names, raw, running_pod, status_of


def disruption(pod: Any) -> Any:
    found = [c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"]
    return found[0] if found else None


# -- finalizers ------------------------------------------------------------------------------------


def test_a_finalizer_holds_a_running_pod_after_its_containers_stop(
    sim: KubeSim, core: CoreApi
) -> None:
    core.create_namespaced_pod(NS, pod_body("held", finalizers=["example.com/keep"]))
    sim.run_until_idle()
    assert core.read_namespaced_pod("held", NS).status.phase == "Running"
    resp = open_watch(core, timeout=3, resource_version=sim.resource_version)
    core.delete_namespaced_pod("held", NS, grace_period_seconds=5)
    sim.run_until_idle()
    held = core.read_namespaced_pod("held", NS)
    assert held.metadata.deletion_timestamp is not None  # terminating, and stays so
    assert held.status.phase == "Failed"
    assert held.status.container_statuses[0].state.terminated.exit_code == 143
    core.delete_namespaced_pod("held", NS)  # deleting again changes nothing
    sim.advance(600)
    assert names(core.list_namespaced_pod(NS)) == ["held"]
    core.patch_namespaced_pod("held", NS, {"metadata": {"finalizers": None}})
    sim.run_until_idle()
    events = read_events(resp, limit=10)
    assert events[-1]["type"] == "DELETED"
    assert [e["type"] for e in events[:-1]] == ["MODIFIED"] * (len(events) - 1)
    assert core.list_namespaced_pod(NS).items == []


# -- denied deletes --------------------------------------------------------------------------------


@pytest.mark.kubesim_only(
    reason=(
        "fault injection (a webhook denying deletes): no admission webhook server runs beside"
        " the real one"
    )
)
@pytest.mark.parametrize(
    ("code", "reason", "text"),
    [(403, "Forbidden", "admission webhook"), (400, "BadRequest", "cannot be deleted")],
)
def test_a_denied_delete_fails_for_matching_pods_only(
    sim: KubeSim, core: CoreApi, code: int, reason: str, text: str
) -> None:
    core.create_namespaced_pod(NS, pod_body("kept", labels={"app": "a", "keep": "yes"}))
    core.create_namespaced_pod(NS, pod_body("free", labels={"app": "a"}))
    sim.run_until_idle()
    sim.deny_deletes({"keep": "yes"}, code=code, message="pods marked keep stay")
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("kept", NS)
    assert exc.value.status == code
    status = status_of(exc.value)
    assert status["reason"] == reason
    assert text in status["message"]
    assert "pods marked keep stay" in status["message"]
    assert core.read_namespaced_pod("kept", NS).metadata.deletion_timestamp is None
    core.delete_namespaced_pod("free", NS, grace_period_seconds=0)  # not matched: deleted
    sim.clear_faults()
    core.delete_namespaced_pod("kept", NS, grace_period_seconds=0)
    assert core.list_namespaced_pod(NS).items == []


@pytest.mark.kubesim_only(
    reason=(
        "fault injection (a webhook denying deletes): no admission webhook server runs beside"
        " the real one"
    )
)
def test_a_denied_deletecollection_deletes_the_others_then_fails(
    sim: KubeSim, core: CoreApi
) -> None:
    for name, keep in (("a", "no"), ("b", "yes"), ("c", "no")):
        core.create_namespaced_pod(NS, pod_body(name, labels={"app": "x", "keep": keep}))
    sim.run_until_idle()
    sim.deny_deletes({"keep": "yes"}, count=1)
    with pytest.raises(ApiException) as exc:
        core.delete_collection_namespaced_pod(NS, label_selector="app=x", grace_period_seconds=0)
    assert exc.value.status == 403
    assert names(core.list_namespaced_pod(NS)) == ["b"]
    # The denial was armed for one delete: the next one goes through.
    core.delete_collection_namespaced_pod(NS, label_selector="app=x", grace_period_seconds=0)
    assert core.list_namespaced_pod(NS).items == []


@pytest.mark.kubesim_only(reason="kubesim's control endpoint")
def test_denied_deletes_over_the_control_endpoint(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    body = {"labels": {"app": "a"}, "code": 422, "message": "immutable"}
    assert raw(sim, "POST", "/_kubesim/faults/deny-deletes", body)[0] == 200
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("p", NS)
    assert exc.value.status == 422
    assert raw(sim, "POST", "/_kubesim/faults/deny-deletes", {"labels": ["x"]})[0] == 400


# -- disruptions -----------------------------------------------------------------------------------


def test_a_kubelet_eviction_fails_the_pod_with_a_disruption_target(
    sim: KubeSim, core: CoreApi
) -> None:
    running_pod(sim, core)
    sim.evict("p", NS)
    pod = core.read_namespaced_pod("p", NS)
    assert pod.status.phase == "Failed"
    assert pod.status.reason == "Evicted"
    condition = disruption(pod)
    assert (condition.status, condition.reason) == ("True", "TerminationByKubelet")
    assert pod.metadata.deletion_timestamp is None  # the kubelet leaves the object


@pytest.mark.parametrize(
    ("cause", "reason"),
    [
        ("Preempted", "PreemptionByScheduler"),
        ("DeletionByTaintManager", "DeletionByTaintManager"),
    ],
)
def test_preemption_and_the_taint_manager_mark_then_delete_gracefully(
    sim: KubeSim, core: CoreApi, cause: str, reason: str
) -> None:
    running_pod(sim, core)
    resp = open_watch(core, timeout=3, resource_version=sim.resource_version)
    sim.evict("p", NS, cause=cause)
    marked = core.read_namespaced_pod("p", NS)
    assert marked.metadata.deletion_timestamp is not None
    assert disruption(marked).reason == reason
    sim.run_until_idle()
    events = read_events(resp, limit=10)
    assert events[-1]["type"] == "DELETED"
    last = events[-1]["object"]
    assert last["status"]["phase"] == "Failed"
    conditions = {c["type"]: c for c in last["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == reason


def test_the_eviction_subresource_disrupts_the_pod(
    sim: KubeSim, api_client: client.ApiClient, core: CoreApi
) -> None:
    running_pod(sim, core)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="p", namespace=NS))
    core.create_namespaced_pod_eviction("p", NS, eviction)
    pod = core.read_namespaced_pod("p", NS)
    assert pod.metadata.deletion_timestamp is not None
    assert disruption(pod).reason == "EvictionByEvictionAPI"
    sim.run_until_idle()
    assert core.list_namespaced_pod(NS).items == []
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod_eviction("p", NS, eviction)
    assert exc.value.status == 404


def test_an_unknown_cause_is_refused(sim: KubeSim, core: CoreApi) -> None:
    running_pod(sim, core)
    with pytest.raises(ValueError, match="unknown disruption cause"):
        sim.evict("p", NS, cause="Bored")
