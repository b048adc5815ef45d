"""Raw JSON -> ExecutorPod, and the model path agreeing with it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from execpods.core import ContainerRunning, ContainerTerminated, ContainerWaiting
from execpods.devtools.bench.k8s import pod_from_model
from execpods.k8s import (
    MalformedPod,
    pod_from_dict,
    pod_from_dict_strict,
    pod_page,
    pods_from_list_json,
)
from kubernetes.client import ApiClient


def full_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "app-exec-3",
            "namespace": "spark",
            "uid": "u-3",
            "resourceVersion": "42",
            "labels": {"spark-app-selector": "app", "spark-role": "executor", "spark-exec-id": "3"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:30.250000Z",
        },
        "spec": {
            "nodeName": "node-1",
            "restartPolicy": "Never",
            "containers": [{"name": "exec", "image": "img"}],
        },
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "low memory",
            "podIP": "10.0.0.3",
            "containerStatuses": [
                {
                    "name": "exec",
                    "image": "img",
                    "ready": False,
                    "restartCount": 2,
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "message": "killed",
                            "signal": 9,
                        }
                    },
                },
                {"name": "side", "state": {"running": {"startedAt": "2026-01-01T00:00:05Z"}}},
                {"name": "init", "state": {"waiting": {"reason": "ErrImagePull"}}},
                {"name": "unknown"},
            ],
        },
    }


def test_every_field_is_read_from_raw_json() -> None:
    pod = pod_from_dict_strict(full_pod())
    assert pod.name == "app-exec-3"
    assert pod.namespace == "spark"
    assert pod.uid == "u-3"
    assert pod.resource_version == "42"
    assert pod.labels["spark-exec-id"] == "3"
    assert pod.phase == "Failed"
    assert pod.reason == "Evicted"
    assert pod.message == "low memory"
    assert pod.node_name == "node-1"
    assert pod.pod_ip == "10.0.0.3"
    assert pod.restart_policy == "Never"  # what lets checkAllContainers fail a Running pod
    assert not pod.gone
    assert pod.creation_timestamp == datetime(2026, 1, 1, tzinfo=UTC)
    assert pod.deletion_timestamp == datetime(2026, 1, 1, 0, 1, 30, 250000, tzinfo=UTC)
    assert pod.is_deleted
    exec_status, side, init, unknown = pod.container_statuses
    assert exec_status.state == ContainerTerminated(
        exit_code=137, reason="OOMKilled", message="killed", signal=9
    )
    assert exec_status.restart_count == 2
    assert exec_status.image == "img"
    assert side.state == ContainerRunning(started_at=datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    assert init.state == ContainerWaiting(reason="ErrImagePull")
    assert unknown.state is None
    assert pod.terminated_exit_code() == 137


def test_a_minimal_pod_gets_defaults() -> None:
    pod = pod_from_dict_strict({"metadata": {"name": "p"}})
    assert pod.namespace == "default"
    assert pod.phase is None
    assert dict(pod.labels) == {}
    assert pod.container_statuses == ()
    assert pod.restart_policy is None


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda p: p["metadata"].pop("name"), "metadata.name"),
        (lambda p: p.__setitem__("metadata", []), "metadata"),
        (lambda p: p["metadata"].__setitem__("labels", {"spark-exec-id": 3}), "label"),
        (lambda p: p["metadata"].__setitem__("creationTimestamp", "yesterday"), "RFC 3339"),
        (lambda p: p["status"].__setitem__("containerStatuses", {}), "containerStatuses"),
        (
            lambda p: p["status"]["containerStatuses"][0]["state"]["terminated"].pop("exitCode"),
            r"status\.containerStatuses\[0\]\.terminated\.exitCode is not an integer",
        ),
        (
            lambda p: p["status"]["containerStatuses"][1]["state"]["running"].update(startedAt=5),
            r"status\.containerStatuses\[1\]\.running\.startedAt is not a string",
        ),
        (
            lambda p: p["status"]["containerStatuses"].append("not a status"),
            r"status\.containerStatuses\[4\] is not an object",
        ),
        (lambda p: p["status"].__setitem__("phase", 3), "status.phase"),
        (lambda p: p["spec"].__setitem__("restartPolicy", ["Never"]), "spec.restartPolicy"),
    ],
)
def test_a_malformed_pod_is_skipped_with_a_warning(
    mutate: Any, complaint: str, caplog: pytest.LogCaptureFixture
) -> None:
    pod = full_pod()
    mutate(pod)
    with pytest.raises(MalformedPod, match=complaint):
        pod_from_dict_strict(pod)
    with caplog.at_level(logging.WARNING, logger="execpods.k8s.convert"):
        assert pod_from_dict(pod) is None
    assert any("Skipping malformed pod" in r.message for r in caplog.records)


def test_a_list_skips_bad_items_and_keeps_its_version(caplog: pytest.LogCaptureFixture) -> None:
    body = {
        "kind": "PodList",
        "metadata": {"resourceVersion": "77"},
        "items": [full_pod(), {"metadata": {}}, "not a pod"],
    }
    with caplog.at_level(logging.WARNING):
        pods, version = pods_from_list_json(orjson.dumps(body))
    assert [p.name for p in pods] == ["app-exec-3"]
    assert version == "77"
    assert len([r for r in caplog.records if "malformed" in r.message]) == 2


def test_a_page_carries_its_continue_token_and_an_empty_one_means_the_last_page() -> None:
    body = {"metadata": {"resourceVersion": "9", "continue": "abc"}, "items": [full_pod()]}
    page = pod_page(body)
    assert (len(page.pods), page.resource_version, page.continue_token) == (1, "9", "abc")
    assert pod_page({"metadata": {"resourceVersion": "9", "continue": ""}}).continue_token is None
    assert pod_page({"metadata": {"resourceVersion": "9"}}).continue_token is None
    with pytest.raises(MalformedPod, match="continue"):
        pod_page({"metadata": {"continue": 5}, "items": []})


def test_a_list_that_is_not_json_is_malformed() -> None:
    with pytest.raises(MalformedPod):
        pods_from_list_json(b"<html>")


def test_the_model_path_gives_the_same_pod() -> None:
    client = ApiClient()
    raw = full_pod()
    for status in raw["status"]["containerStatuses"]:  # the model insists on these
        status.setdefault("image", "img")
        status.setdefault("imageID", "sha")
        status.setdefault("ready", False)
        status.setdefault("restartCount", 0)
    model = client.deserialize(orjson.dumps(raw).decode(), "V1Pod", "application/json")
    assert pod_from_model(model, client) == pod_from_dict(raw)


def test_a_true_disruption_target_condition_gives_the_disruption_and_its_reason() -> None:
    """Issue 20, defect 8: the cause of an eviction or preemption reaches the core."""

    def pod(conditions: object) -> dict[str, object]:
        return {
            "metadata": {"name": "p", "labels": {"spark-exec-id": "1"}},
            "status": {"phase": "Failed", "conditions": conditions},
        }

    target = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert pod_from_dict_strict(pod([{"type": "Ready"}, target])).disruption == (
        "PreemptionByScheduler"
    )
    assert pod_from_dict_strict(pod([{**target, "reason": None}])).disruption == (
        "DisruptionTarget"
    )
    assert pod_from_dict_strict(pod([{**target, "status": "False"}])).disruption is None
    assert pod_from_dict_strict(pod("odd")).disruption is None


def test_conditions_init_containers_and_run_times_are_read() -> None:
    """Why a pod waits (PodScheduled False, with the scheduler's words), what failure rules match
    on (conditions, init containers' codes), and how long a container ran (the crash-loop brake)."""
    raw = full_pod()
    scheduler_words = "0/3 nodes are available: 3 Insufficient cpu."
    raw["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": scheduler_words,
        },
        {"type": "ConfigIssue", "status": "True", "reason": "", "message": None},
        {"type": 3, "status": "True"},  # odd entries are left out, never fatal
        "not a condition",
    ]
    raw["status"]["initContainerStatuses"] = [
        {"name": "fetch", "state": {"terminated": {"exitCode": 2}}}
    ]
    terminated = raw["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated.update(startedAt="2026-01-01T00:00:01Z", finishedAt="2026-01-01T00:00:04Z")
    pod = pod_from_dict_strict(raw)
    scheduled = pod.condition("PodScheduled")
    assert scheduled is not None
    assert (scheduled.status, scheduled.reason, scheduled.message) == (
        "False",
        "Unschedulable",
        scheduler_words,
    )
    issue = pod.condition("ConfigIssue")
    assert issue is not None
    assert (issue.reason, issue.message) == (None, None)
    assert [c.type for c in pod.conditions] == ["PodScheduled", "ConfigIssue"]
    assert pod.condition("Ready") is None
    (init,) = pod.init_container_statuses
    assert init.state == ContainerTerminated(exit_code=2)
    state = pod.container_statuses[0].state
    assert isinstance(state, ContainerTerminated)
    assert state.started_at == datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert state.finished_at == datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)
    raw["status"]["initContainerStatuses"] = [{"name": "fetch", "state": {"terminated": {}}}]
    with pytest.raises(MalformedPod, match=r"status\.initContainerStatuses\[0\]\.terminated"):
        pod_from_dict_strict(raw)
