"""deploy/'s kustomization: rendered offline by `kubectl kustomize`, valid for the official
client's models, applied to kubesim by the real kubectl, and the cluster-mode driver pod template
with execpods as a native sidecar that completes with its driver.

The token file is created in a copy of deploy/ (it is never committed), as a user would before
rendering.
"""

from __future__ import annotations

import copy
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from execpods.client import AllocatorClient, ExecutorState
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.kubesim.test_kubectl import kubectl_path
from tests.sidecar.conftest import FAST_CLUSTER, wait_for

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("client-mode", "cluster-mode")
TEMPLATE = ROOT / "deploy" / "overlays" / "cluster-mode" / "driver-pod-template.yaml"
MODELS: dict[str, Any] = {
    "Namespace": kubernetes.client.V1Namespace,
    "ServiceAccount": kubernetes.client.V1ServiceAccount,
    "Role": kubernetes.client.V1Role,
    "RoleBinding": kubernetes.client.V1RoleBinding,
    "Secret": kubernetes.client.V1Secret,
    "ConfigMap": kubernetes.client.V1ConfigMap,
    "Service": kubernetes.client.V1Service,
    "Pod": kubernetes.client.V1Pod,
}

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def deploy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copied = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(ROOT / "deploy", copied, ignore=shutil.ignore_patterns("token"))
    (copied / "base" / "token").write_text(secrets.token_hex(32), encoding="utf-8")
    return copied


def render(deploy: Path, overlay: str) -> str:
    done = subprocess.run(
        [kubectl_path(), "kustomize", str(deploy / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_offline_into_valid_objects(deploy: Path, overlay: str) -> None:
    docs = [d for d in yaml.safe_load_all(render(deploy, overlay)) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "Secret"} <= kinds
    for doc in docs:
        MODELS[doc["kind"]].model_validate(doc)  # unknown fields and wrong types refused
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "spark", doc["metadata"]
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "execpods-sidecar-token"
    bindings = {d["metadata"]["name"]: d["subjects"] for d in docs if d["kind"] == "RoleBinding"}
    account = {"kind": "ServiceAccount", "namespace": "spark"}
    assert bindings["spark-driver-execpods"] == [{**account, "name": "spark-driver"}]
    if overlay == "cluster-mode":  # and who may submit (spark-submitter)
        assert bindings["spark-submitter"] == [{**account, "name": "spark-submitter"}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_applies_the_rendered_overlay_to_kubesim(
    deploy: Path, tmp_path: Path, overlay: str
) -> None:
    rendered = render(deploy, overlay)
    with KubeSim(cluster=FAST_CLUSTER) as sim:

        def kubectl(*args: str, stdin: str | None = None) -> str:
            done = subprocess.run(
                [kubectl_path(), "--kubeconfig", str(sim.kubeconfig_path), *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "HOME": str(tmp_path)},
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        applied = kubectl("apply", "-f", "-", stdin=rendered)
        for line in (
            "serviceaccount/spark-driver created",
            "role.rbac.authorization.k8s.io/spark-driver-execpods created",
            "rolebinding.rbac.authorization.k8s.io/spark-driver-execpods created",
            "secret/execpods-sidecar-token created",
            *(
                ["configmap/spark-cluster-mode created"]
                if overlay == "cluster-mode"
                else ["service/spark-driver created", "pod/spark-driver created"]
            ),
        ):
            assert line in applied, applied
        again = kubectl("apply", "-f", "-", stdin=rendered)
        assert "created" not in again, again
        assert "unchanged" in again, again
        assert re.search(r"^spark\s", kubectl("get", "ns"), re.MULTILINE)
        role = yaml.safe_load(
            kubectl("get", "role", "spark-driver-execpods", "-n", "spark", "-o", "yaml")
        )
        assert role["apiVersion"] == "rbac.authorization.k8s.io/v1"
        assert {"pods", "configmaps"} <= {r for rule in role["rules"] for r in rule["resources"]}
        assert [s["metadata"]["name"] for s in sim.objects("secrets", "spark")] == [
            "execpods-sidecar-token"
        ]
        if overlay == "client-mode":  # the driver pod runs, its native sidecar beside it
            pod = wait_for(
                lambda: (
                    (p := sim.pod("spark-driver", "spark"))
                    and p["status"].get("phase") == "Running"
                    and p
                )
            )
            (sidecar,) = pod["status"]["initContainerStatuses"]
            assert "running" in sidecar["state"]


def _template() -> Doc:
    doc: Doc = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    return doc


def test_the_cluster_mode_driver_template_has_execpods_as_a_native_sidecar(tmp_path: Path) -> None:
    template = _template()
    kubernetes.client.V1Pod.model_validate(template)
    plugin, sidecar = template["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    # The plugin's jar: copied from the execpods image into the volume the driver's class path
    # names (spark.driver.extraClassPath), before the driver starts.
    assert "restartPolicy" not in plugin
    assert plugin["image"] == sidecar["image"]
    (jars,) = plugin["volumeMounts"]
    assert plugin["command"][-1] == jars["mountPath"] + "/"
    assert sidecar["startupProbe"]["grpc"]["port"] == 8081  # gates the driver's start
    assert [c["name"] for c in template["spec"]["containers"]] == ["spark-kubernetes-driver"]
    # Its command line is one the sidecar accepts, with the downward API's values.
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")
    args = [a.replace("/var/run/execpods/token", str(token)) for a in sidecar["args"]]
    environ = {"EXECPODS_APP_ID": "spark-0001", "EXECPODS_DRIVER_POD_NAME": "d"}
    environ |= {"EXECPODS_NAMESPACE": "spark", "EXECPODS_IMAGE": "apache/spark:4.3.0"}
    settings = load_settings(build_parser().parse_args(args), environ)
    assert settings.sidecar.listen == "127.0.0.1:50551"
    assert settings.kubernetes.service_account == template["spec"]["serviceAccountName"]
    # The plugin's properties name the same address and token file.
    conf = dict(
        line.split(None, 1)
        for line in (TEMPLATE.parent / "spark-defaults.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert conf["spark.execpods.sidecar.address"] == settings.sidecar.listen
    (driver,) = template["spec"]["containers"]
    driver_mounts = {m["name"]: m["mountPath"] for m in driver["volumeMounts"]}
    jar = Path(plugin["command"][1]).name
    assert conf["spark.driver.extraClassPath"] == f"{driver_mounts[jars['name']]}/{jar}"
    # The ConfigMap's own template path: where the ConfigMap is mounted (/opt/spark/conf).
    assert conf["spark.kubernetes.driver.podTemplateFile"] == f"/opt/spark/conf/{TEMPLATE.name}"
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert str(Path(conf["spark.execpods.sidecar.auth.tokenFile"]).parent) in mounts


def test_a_driver_pod_with_a_native_sidecar_completes_when_the_driver_exits() -> None:
    """kubesim models native sidecars: the pod runs with the sidecar started, and when the
    driver (the only main container) exits, the pod completes and the sidecar is stopped."""
    pod = copy.deepcopy(_template())
    pod["metadata"] |= {"name": "driver", "annotations": {"kubesim.execpods.io/exit-after": "0.3"}}
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["image"] = "apache/spark:4.3.0"
    with KubeSim(cluster=FAST_CLUSTER, namespaces=["spark"]) as sim:
        # The token Secret the pod mounts (kubesim keeps a pod whose volume is missing Pending).
        secret = {"metadata": {"name": "execpods-sidecar-token"}, "data": {"token": "dG9rZW4="}}
        sim.object_apis["secrets"].create("spark", secret)
        sim.create_pod(pod, namespace="spark")
        running = wait_for(
            lambda: (
                (p := sim.pod("driver", "spark")) and p["status"].get("phase") == "Running" and p
            )
        )
        plugin, init = running["status"]["initContainerStatuses"]
        assert plugin["name"] == "execpods-plugin"
        assert init["name"] == "execpods"
        assert "running" in init["state"]
        done = wait_for(
            lambda: (p := sim.pod("driver", "spark")) and p["status"]["phase"] == "Succeeded" and p
        )
        stopped = done["status"]["initContainerStatuses"][1]
        assert stopped["state"]["terminated"]["exitCode"] == 0


def test_the_base_role_covers_the_sidecar_under_enforced_rbac(tmp_path: Path) -> None:
    """The sidecar's start-up permission check, and a whole allocation, under exactly the base
    Role (the one the driver pod's service account gets)."""
    from tests.sidecar.test_rbac import DRIVER, properties

    manifests = [d for d in yaml.safe_load_all((ROOT / "deploy/base/rbac.yaml").read_text()) if d]
    sim = KubeSim(cluster=FAST_CLUSTER, rbac=manifests, namespaces=["spark"]).start()
    try:
        sim.create_pod(copy.deepcopy(DRIVER), namespace="spark")
        token = sim.token_for("spark-driver", "spark")
        kubeconfig = sim.write_kubeconfig(tmp_path / "kc", namespace="spark", token=token)
        with (
            EmbeddedSidecar(properties(kubeconfig)) as sidecar,
            AllocatorClient(sidecar.address) as client,
        ):
            client.request_total(2)
            with client.stream_snapshots(batch_interval_ms=50) as stream:
                for update in stream:
                    if (
                        update.latest is not None
                        and update.latest.count(ExecutorState.RUNNING) == 2
                    ):
                        break
        refused = [(r.method, r.path, r.status) for r in sim.requests() if r.status in (401, 403)]
        assert refused == []
    finally:
        sim.close()
