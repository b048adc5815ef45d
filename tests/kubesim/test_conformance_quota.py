"""ResourceQuota: objects, usage, and the admission's exact 403 wording, through the official client
over HTTP: a conformance module, so it runs on kubesim and (with the real API server built) on
kube-apiserver v1.36 with its quota controller, the same assertions on both.

On a real server the quota controller computes `status.used` a moment after a quota is created or
a pod ends (a create before that is refused "status unknown for quota"), so the tests wait for
the usage they read; kubesim computes it at once, so the waits return at once there."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from execpods.kubesim import KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, pod_body


def quota_body(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard, **spec},
    }


def sized_pod(name: str, *, cpu: str | None = "1", memory: str | None = "1408Mi") -> dict[str, Any]:
    body = pod_body(name)
    resources: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    if cpu is not None:
        resources["requests"]["cpu"] = cpu
    if memory is not None:
        resources["requests"]["memory"] = memory
        resources["limits"]["memory"] = memory
    body["spec"]["containers"][0]["resources"] = resources
    return body


def refusal(core: CoreApi, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod(NS, body)
    assert raised.value.status == 403
    status: dict[str, Any] = orjson.loads(raised.value.body or "{}")
    return status


def used(core: CoreApi, name: str, *, expect: dict[str, str] | None = None) -> dict[str, str]:
    """The quota's `status.used`, once the quota controller has computed it (and, with
    `expect`, once it says that: the controller gives usage back asynchronously)."""
    deadline = time.monotonic() + 30.0
    while True:
        status = core.read_namespaced_resource_quota(name, NS).status
        found = dict(status.used or {}) if status is not None else {}
        if found and (expect is None or found == expect):
            return found
        if time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def quota_ready(core: CoreApi, namespace: str, body: dict[str, Any]) -> None:
    """Create a quota and wait until its usage is known (before that a real server refuses every
    pod it covers: "status unknown for quota")."""
    core.create_namespaced_resource_quota(namespace, body)
    deadline = time.monotonic() + 30.0
    name = body["metadata"]["name"]
    while not _usage_known(core.read_namespaced_resource_quota(name, namespace)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the quota {name} has no usage after 30 s")
        time.sleep(0.05)


def _usage_known(quota: Any) -> bool:
    return quota.status is not None and bool(quota.status.used)


@pytest.fixture(autouse=True)
def no_quotas(core: CoreApi) -> Iterator[None]:
    """No quota before or after a test (a real server is shared by the session, and its
    namespaces are emptied of pods between tests, not of quotas)."""

    def clear() -> None:
        for namespace in (NS, "other"):
            with contextlib.suppress(ApiException):
                core.delete_collection_namespaced_resource_quota(namespace)

    clear()
    yield
    clear()


def test_a_pod_quota_admits_its_worth_and_refuses_the_next_in_the_api_servers_words(
    core: CoreApi,
) -> None:
    quota_ready(core, NS, quota_body("compute", {"pods": "2"}))
    assert used(core, "compute") == {"pods": "0"}
    core.create_namespaced_pod(NS, sized_pod("exec-1"))
    core.create_namespaced_pod(NS, sized_pod("exec-2"))
    assert used(core, "compute") == {"pods": "2"}
    status = refusal(core, sized_pod("exec-3"))
    assert status["reason"] == "Forbidden"
    assert status["details"] == {"name": "exec-3", "kind": "pods"}
    assert status["message"] == (
        'pods "exec-3" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=2, '
        "limited: pods=2"
    )
    assert core.list_namespaced_pod(NS).items.__len__() == 2


def test_only_the_exhausted_resources_are_named_sorted_in_canonical_quantities(
    core: CoreApi,
) -> None:
    hard = {"requests.memory": "3Gi", "requests.cpu": "2500m", "pods": "10"}
    quota_ready(core, NS, quota_body("compute", hard))
    core.create_namespaced_pod(NS, sized_pod("a", cpu="1"))
    core.create_namespaced_pod(NS, sized_pod("b", cpu="1"))
    assert used(core, "compute") == {"pods": "2", "requests.cpu": "2", "requests.memory": "2816Mi"}
    status = refusal(core, sized_pod("c", cpu="1"))
    assert status["message"] == (
        'pods "c" is forbidden: exceeded quota: compute, requested: requests.cpu=1,'
        "requests.memory=1408Mi, used: requests.cpu=2,requests.memory=2816Mi, limited: "
        "requests.cpu=2500m,requests.memory=3Gi"
    )
    core.create_namespaced_pod(NS, sized_pod("d", cpu="500m", memory="256Mi"))
    assert used(core, "compute")["requests.cpu"] == "2500m"


def test_a_quota_on_cpu_needs_every_container_to_name_it(core: CoreApi) -> None:
    quota_ready(core, NS, quota_body("compute", {"limits.cpu": "4"}))
    status = refusal(core, sized_pod("exec-1"))
    assert status["message"] == (
        'pods "exec-1" is forbidden: failed quota: compute: must specify limits.cpu for: main'
    )


def test_usage_is_given_back_when_pods_end_and_a_raised_quota_admits_more(
    sim: KubeSim, core: CoreApi
) -> None:
    quota_ready(core, NS, quota_body("compute", {"pods": "1"}))
    core.create_namespaced_pod(NS, sized_pod("exec-1"))
    refusal(core, sized_pod("exec-2"))
    core.delete_namespaced_pod("exec-1", NS, grace_period_seconds=0)
    sim.run_until_idle()
    assert used(core, "compute", expect={"pods": "0"}) == {"pods": "0"}
    core.create_namespaced_pod(NS, sized_pod("exec-2"))
    refusal(core, sized_pod("exec-3"))
    core.patch_namespaced_resource_quota("compute", NS, {"spec": {"hard": {"pods": "3"}}})
    deadline = time.monotonic() + 30.0
    while core.read_namespaced_resource_quota("compute", NS).status.hard != {"pods": "3"}:
        assert time.monotonic() < deadline, "the raised quota was never synced"
        time.sleep(0.05)
    core.create_namespaced_pod(NS, sized_pod("exec-3"))
    assert used(core, "compute") == {"pods": "2"}


def test_a_failed_pod_stops_counting_but_its_object_count_stays(
    sim: KubeSim, core: CoreApi
) -> None:
    quota_ready(core, NS, quota_body("q", {"pods": "5", "count/pods": "5"}))
    core.create_namespaced_pod(NS, sized_pod("exec-1"))
    sim.run_until_idle()
    # As its kubelet writes it (the status subresource): the pod failed.
    core.patch_namespaced_pod_status("exec-1", NS, {"status": {"phase": "Failed"}})
    sim.run_until_idle()
    assert used(core, "q", expect={"pods": "0", "count/pods": "1"}) == {
        "pods": "0",
        "count/pods": "1",
    }


def test_scopes_and_quotas_in_other_namespaces(sim: KubeSim, core: CoreApi) -> None:
    quota_ready(core, NS, quota_body("best-effort", {"pods": "0"}, scopes=["BestEffort"]))
    core.create_namespaced_pod(NS, sized_pod("sized"))  # not best effort: not this quota's
    best_effort = sized_pod("bare", cpu=None, memory=None)
    assert "exceeded quota: best-effort" in refusal(core, best_effort)["message"]
    with contextlib.suppress(ApiException):  # a real cluster's test namespaces exist already
        core.create_namespace({"metadata": {"name": "other"}})
    quota_ready(core, "other", quota_body("none", {"pods": "0"}))
    core.create_namespaced_pod(NS, sized_pod("sized-2"))
