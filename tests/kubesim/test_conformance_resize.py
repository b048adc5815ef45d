"""In-place resize (`pods/resize`, KEP 1287 as of Kubernetes 1.33) and the metrics API, with the
official client over HTTP: what Spark's ExecutorResizePlugin (and the sidecar's resizer) use."""

from __future__ import annotations

from typing import Any

import pytest
from execpods.kubesim import ANNOTATION_PREFIX, KubeSim
from kubernetes.client.exceptions import ApiException

from tests.kubesim.conftest import NS, CoreApi, pod_body
from tests.kubesim.support import raw

MEMORY = "spark-kubernetes-executor"


def _sized_pod(sim: KubeSim, core: CoreApi, name: str = "e") -> None:
    body = pod_body(name)
    body["spec"]["containers"][0]["name"] = MEMORY
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"},
    }
    body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    core.create_namespaced_pod(NS, body)
    sim.run_until_idle()


def _memory_patch(limit: str, request: str | None = None) -> dict[str, Any]:
    resources = {"limits": {"memory": limit}, "requests": {"memory": request or limit}}
    return {"spec": {"containers": [{"name": MEMORY, "resources": resources}]}}


def test_a_resize_changes_the_spec_then_the_kubelet_reports_it(sim: KubeSim, core: CoreApi) -> None:
    _sized_pod(sim, core)
    resized = core.patch_namespaced_pod_resize("e", NS, _memory_patch("2Gi"))
    (container,) = resized.spec.containers
    assert container.resources.limits["memory"] == "2Gi"
    assert container.resources.requests["memory"] == "2Gi"
    assert container.resources.limits["nvidia.com/gpu"] == "1", "the rest is kept"
    (status,) = resized.status.container_statuses
    assert status.resources.limits["memory"] == "1Gi", "the kubelet has not actuated it yet"
    sim.run_until_idle()
    pod = core.read_namespaced_pod("e", NS)
    (status,) = pod.status.container_statuses
    assert status.resources.limits["memory"] == "2Gi"
    assert status.allocated_resources["memory"] == "2Gi"


def test_a_resize_keeps_only_the_containers_resources(sim: KubeSim, core: CoreApi) -> None:
    """The API server's resize strategy takes only the resources from the body: an image, a
    label or a deadline in it is dropped, silently (a real kube-apiserver 1.36 answers 200)."""
    _sized_pod(sim, core)
    patch = _memory_patch("2Gi")
    patch["metadata"] = {"labels": {"x": "y"}}
    patch["spec"]["activeDeadlineSeconds"] = 5
    patch["spec"]["containers"][0]["image"] = "other:1"
    resized = core.patch_namespaced_pod_resize("e", NS, patch)
    (container,) = resized.spec.containers
    assert container.resources.limits["memory"] == "2Gi"
    assert container.image == "busybox:1.36"
    assert resized.spec.active_deadline_seconds is None
    assert "x" not in (resized.metadata.labels or {})


def test_a_resize_may_change_only_cpu_and_memory(sim: KubeSim, core: CoreApi) -> None:
    _sized_pod(sim, core)
    gpus = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod_resize(
            "e", NS, {"spec": {"containers": [{"name": MEMORY, "resources": gpus}]}}
        )
    assert refused.value.status == 422
    assert "only cpu and memory resources are mutable" in str(refused.value.body)


def test_a_resize_may_not_change_the_qos_class(sim: KubeSim, core: CoreApi) -> None:
    body = pod_body("g")
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    core.create_namespaced_pod(NS, body)
    sim.run_until_idle()
    assert core.read_namespaced_pod("g", NS).status.qos_class == "Guaranteed"
    patch = {
        "spec": {
            "containers": [
                {"name": body["spec"]["containers"][0]["name"], "resources": {
                    "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}
            ]
        }
    }  # fmt: skip
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod_resize("g", NS, patch)
    assert refused.value.status == 422
    assert "QOS Class may not change" in str(refused.value.body)


def test_resources_stay_immutable_through_the_pod_itself(sim: KubeSim, core: CoreApi) -> None:
    _sized_pod(sim, core)
    with pytest.raises(ApiException) as refused:
        core.patch_namespaced_pod("e", NS, _memory_patch("2Gi"))
    assert refused.value.status == 422


def test_a_finished_pod_keeps_its_resized_spec_and_nothing_actuates_it(
    sim: KubeSim, core: CoreApi
) -> None:
    """A pod whose containers exited (Succeeded): the API server takes the resize (it checks
    running containers' support only); no kubelet acts on it."""
    body = pod_body("done", annotations={f"{ANNOTATION_PREFIX}exit-after": "0.5"})
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }
    core.create_namespaced_pod(NS, body)
    sim.run_until_idle()
    assert core.read_namespaced_pod("done", NS).status.phase == "Succeeded"
    name = body["spec"]["containers"][0]["name"]
    patch = {"spec": {"containers": [{"name": name, "resources": {
        "limits": {"memory": "2Gi"}, "requests": {"memory": "2Gi"}}}]}}  # fmt: skip
    resized = core.patch_namespaced_pod_resize("done", NS, patch)
    assert resized.spec.containers[0].resources.limits["memory"] == "2Gi"
    sim.run_until_idle()
    (status,) = core.read_namespaced_pod("done", NS).status.container_statuses
    assert status.state.terminated is not None


@pytest.mark.kubesim_only(reason="the metrics API is metrics-server's, not the API server's")
def test_the_metrics_api_reports_each_running_container_s_usage(
    sim: KubeSim, core: CoreApi
) -> None:
    _sized_pod(sim, core, "e")
    core.create_namespaced_pod(NS, pod_body("waiting", labels={"app": "b"}))  # not yet running
    sim.set_usage("e", memory="900Mi", cpu="250m")
    status, body = raw(sim, "GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods")
    assert status == 200
    assert body["kind"] == "PodMetricsList"
    (item,) = body["items"]
    assert item["metadata"]["name"] == "e"
    assert item["containers"] == [{"name": MEMORY, "usage": {"cpu": "250m", "memory": "900Mi"}}]
    status, body = raw(
        sim, "GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods?labelSelector=app%3Db"
    )
    assert (status, body["items"]) == (200, [])
    status, one = raw(sim, "GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods/e")
    assert (status, one["kind"], one["containers"]) == (200, "PodMetrics", item["containers"])
    status, _ = raw(sim, "GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods/waiting")
    assert status == 404, "metrics-server has none for a pod that is not running"
