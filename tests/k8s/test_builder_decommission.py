"""Spark 4.3's BasicExecutorFeatureStep on the executor pod: terminationGracePeriodSeconds, the
decommission preStop hook (spark.decommission.enabled), allowPrivilegeEscalation; and the driver
pod's readiness as the adapter reads it (kubesim over HTTP, the real client)."""

from __future__ import annotations

from typing import Any

import pytest
from execpods.core import PodNotFound, ResourceProfile, ResourceProfiles
from execpods.k8s import (
    ExecutorPodTemplateBuilder,
    KubernetesPodOperations,
    KubernetesSettings,
    parse_pod_template,
)
from execpods.kubesim import KubeSim
from execpods.kubesim.bodies import JsonValue

from tests.k8s.conftest import IMAGE


def _pod(**properties: str) -> dict[str, Any]:
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": IMAGE, **properties}
    )
    return ExecutorPodTemplateBuilder(settings=settings, namespace="spark").build(
        executor_id=1, app_id="app"
    )


def test_executor_pods_get_sparks_termination_grace_period() -> None:
    assert _pod()["spec"]["terminationGracePeriodSeconds"] == 30  # Spark 4.3's default
    pod = _pod(**{"spark.kubernetes.executor.terminationGracePeriodSeconds": "2min"})
    assert pod["spec"]["terminationGracePeriodSeconds"] == 120
    assert (
        _pod(**{"spark.kubernetes.executor.terminationGracePeriodSeconds": "0"})["spec"][
            "terminationGracePeriodSeconds"
        ]
        == 0
    )


def test_decommissioning_executors_get_the_prestop_script() -> None:
    (plain,) = _pod()["spec"]["containers"]
    assert "lifecycle" not in plain
    (container,) = _pod(**{"spark.decommission.enabled": "true"})["spec"]["containers"]
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["/opt/decom.sh"]}}}
    (custom,) = _pod(
        **{
            "spark.decommission.enabled": "true",
            "spark.kubernetes.decommission.script": "/bin/drain",
        }
    )["spec"]["containers"]
    assert custom["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/drain"]


def test_privilege_escalation_is_off_unless_allowed_as_spark() -> None:
    (container,) = _pod()["spec"]["containers"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False}
    (common,) = _pod(**{"spark.kubernetes.securityContext.allowPrivilegeEscalation": "true"})[
        "spec"
    ]["containers"]
    assert common["securityContext"]["allowPrivilegeEscalation"] is True
    (own,) = _pod(
        **{
            "spark.kubernetes.securityContext.allowPrivilegeEscalation": "true",
            "spark.kubernetes.executor.securityContext.allowPrivilegeEscalation": "false",
        }
    )["spec"]["containers"]
    assert own["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_driver_pods_readiness_is_its_ready_condition(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    sim.create_pod(
        {"metadata": {"name": "driver"}, "spec": {"containers": [{"name": "d", "image": IMAGE}]}}
    )
    assert not operations.is_ready("driver"), "Pending: not Ready"
    sim.run_until_idle()
    assert operations.is_ready("driver"), "Running with its containers ready"
    with pytest.raises(PodNotFound):
        operations.is_ready("nobody")


def test_a_pod_spark_built_keeps_sparks_termination_values() -> None:
    """The plugin's pods come from Spark's own builder, which applied the driver's
    terminationGracePeriodSeconds, preStop hook and security context: they are kept, but for an
    escalation the sidecar's settings do not allow (issue 32: the operator's word wins)."""
    spark_pod = (
        "spec:\n"
        "  terminationGracePeriodSeconds: 45\n"
        "  containers:\n"
        "    - name: spark-kubernetes-executor\n"
        "      lifecycle: {preStop: {exec: {command: [/opt/decom.sh]}}}\n"
        "      securityContext: {allowPrivilegeEscalation: true}\n"
    )
    settings = KubernetesSettings.from_properties({"spark.kubernetes.container.image": IMAGE})
    profiles = ResourceProfiles()
    profiles.declare(
        [ResourceProfile(id=1, pod_template=parse_pod_template(spark_pod, what="test"))]
    )
    builder = ExecutorPodTemplateBuilder(settings=settings, namespace="spark", profiles=profiles)
    pod = builder.build(executor_id=1, app_id="app", resource_profile_id=1)
    assert pod["spec"]["terminationGracePeriodSeconds"] == 45
    (container,) = pod["spec"]["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["/opt/decom.sh"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    own = builder.build(executor_id=2, app_id="app")
    assert own["spec"]["terminationGracePeriodSeconds"] == 30, "the sidecar's own pods: its own"


def test_a_driver_pod_shared_with_the_sidecar_is_ready_when_the_driver_container_is(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    """The pod's Ready condition waits for every container, the sidecar's too; the driver's own
    container being ready is enough."""
    sim.create_pod(
        {
            "metadata": {"name": "shared"},
            "spec": {
                "containers": [
                    {"name": "spark-kubernetes-driver", "image": IMAGE},
                    {"name": "execpods", "image": IMAGE},
                ]
            },
        }
    )
    sim.run_until_idle()
    status: JsonValue = {
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "spark-kubernetes-driver", "ready": True},
                {"name": "execpods", "ready": False},
            ],
        }
    }
    sim.api.patch("default", "shared", "application/merge-patch+json", status, status=True)
    assert not operations.is_ready("shared")
    assert operations.is_ready("shared", container="spark-kubernetes-driver")
    assert not operations.is_ready("shared", container="execpods")
