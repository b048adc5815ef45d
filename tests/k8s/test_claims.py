"""The adapter's claims: naming in the builder, templates from Spark, and the claim calls over
real HTTP to the simulator with the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from execpods.core import (
    NeededClaim,
    PodDecisions,
    PodForbidden,
    ResourceProfile,
    ResourceProfiles,
)
from execpods.k8s import (
    ApiGateway,
    ExecutorPodTemplateBuilder,
    KubernetesApiClient,
    KubernetesSettings,
    builder_claims,
    parse_pod_template,
)
from execpods.kubesim import KubeSim

VOLUMES = "spark.kubernetes.executor.volumes."
SPARK_CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "spark-abc-exec-0-pvc-0", "labels": {"spark-app-selector": "app"}},
    "spec": {
        "storageClassName": "fast",
        "accessModes": ["ReadWriteOncePod"],
        "resources": {"requests": {"storage": "5Gi"}},
    },
}


def builder(properties: dict[str, str], profiles: ResourceProfiles | None = None) -> Any:
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": "spark:4.3.0", **properties}
    )
    return ExecutorPodTemplateBuilder(
        settings=settings, namespace="default", profiles=profiles, owner=None
    )


def gateway(api_client: KubernetesApiClient) -> ApiGateway:
    return ApiGateway(api_client, namespace="default", request_timeout=5)


def spark_template_profiles() -> ResourceProfiles:
    """Profile 0 declared as the plugin declares it: Spark's pod for executor 0, its claims in
    an annotation (the profiles are declared after the claims object is made, as the sidecar
    wires them)."""
    template = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"annotations": {"execpods.io/executor-claims": json.dumps([SPARK_CLAIM])}},
        "spec": {
            "containers": [{"name": "spark-kubernetes-executor", "image": "spark:4.3.0"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "spark-abc-exec-0-pvc-0"}}
            ],
        },
    }
    profiles = ResourceProfiles()
    parsed = parse_pod_template(json.dumps(template), what="resource profile 0")
    profiles.declare([ResourceProfile(id=0, pod_template=parsed)])
    return profiles


def volume_claim(pod: Any, volume: str) -> str:
    (found,) = [v for v in pod["spec"]["volumes"] if v["name"] == volume]
    return str(found["persistentVolumeClaim"]["claimName"])


def test_on_demand_volumes_are_named_per_executor_as_spark_names_them(
    api_client: KubernetesApiClient,
) -> None:
    made = builder(
        {
            f"{VOLUMES}emptyDir.a-scratch.mount.path": "/a",
            f"{VOLUMES}persistentVolumeClaim.data.mount.path": "/data",
            f"{VOLUMES}persistentVolumeClaim.data.options.claimName": "OnDemand",
            f"{VOLUMES}persistentVolumeClaim.data.options.storageClass": "standard",
            f"{VOLUMES}persistentVolumeClaim.data.options.sizeLimit": "2Gi",
            f"{VOLUMES}persistentVolumeClaim.data.label.tier": "scratch",
            f"{VOLUMES}persistentVolumeClaim.data.label.spark-app-selector": "not-this",
            f"{VOLUMES}persistentVolumeClaim.named.mount.path": "/named",
            f"{VOLUMES}persistentVolumeClaim.named.options.claimName": "cache-SPARK_EXECUTOR_ID",
        }
    )
    pod = made.build(executor_id=7, app_id="app")
    assert volume_claim(pod, "data") == "app-exec-7-pvc-1"  # the second executor volume
    assert volume_claim(pod, "named") == "cache-7"
    (needed,) = builder_claims(gateway(api_client), made).claims_for(
        executor_id=7, app_id="app", resource_profile_id=0
    )
    assert (needed.name, needed.storage_class, needed.size) == (
        "app-exec-7-pvc-1",
        "standard",
        "2Gi",
    )
    claim: Any = needed.manifest
    assert claim["metadata"] == {
        "name": "app-exec-7-pvc-1",
        "labels": {"tier": "scratch", "spark-app-selector": "app"},
    }
    assert claim["spec"] == {
        "storageClassName": "standard",
        "accessModes": ["ReadWriteOncePod"],
        "resources": {"requests": {"storage": "2Gi"}},
    }


def test_the_legacy_access_mode_is_read_write_once(api_client: KubernetesApiClient) -> None:
    made = builder(
        {
            f"{VOLUMES}persistentVolumeClaim.data.mount.path": "/data",
            f"{VOLUMES}persistentVolumeClaim.data.options.claimName": "OnDemand",
            f"{VOLUMES}persistentVolumeClaim.data.options.storageClass": "standard",
            f"{VOLUMES}persistentVolumeClaim.data.options.sizeLimit": "2Gi",
        }
    )
    claims = builder_claims(gateway(api_client), made, read_write_once=True)
    (claim,) = claims.claims_for(executor_id=1, app_id="app", resource_profile_id=0)
    assert claim.manifest["spec"] == {
        "storageClassName": "standard",
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "2Gi"}},
    }


def test_an_on_demand_volume_without_class_and_size_makes_no_claim(
    api_client: KubernetesApiClient,
) -> None:
    made = builder(
        {
            f"{VOLUMES}persistentVolumeClaim.data.mount.path": "/data",
            f"{VOLUMES}persistentVolumeClaim.data.options.claimName": "OnDemand",
        }
    )
    pod = made.build(executor_id=1, app_id="app")
    assert volume_claim(pod, "data") == "app-exec-1-pvc-0"
    claims = builder_claims(gateway(api_client), made)
    assert claims.claims_for(executor_id=1, app_id="app", resource_profile_id=0) == []


def test_claims_of_a_spark_built_template_follow_each_executor(
    api_client: KubernetesApiClient,
) -> None:
    """The plugin declares Spark's pod for executor 0 with its claims in an annotation; the
    claims object is made before the template is first parsed (as the sidecar wires it)."""
    made = builder({}, spark_template_profiles())
    claims = builder_claims(gateway(api_client), made)
    assert claims.claims_for(executor_id=3, app_id="app", resource_profile_id=1) == []
    (claim,) = claims.claims_for(executor_id=3, app_id="app", resource_profile_id=0)
    assert (claim.name, claim.storage_class, claim.size) == (
        "spark-abc-exec-3-pvc-0",
        "fast",
        "5Gi",
    )
    pod = made.build(executor_id=3, app_id="app")
    assert "execpods.io/executor-claims" not in (pod["metadata"].get("annotations") or {})
    assert volume_claim(pod, "data") == "spark-abc-exec-3-pvc-0"
    reused = made.build(
        executor_id=4,
        app_id="app",
        decisions=PodDecisions(claims={"spark-abc-exec-4-pvc-0": "old"}),
    )
    assert volume_claim(reused, "data") == "old", "the core's reuse decision, written"


def test_a_claim_both_the_template_and_the_settings_name_is_made_once_as_spark_built_it(
    api_client: KubernetesApiClient,
) -> None:
    """The plugin's sidecar read the application's own spark-defaults.conf: its OnDemand volume
    names the very claim Spark's template carries. Making it twice was a 409 on every executor
    (found by the side-by-side harness's claims scenario); Spark's claim is made, once."""
    made = builder(
        {
            "spark.kubernetes.executor.podNamePrefix": "spark-abc",
            f"{VOLUMES}persistentVolumeClaim.data.mount.path": "/data",
            f"{VOLUMES}persistentVolumeClaim.data.options.claimName": "OnDemand",
            f"{VOLUMES}persistentVolumeClaim.data.options.storageClass": "standard",
            f"{VOLUMES}persistentVolumeClaim.data.options.sizeLimit": "1Gi",
        },
        spark_template_profiles(),
    )
    claims = builder_claims(gateway(api_client), made)
    pod = made.build(executor_id=2, app_id="app")
    (claim,) = claims.claims_for(executor_id=2, app_id="app", resource_profile_id=0)
    assert claim.name == "spark-abc-exec-2-pvc-0" == volume_claim(pod, "data")
    assert claim.storage_class == "fast", "Spark's claim, not the settings' twin"


def test_claims_are_created_listed_and_deleted_over_the_api(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    claims = builder_claims(gateway(api_client), builder({}))
    for name, app in (("a-0", "app"), ("a-1", "app"), ("other-0", "other")):
        manifest: dict[str, Any] = json.loads(json.dumps(SPARK_CLAIM))
        manifest["metadata"] = {"name": name, "labels": {"spark-app-selector": app}}
        claims.create_claim(NeededClaim(name=name, manifest=manifest), owner_pod=None)
    listed = claims.list_claims("app")
    assert [(c.name, c.storage_class, c.size) for c in listed] == [
        ("a-0", "fast", "5Gi"),
        ("a-1", "fast", "5Gi"),
    ]
    assert all(c.created_at is not None and c.created_at > 0 for c in listed)
    assert claims.delete_claims("app") == 2
    assert [c["metadata"]["name"] for c in sim.objects("persistentvolumeclaims")] == ["other-0"]


def test_a_refused_claim_list_is_a_typed_error(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    sim.enable_rbac(
        [
            {
                "kind": "Role",
                "metadata": {"name": "pods-only", "namespace": "default"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}],
            }
        ]
    )
    claims = builder_claims(gateway(api_client), builder({}))
    with pytest.raises(PodForbidden):
        claims.list_claims("app")


def needed(name: str) -> NeededClaim:
    manifest: dict[str, Any] = json.loads(json.dumps(SPARK_CLAIM))
    manifest["metadata"]["name"] = name
    return NeededClaim(name=name, manifest=manifest)


def test_a_claim_is_owned_by_the_driver_pod_or_else_by_its_executor_s_pod(
    sim: KubeSim, api_client: KubernetesApiClient
) -> None:
    """The core says who owns a claim (`owner_pod`: None for the driver pod); the adapter
    writes the owner reference, with the executor pod's uid read from the API."""
    api = gateway(api_client)
    driver = {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": "driver-uid"}
    by_driver = builder_claims(
        api,
        ExecutorPodTemplateBuilder(
            settings=KubernetesSettings.from_properties({"spark.kubernetes.container.image": "s"}),
            namespace="default",
            owner=driver,
        ),
    )
    assert by_driver.has_driver_pod
    by_driver.create_claim(needed("c-driver"), owner_pod=None)
    made = builder({})
    api.create_pod("app-exec-1", made.build(executor_id=1, app_id="app"))
    claims = builder_claims(api, made)
    assert not claims.has_driver_pod
    claims.create_claim(needed("c-exec"), owner_pod="app-exec-1")
    claims.create_claim(needed("c-gone"), owner_pod="app-exec-9")
    stored = {c["metadata"]["name"]: c["metadata"] for c in sim.objects("persistentvolumeclaims")}
    assert stored["c-driver"]["ownerReferences"] == [driver]
    (executor_owner,) = stored["c-exec"]["ownerReferences"]
    pod_uid = api.read_pod("app-exec-1")["metadata"]["uid"]  # type: ignore[index]
    assert executor_owner == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "app-exec-1",
        "uid": pod_uid,
    }
    assert "ownerReferences" not in stored["c-gone"], "a pod that is gone owns nothing"
