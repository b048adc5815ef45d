"""A create the namespace refuses arrives as capacity (QuotaExceeded, with the quota's figures) or
as namespace policy (AdmissionPolicyRefused), never as an executor failure: over HTTP from
kubesim's quota admission, and from the exact words other admission plugins use."""

from __future__ import annotations

from typing import Any

import pytest
from execpods.core import (
    AdmissionPolicyRefused,
    PodAdmissionRejected,
    PodForbidden,
    QuotaExceeded,
)
from execpods.k8s import KubernetesApiClient, KubernetesPodOperations
from execpods.k8s.errors import error_from_status
from execpods.kubesim import KubeSim
from kubernetes import client

from tests.k8s.conftest import APP_ID, executor_pod


def _quota(api_client: KubernetesApiClient, hard: dict[str, str]) -> None:
    core: Any = client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(
        "default", {"metadata": {"name": "spark-quota"}, "spec": {"hard": hard}}
    )


def _sized(executor_id: int) -> dict[str, Any]:
    pod = executor_pod(executor_id)
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1408Mi"},
        "limits": {"memory": "1408Mi"},
    }
    return pod


def test_an_exceeded_quota_arrives_with_its_name_and_figures(
    api_client: KubernetesApiClient, operations: KubernetesPodOperations
) -> None:
    _quota(api_client, {"pods": "2", "requests.cpu": "8"})
    operations.create(_sized(1))
    operations.create(_sized(2))
    with pytest.raises(QuotaExceeded) as raised:
        operations.create(_sized(3))
    error = raised.value
    assert error.status == 403
    assert error.quota == "spark-quota"
    assert dict(error.requested) == {"pods": "1"}
    assert dict(error.used) == {"pods": "2"}
    assert dict(error.limited) == {"pods": "2"}
    assert f'pods "{APP_ID}-exec-3" is forbidden: exceeded quota: spark-quota' in str(error)


def test_a_quota_the_pod_does_not_satisfy_is_namespace_policy(
    api_client: KubernetesApiClient, operations: KubernetesPodOperations
) -> None:
    _quota(api_client, {"limits.cpu": "8"})
    with pytest.raises(AdmissionPolicyRefused) as raised:
        operations.create(_sized(1))
    assert raised.value.policy == "ResourceQuota"
    assert "must specify limits.cpu for: spark-kubernetes-executor" in str(raised.value)


def test_a_limit_range_refusal_is_namespace_policy(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    sim.reject_creates(403, message="maximum cpu usage per Container is 2, but limit is 4")
    with pytest.raises(AdmissionPolicyRefused) as raised:
        operations.create(executor_pod(1))
    assert raised.value.policy == "LimitRange"


MESSAGES = [
    (
        'pods "p" is forbidden: exceeded quota: q, requested: limits.memory=2Gi,pods=1, '
        "used: limits.memory=7Gi,pods=3, limited: limits.memory=8Gi,pods=3",
        QuotaExceeded,
        None,
    ),
    (
        'pods "p" is forbidden: status unknown for quota: q, resources: pods',
        AdmissionPolicyRefused,
        "ResourceQuota",
    ),
    (
        'pods "p" is forbidden: insufficient quota to consume: requests.cpu',
        AdmissionPolicyRefused,
        "ResourceQuota",
    ),
    (
        'pods "p" is forbidden: [minimum memory usage per Pod is 2Gi, but request is 1Gi, '
        "maximum cpu usage per Container is 2, but limit is 4]",
        AdmissionPolicyRefused,
        "LimitRange",
    ),
    (
        'pods "p" is forbidden: cpu max limit to request ratio per Container is 2, but provided '
        "ratio is 4.000000",
        AdmissionPolicyRefused,
        "LimitRange",
    ),
    ('pods "p" is forbidden: denied by admission webhook "x"', PodAdmissionRejected, None),
    ('User "spark" cannot create resource "pods"', PodForbidden, None),
]


@pytest.mark.parametrize(("message", "kind", "policy"), MESSAGES)
def test_the_api_servers_words_decide(
    message: str, kind: type[Exception], policy: str | None
) -> None:
    error = error_from_status(403, message, what="create pod p")
    assert type(error) is kind
    if isinstance(error, AdmissionPolicyRefused):
        assert error.policy == policy
    if isinstance(error, QuotaExceeded):
        assert dict(error.requested) == {"limits.memory": "2Gi", "pods": "1"}
        assert dict(error.limited) == {"limits.memory": "8Gi", "pods": "3"}
