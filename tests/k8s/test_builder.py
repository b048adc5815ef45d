"""The executor pod builder: names, labels, template, resources, env, owner reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from execpods.core import (
    SPARK_LABELS,
    PodDecisions,
    PodSelector,
    ResourceProfile,
    ResourceProfiles,
    SettingsError,
)
from execpods.k8s import (
    DriverPodNotFound,
    ExecutorPodTemplateBuilder,
    KubernetesPodOperations,
    KubernetesSettings,
    executor_pod_name,
    load_template,
    parse_pod_template,
    sanitize_prefix,
)
from execpods.kubesim import KubeSim

from tests.k8s.conftest import IMAGE

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def builder(**properties: str) -> ExecutorPodTemplateBuilder:
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": IMAGE, **properties}
    )
    return ExecutorPodTemplateBuilder(settings=settings, namespace="spark")


def test_a_plain_executor_pod() -> None:
    pod = builder(**{"spark.executor.memory": "2g", "spark.executorEnv.FOO": "bar"}).build(
        executor_id=7, app_id="spark-123", resource_profile_id=2
    )
    assert pod["metadata"]["name"] == "spark-123-exec-7"
    assert pod["metadata"]["namespace"] == "spark"
    assert pod["metadata"]["labels"] == {
        "spark-app-selector": "spark-123",
        "spark-role": "executor",
        "spark-exec-id": "7",
        "spark-exec-resourceprofile-id": "2",
    }
    assert "ownerReferences" not in pod["metadata"]
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "2432Mi"},
        "limits": {"memory": "2432Mi"},
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_EXECUTOR_ID"] == "7"
    assert env["SPARK_APPLICATION_ID"] == "spark-123"
    assert env["FOO"] == "bar"


def test_cpu_request_and_limit() -> None:
    pod = builder(
        **{
            "spark.kubernetes.executor.request.cores": "500m",
            "spark.kubernetes.executor.limit.cores": "2",
        }
    ).build(executor_id=1, app_id="a")
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "500m"
    assert resources["limits"]["cpu"] == "2"


AWKWARD_APP_IDS = [
    "Spark_App.With Caps",
    "-x-",
    "a" * 80,
    "__",
    "UPPER",
    "a_b" * 30,
    "x" * 50 + "_yz",  # the cut lands just after the separator
]


@pytest.mark.parametrize("app_id", AWKWARD_APP_IDS)
def test_names_are_dns_1123_labels(app_id: str) -> None:
    name = builder().build(executor_id=123456, app_id=app_id)["metadata"]["name"]
    assert len(name) <= 63
    assert name.endswith("-exec-123456")
    assert re.match(DNS_LABEL, name), name


def test_prefix_setting() -> None:
    pod = builder(**{"spark.kubernetes.executor.podNamePrefix": "mine"}).build(
        executor_id=1, app_id="app"
    )
    assert pod["metadata"]["name"] == "mine-exec-1"
    with pytest.raises(SettingsError, match="podNamePrefix"):
        builder(**{"spark.kubernetes.executor.podNamePrefix": "Not_Valid"})
    assert sanitize_prefix("My.App") == "my-app"
    assert executor_pod_name("x", 3) == "x-exec-3"


def test_an_image_is_required() -> None:
    with pytest.raises(SettingsError, match=r"container\.image"):
        ExecutorPodTemplateBuilder(settings=KubernetesSettings(), namespace="default")


def test_the_template_is_the_starting_point(
    tmp_path: Path, operations: KubernetesPodOperations
) -> None:
    template = tmp_path / "executor.yaml"
    template.write_text(
        "apiVersion: v1\n"
        "kind: Pod\n"
        "metadata:\n"
        "  labels: {team: data}\n"
        "  annotations: {note: kept}\n"
        "spec:\n"
        "  nodeSelector: {pool: spark}\n"
        "  volumes: [{name: scratch, emptyDir: {}}]\n"
        "  containers:\n"
        "  - name: main\n"
        "    image: from-template:1\n"
        "    env: [{name: FROM_TEMPLATE, value: 'yes'}, {name: SPARK_EXECUTOR_ID, value: old}]\n"
        "    volumeMounts: [{name: scratch, mountPath: /scratch}]\n"
        "    resources: {requests: {ephemeral-storage: 1Gi}, limits: {memory: 1Mi}}\n"
        "  - name: sidecar\n"
        "    image: side:1\n",
        encoding="utf-8",
    )
    settings = KubernetesSettings(pod_template_file=str(template))
    made = ExecutorPodTemplateBuilder.create(settings, operations)
    pod = made.build(executor_id=4, app_id="app")
    assert pod["metadata"]["labels"]["team"] == "data"
    assert pod["metadata"]["labels"]["spark-exec-id"] == "4"
    assert pod["metadata"]["annotations"] == {"note": "kept"}
    assert pod["spec"]["nodeSelector"] == {"pool": "spark"}
    assert pod["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    main, sidecar = pod["spec"]["containers"]
    assert main["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert main["resources"]["requests"]["ephemeral-storage"] == "1Gi"  # kept
    assert main["resources"]["limits"]["memory"] == "1408Mi"  # ours wins over the template's
    assert main["image"] == "from-template:1"
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["FROM_TEMPLATE"] == "yes"
    assert env["SPARK_EXECUTOR_ID"] == "4"  # ours wins on a name clash
    assert [e["name"] for e in main["env"]].count("SPARK_EXECUTOR_ID") == 1
    assert sidecar == {"name": "sidecar", "image": "side:1"}
    assert made.build(executor_id=4, app_id="app") == pod  # deterministic, template untouched


def test_the_template_container_named_by_the_setting_is_the_executor_s() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "log-shipper", "image": "side:1"},
                {"name": "main", "image": "from-template:1"},
            ]
        }
    }
    settings = KubernetesSettings()
    made = ExecutorPodTemplateBuilder(
        settings=settings, namespace="spark", template=template, container_name="main"
    )
    shipper, main = made.build(executor_id=1, app_id="app")["spec"]["containers"]
    assert shipper == {"name": "log-shipper", "image": "side:1"}
    assert {e["name"] for e in main["env"]} >= {"SPARK_EXECUTOR_ID"}
    plain = builder().build(executor_id=1, app_id="app")["spec"]["containers"]
    assert [c["name"] for c in plain] == ["spark-kubernetes-executor"]


def test_a_bad_template_is_a_settings_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Service\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="podTemplateFile"):
        load_template(bad)
    with pytest.raises(SettingsError, match="podTemplateFile"):
        load_template(tmp_path / "missing.yaml")


def test_executors_are_owned_by_the_driver_pod(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    driver = sim.create_pod(
        {
            "metadata": {"name": "driver", "labels": {"spark-role": "driver"}},
            "spec": {"containers": [{"name": "driver", "image": IMAGE}]},
        }
    )
    settings = KubernetesSettings(container_image=IMAGE, driver_pod_name="driver")
    pod = ExecutorPodTemplateBuilder.create(settings, operations).build(executor_id=1, app_id="a")
    (owner,) = pod["metadata"]["ownerReferences"]
    assert owner["name"] == "driver"
    assert owner["uid"] == driver["metadata"]["uid"]
    assert owner["kind"] == "Pod"
    assert owner["apiVersion"] == "v1"
    assert owner["controller"] is True
    operations.create(pod)
    created = sim.pod("a-exec-1")
    assert created is not None
    assert created["metadata"]["ownerReferences"][0]["uid"] == driver["metadata"]["uid"]


def test_a_missing_driver_pod_is_a_clear_error(operations: KubernetesPodOperations) -> None:
    settings = KubernetesSettings(container_image=IMAGE, driver_pod_name="no-such-driver")
    with pytest.raises(DriverPodNotFound, match=r"'no-such-driver'.*'default'"):
        ExecutorPodTemplateBuilder.create(settings, operations)


def test_built_pods_are_accepted_by_the_api(
    sim: KubeSim, operations: KubernetesPodOperations
) -> None:
    pod = builder().build(executor_id=9, app_id="app")
    pod["metadata"]["namespace"] = "default"
    operations.create(pod)
    assert sim.pod("app-exec-9") is not None
    # Its labels are the ones the sources and deletes select on.
    mine = PodSelector.executors_of(SPARK_LABELS, "app", [9])
    assert [p.name for p in operations.list(mine)] == ["app-exec-9"]


@pytest.mark.parametrize(
    ("properties", "memory"),
    [
        ({}, "1408Mi"),  # 1 GiB heap + the 384 MiB minimum overhead
        ({"spark.executor.memory": "8g"}, "9011Mi"),  # + 10% (819 MiB) above the minimum
        ({"spark.executor.memory": "3840m"}, "4224Mi"),  # 10% is exactly 384
        ({"spark.executor.memory": "4g", "spark.executor.memoryOverhead": "100m"}, "4196Mi"),
    ],
)
def test_memory_is_heap_plus_overhead(properties: dict[str, str], memory: str) -> None:
    resources = builder(**properties).build(executor_id=1, app_id="a")["spec"]["containers"][0][
        "resources"
    ]
    assert resources["requests"]["memory"] == memory
    assert resources["limits"]["memory"] == memory


def test_environment_from_settings_and_the_driver(operations: KubernetesPodOperations) -> None:
    settings = KubernetesSettings.from_properties(
        {
            "spark.kubernetes.container.image": IMAGE,
            "spark.executorEnv.SHARED": "from-settings",
            "spark.executorEnv.ONLY_SETTINGS": "1",
            "spark.executorEnv.SPARK_EXECUTOR_ID": "ignored",
        }
    )
    made = ExecutorPodTemplateBuilder.create(
        settings,
        operations,
        extra_env={"SHARED": "from-driver", "SPARK_DRIVER_URL": "spark://d:7078"},
    )
    container = made.build(executor_id=5, app_id="app-9")["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "SHARED": "from-driver",  # what the driver passes wins over the settings
        "ONLY_SETTINGS": "1",
        "SPARK_DRIVER_URL": "spark://d:7078",
        "SPARK_EXECUTOR_ID": "5",  # the builder's own values win over both
        "SPARK_APPLICATION_ID": "app-9",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "1024m",
        "SPARK_EXECUTOR_POD_NAME": "app-9-exec-5",
        "SPARK_RESOURCE_PROFILE_ID": "0",
    }


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ("spec: [1, 2]\n", "spec is not a mapping"),
        ("spec: {containers: [image-only]}\n", "spec.containers"),
        ("spec: {containers: {name: c}}\n", "spec.containers"),
        ("spec: {containers: [{name: c, image: i, env: {A: b}}]}\n", "env of container 'c'"),
    ],
)
def test_a_template_build_could_not_use_is_refused_at_start(
    tmp_path: Path, operations: KubernetesPodOperations, template: str, complaint: str
) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(template, encoding="utf-8")
    settings = KubernetesSettings(container_image=IMAGE, pod_template_file=str(path))
    with pytest.raises(SettingsError, match=complaint):
        ExecutorPodTemplateBuilder.create(settings, operations)


def test_a_pod_is_shaped_by_its_resource_profile() -> None:
    gpu_template = '{"kind": "Pod", "spec": {"nodeSelector": {"accelerator": "a100"}}}'
    profiles = ResourceProfiles(
        [
            ResourceProfile(
                id=2,
                cores=4,
                memory_mib=2048,
                memory_overhead_mib=512,
                extra_resources={"nvidia.com/gpu": "1"},
                pod_template=parse_pod_template(gpu_template, what="resource profile 2"),
            )
        ]
    )
    settings = KubernetesSettings.from_properties({"spark.kubernetes.container.image": IMAGE})
    shaped = ExecutorPodTemplateBuilder(settings=settings, namespace="spark", profiles=profiles)
    pod = shaped.build(executor_id=7, app_id="app", resource_profile_id=2)
    assert pod["metadata"]["labels"]["spark-exec-resourceprofile-id"] == "2"
    assert pod["spec"]["nodeSelector"] == {"accelerator": "a100"}
    (container,) = pod["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == {"cpu": "4", "memory": "2560Mi", "nvidia.com/gpu": "1"}
    assert resources["limits"] == {"memory": "2560Mi", "nvidia.com/gpu": "1"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_EXECUTOR_CORES"] == "4"
    assert env["SPARK_EXECUTOR_MEMORY"] == "2048m"
    assert env["SPARK_RESOURCE_PROFILE_ID"] == "2"
    plain = shaped.build(executor_id=8, app_id="app")
    assert plain["metadata"]["labels"]["spark-exec-resourceprofile-id"] == "0"
    assert "nodeSelector" not in plain["spec"]
    assert plain["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"


def test_a_profile_template_that_is_not_a_pod_is_refused() -> None:
    with pytest.raises(SettingsError, match="resource profile 3: the pod template is not a Pod"):
        parse_pod_template("[1, 2]", what="resource profile 3")
    with pytest.raises(SettingsError, match="not valid JSON or YAML"):
        parse_pod_template("{", what="resource profile 3")


def test_a_pod_built_by_spark_gets_each_executor_s_identity() -> None:
    """A profile's template may be a whole executor pod as Spark's builder makes it (the Spark
    plugin's declarations): every place Spark put its placeholder executor id gets the real one,
    and the rest of Spark's pod is kept."""
    spark_pod = (
        '{"kind": "Pod", "metadata": {"name": "job-1a2b-exec-0", "labels": {"spark-exec-id": "0",'
        ' "team": "x"}}, "spec": {"hostname": "job-1a2b-exec-0", "containers": [{"name":'
        ' "spark-kubernetes-executor", "env": [{"name": "SPARK_EXECUTOR_ID", "value": "0"},'
        ' {"name": "SPARK_DRIVER_URL", "value": "spark://CoarseGrainedScheduler@d:7078"},'
        ' {"name": "SPARK_EXECUTOR_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath":'
        ' "metadata.name"}}}]}]}}'
    )
    profiles = ResourceProfiles(
        [ResourceProfile(id=0, pod_template=parse_pod_template(spark_pod, what="a Spark pod"))]
    )
    settings = KubernetesSettings.from_properties({"spark.kubernetes.container.image": IMAGE})
    shaped = ExecutorPodTemplateBuilder(settings=settings, namespace="spark", profiles=profiles)
    pod = shaped.build(executor_id=12, app_id="app")
    name = pod["metadata"]["name"]
    assert name == "app-exec-12"
    assert pod["metadata"]["labels"]["spark-exec-id"] == "12"
    assert pod["metadata"]["labels"]["team"] == "x"
    assert pod["spec"]["hostname"] == name
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["SPARK_EXECUTOR_ID"] == {"name": "SPARK_EXECUTOR_ID", "value": "12"}
    assert env["SPARK_EXECUTOR_POD_NAME"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.name"}
    }, "Spark's reference to the pod's own name, kept (the side-by-side harness compares it)"
    assert "value" not in env["SPARK_EXECUTOR_POD_NAME"]
    assert env["SPARK_DRIVER_URL"]["value"] == "spark://CoarseGrainedScheduler@d:7078"
    # A template without a hostname gets none: Kubernetes then uses the pod's name.
    assert (
        "hostname" not in shaped.build(executor_id=13, app_id="app", resource_profile_id=9)["spec"]
    )


def test_a_pod_built_by_spark_keeps_its_requests_limits_and_environment() -> None:
    """Spark sized its pod from the driver's configuration (`request.cores` 1500m, the limit,
    the overhead): the sidecar keeps that, and Spark's environment, rather than re-deriving them
    from its own settings and the declared cores (the side-by-side harness found cpu 2 for
    Spark's 1500m)."""
    spark_pod = {
        "kind": "Pod",
        "metadata": {"name": "job-exec-0", "labels": {"spark-exec-id": "0"}},
        "spec": {
            "containers": [
                {
                    "name": "spark-kubernetes-executor",
                    "env": [
                        {"name": "SPARK_EXECUTOR_ID", "value": "0"},
                        {"name": "SPARK_EXECUTOR_CORES", "value": "2"},
                        {"name": "TEAM_QUEUE", "value": "analytics"},
                    ],
                    "resources": {
                        "requests": {"cpu": "1500m", "memory": "1536Mi"},
                        "limits": {"cpu": "2", "memory": "1536Mi"},
                    },
                }
            ]
        },
    }
    profiles = ResourceProfiles(
        [
            ResourceProfile(
                id=0,
                cores=2,
                memory_mib=1024,
                memory_overhead_mib=512,
                pod_template=parse_pod_template(json.dumps(spark_pod), what="a Spark pod"),
            )
        ]
    )
    settings = KubernetesSettings.from_properties(
        {"spark.kubernetes.container.image": IMAGE, "spark.executorEnv.TEAM_QUEUE": "other"}
    )
    pod = ExecutorPodTemplateBuilder(settings=settings, namespace="spark", profiles=profiles).build(
        executor_id=4, app_id="app"
    )
    (container,) = pod["spec"]["containers"]
    assert container["resources"] == spark_pod["spec"]["containers"][0]["resources"]  # type: ignore[index]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_EXECUTOR_ID"] == "4"
    assert env["TEAM_QUEUE"] == "analytics", "Spark's environment, not the sidecar's settings"


def test_a_dotted_prefix_names_the_pod_whole_and_its_host_as_a_label() -> None:
    """Issue 33 M7: Spark's pod is `<prefix>-exec-<id>`, the prefix uncut (a subdomain of at most
    237 characters); its hostname is `BasicExecutorFeatureStep`'s (the name's last 63
    characters), with `-` where Spark writes `_`, which the API server refuses in a hostname."""
    spark_pod = {
        "kind": "Pod",
        "metadata": {"name": "team.etl-exec-0", "labels": {"spark-exec-id": "0"}},
        "spec": {
            "hostname": "team_etl-exec-0",
            "containers": [{"name": "spark-kubernetes-executor"}],
        },
    }
    profiles = ResourceProfiles(
        [ResourceProfile(id=0, pod_template=parse_pod_template(json.dumps(spark_pod), what="x"))]
    )
    long_prefix = "team." + "x" * 100
    for prefix, hostname in (
        ("team.etl", "team-etl-exec-5"),
        (long_prefix, ("x" * 100 + "-exec-5")[-63:]),
    ):
        settings = KubernetesSettings.from_properties(
            {
                "spark.kubernetes.container.image": IMAGE,
                "spark.kubernetes.executor.podNamePrefix": prefix,
            }
        )
        shaped = ExecutorPodTemplateBuilder(settings=settings, namespace="spark", profiles=profiles)
        pod = shaped.build(executor_id=5, app_id="app")
        assert pod["metadata"]["name"] == f"{prefix}-exec-5"
        assert pod["spec"]["hostname"] == hostname
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", hostname)


# --- what the core decided (`PodDecisions`), written by the builder ----------------------------


def test_avoided_nodes_join_every_node_selector_term_of_the_template() -> None:
    """Bad-node avoidance: a `NotIn` on the hostname in every term the template already has."""
    zones = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
        for zone in ("a", "b")
    ]
    template = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": zones}
                }
            },
            "containers": [{"name": "spark-kubernetes-executor", "image": IMAGE}],
        }
    }
    made = ExecutorPodTemplateBuilder(
        settings=KubernetesSettings.from_properties({}), namespace="spark", template=template
    )
    pod = made.build(
        executor_id=1, app_id="app", decisions=PodDecisions(avoid_nodes=frozenset({"b2", "b1"}))
    )
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]
    for term in terms:
        assert term["matchExpressions"][-1] == {
            "key": "kubernetes.io/hostname",
            "operator": "NotIn",
            "values": ["b1", "b2"],
        }
    plain = made.build(executor_id=2, app_id="app")["spec"]["affinity"]["nodeAffinity"]
    assert plain["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == zones
    assert [len(term["matchExpressions"]) for term in zones] == [1, 1], "the template is kept"


def test_a_pod_without_affinity_gets_a_term_of_its_own() -> None:
    pod = builder().build(
        executor_id=1, app_id="app", decisions=PodDecisions(avoid_nodes=frozenset({"bad"}))
    )
    required = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["bad"]}
                ]
            }
        ]
    }


def test_announced_cores_replace_the_profile_s_but_not_the_cpu_request() -> None:
    """OOM recovery mode: `SPARK_EXECUTOR_CORES` says 1, the CPU request stays the profile's."""
    made = builder(**{"spark.executor.cores": "4"})
    pod = made.build(executor_id=1, app_id="app", decisions=PodDecisions(cores=1))
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPARK_EXECUTOR_CORES"] == "1"
    assert container["resources"]["requests"]["cpu"] == "4"
    plain = made.build(executor_id=2, app_id="app")["spec"]["containers"][0]["env"]
    assert {e["name"]: e["value"] for e in plain}["SPARK_EXECUTOR_CORES"] == "4"
