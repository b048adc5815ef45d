"""deploy/: every manifest is valid Kubernetes, the example pods run, and their sidecar's command
line is one the sidecar accepts.

Validity is checked three ways: each document against the official client's models (which
refuse unknown fields and wrong types, as `kubectl --validate=strict` would), each pod by
creating it on the simulator through the real client and letting the kubelet run it, and the
sidecar container's arguments by parsing them with the sidecar's own command line and settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings
from execpods.sidecar.config.settings import Settings
from kubernetes import client as k8s

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))
SIDECAR = "execpods-sidecar"
API_VERSIONS = {
    "Pod": "v1",
    "ServiceAccount": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
}

Doc = dict[str, Any]


def documents() -> Iterator[tuple[Path, Doc]]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                yield path, doc


def pods() -> list[Doc]:
    return [doc for _, doc in documents() if doc["kind"] == "Pod"]


def container(pod: Doc, name: str) -> Doc:
    """The container (or init container: the sidecar is a native one) called `name`."""
    every = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    found = [c for c in every if c["name"] == name]
    assert len(found) == 1, f"one container named {name}"
    chosen: Doc = found[0]
    return chosen


def test_deploy_holds_the_example_driver_pod() -> None:
    assert (DEPLOY / "driver-pod.yaml") in MANIFESTS
    assert any(
        SIDECAR in {c["name"] for c in pod["spec"].get("initContainers", [])} for pod in pods()
    )
    for pod in pods():  # native sidecars: the pod completes when the driver exits
        assert all(c["restartPolicy"] == "Always" for c in pod["spec"]["initContainers"])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_is_valid_for_the_kubernetes_schema(path: Path) -> None:
    docs = [doc for p, doc in documents() if p == path]
    assert docs, f"{path.name} holds no document"
    for doc in docs:
        kind = doc["kind"]
        assert doc["apiVersion"] == API_VERSIONS[kind], kind
        assert doc["metadata"]["name"]
        model = getattr(kubernetes.client, f"V1{kind}")
        model.model_validate(doc)  # extra fields forbidden, types checked


def test_a_misspelt_field_would_be_caught() -> None:
    """The schema check above can fail: the same pod with one misspelt key is refused."""
    pod = pods()[0]
    probe = container(pod, SIDECAR)["readinessProbe"]
    probe["grcp"] = probe.pop("grpc")
    with pytest.raises(ValueError, match="grcp"):
        k8s.V1Pod.model_validate(pod)


def test_the_example_pods_run_on_the_simulator() -> None:
    """Once the Secret the manifest's comment says to create exists (without it the pod waits in
    ContainerCreating, as on a cluster: tests/kubesim/test_conformance_validation.py)."""
    with KubeSim(deterministic=True) as sim:
        api = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=sim.url)))
        api.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="spark")))
        token = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="execpods-sidecar-token"), string_data={"token": "t"}
        )
        api.create_namespaced_secret("spark", token)
        for pod in pods():
            api.create_namespaced_pod("spark", k8s.V1Pod.model_validate(pod))
        sim.run_until_idle()
        for pod in pods():
            live = sim.pod(pod["metadata"]["name"], "spark")
            assert live is not None
            assert live["status"]["phase"] == "Running"
            assert {s["name"] for s in live["status"]["containerStatuses"]} == {
                c["name"] for c in pod["spec"]["containers"]
            }
            assert live["spec"]["serviceAccountName"] == pod["spec"]["serviceAccountName"]
            sidecar = container(dict(live), SIDECAR)
            assert sidecar["readinessProbe"]["grpc"]["port"] == 8081
            assert sidecar["startupProbe"]["grpc"]["port"] == 8081
            assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container arguments."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in args]


def _sidecar_settings(pod: Doc, tmp_path: Path) -> tuple[Settings, Doc]:
    sidecar = container(pod, SIDECAR)
    downward = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": "spark"}
    env = {
        e["name"]: e["value"] if "value" in e else downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in sidecar["env"]
    }
    args = _expand(sidecar["args"], env)
    # Files the pod mounts (the token Secret) exist only in the pod: stand them up here.
    token = tmp_path / "token"
    token.write_text("t0ken\n", encoding="utf-8")
    args = [arg.replace("/var/run/execpods/token", str(token)) for arg in args]
    parsed = build_parser().parse_args(args)
    assert parsed.command == "serve"
    assert parsed.log_format == "json"
    return load_settings(parsed, {}), sidecar


def test_the_sidecar_container_command_line_is_accepted_and_matches_the_pod(
    tmp_path: Path,
) -> None:
    for pod in pods():
        settings, sidecar = _sidecar_settings(pod, tmp_path)
        ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
        health_port = int(settings.health.listen.rsplit(":", 1)[1])
        assert sidecar["readinessProbe"]["grpc"]["port"] == health_port == ports["health"]
        assert sidecar["livenessProbe"]["tcpSocket"]["port"] == health_port
        assert settings.metrics.enabled
        assert settings.metrics.port == ports["metrics"]
        assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(settings.metrics.port)
        # The allocator's port stays on loopback, behind a token: only the driver reaches it.
        assert settings.sidecar.listen.startswith("127.0.0.1:")
        assert settings.security.token_file is not None
        driver = container(pod, "driver")
        driver_env = {e["name"]: e.get("value") for e in driver["env"]}
        assert driver_env["EXECPODS_SIDECAR"] == settings.sidecar.listen
        mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
        assert str(Path(driver_env["EXECPODS_TOKEN_FILE"]).parent) in mounts
        assert settings.sidecar.app_id == "spark-app-0001"
        assert settings.kubernetes.driver_pod_name == "spark-driver"


def test_the_pod_runs_as_the_service_account_the_role_is_bound_to() -> None:
    rbac = DEPLOY / "rbac.yaml"
    assert rbac.is_file(), "deploy/rbac.yaml holds the sidecar's ServiceAccount, Role and binding"
    docs = list(yaml.safe_load_all(rbac.read_text(encoding="utf-8")))
    accounts = {d["metadata"]["name"] for d in docs if d and d["kind"] == "ServiceAccount"}
    bound = {
        s["name"]
        for d in docs
        if d and d["kind"] == "RoleBinding"
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    namespaces = {d["metadata"]["namespace"] for d in docs if d}
    for pod in pods():
        account = pod["spec"]["serviceAccountName"]
        assert account in accounts
        assert account in bound
        assert {pod["metadata"]["namespace"]} == namespaces
