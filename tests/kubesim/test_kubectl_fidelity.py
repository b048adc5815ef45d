"""The real kubectl (Debian's kubernetes-client) against kubesim, where it used to trip.

- `kubectl describe` prints every probe's thresholds and dereferences a gRPC probe's `service`:
  it crashed on the shipped overlays' pods until kubesim applied the API server's defaults;
- `kubectl create secret/configmap/namespace/serviceaccount` encode the object as Protobuf:
  kubesim answers 415 naming Protobuf (not "not valid JSON"), and the JSON route works;
- namespaces exist only once created: a create inside a missing one is refused with the API
  server's wording, as `kubectl` users see it against a cluster.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import yaml
from execpods.kubesim import KubeSim

from tests.kubesim.test_kubectl import kubectl_path

ROOT = Path(__file__).resolve().parents[2]

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def _kubectl(sim: KubeSim, home: Path) -> Kubectl:
    binary = kubectl_path()

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, "--kubeconfig", str(sim.kubeconfig_path), "--request-timeout=20s", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "HOME": str(home)},
        )

    return run


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def _render(overlay: str, tmp_path: Path) -> str:
    """The overlay as `kubectl kustomize` renders it, with a token written as a user would."""
    copied = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", copied, ignore=shutil.ignore_patterns("token"))
    (copied / "base" / "token").write_text(secrets.token_hex(16), encoding="utf-8")
    done = subprocess.run(
        [kubectl_path(), "kustomize", str(copied / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return _ok(done)


def _template_pod() -> str:
    """The cluster-mode driver pod template as Spark makes a pod of it: a name, the driver
    container's image (what spark-submit fills in)."""
    template = ROOT / "deploy" / "overlays" / "cluster-mode" / "driver-pod-template.yaml"
    pod = yaml.safe_load(template.read_text(encoding="utf-8"))
    pod["metadata"].update(name="spark-pi-driver", namespace="spark")
    pod["spec"]["containers"][0]["image"] = "apache/spark:4.3.0"
    return yaml.safe_dump(pod)


def test_kubectl_describe_works_on_the_overlays_pods(tmp_path: Path) -> None:
    with KubeSim() as sim:
        kubectl = _kubectl(sim, tmp_path)
        _ok(kubectl("apply", "-f", "-", stdin=_render("client-mode", tmp_path)))
        _ok(kubectl("apply", "-f", "-", stdin=_template_pod()))
        client_mode = _ok(kubectl("-n", "spark", "describe", "pod", "spark-driver"))
        cluster_mode = _ok(kubectl("-n", "spark", "describe", "pod", "spark-pi-driver"))
        stored = orjson.loads(_ok(kubectl("-n", "spark", "get", "pod", "spark-driver", "-o=json")))
    # The manifests set periodSeconds and (sometimes) failureThreshold; the rest is defaulted.
    expected = "grpc <pod>:8081  delay=0s timeout=1s period=5s #success=1 #failure=3"
    assert f"Readiness:  {expected}" in client_mode, client_mode
    startup = "grpc <pod>:8081  delay=0s timeout=1s period=1s #success=1 #failure=60"
    assert f"Startup:    {startup}" in client_mode
    liveness = "tcp-socket :8081 delay=0s timeout=1s period=10s #success=1 #failure=6"
    assert f"Liveness:   {liveness}" in cluster_mode, cluster_mode
    sidecar = stored["spec"]["initContainers"][0]
    assert sidecar["readinessProbe"] == {
        "grpc": {"port": 8081, "service": ""},
        "periodSeconds": 5,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert sidecar["imagePullPolicy"] == "IfNotPresent"
    assert sidecar["terminationMessagePolicy"] == "File"
    assert stored["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o440  # as set, kept
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["EXECPODS_NAMESPACE"]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert stored["spec"]["enableServiceLinks"] is True
    assert stored["spec"]["serviceAccount"] == "spark-driver"


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (("create", "secret", "generic", "s1", "--from-literal=a=b"), "secret"),
        (("create", "configmap", "c1", "--from-literal=a=b"), "configmap"),
        (("create", "serviceaccount", "sa1"), "serviceaccount"),
        (("create", "namespace", "ns1"), "namespace"),
    ],
)
def test_kubectls_protobuf_creates_get_a_415_naming_protobuf_and_json_works(
    tmp_path: Path, command: tuple[str, ...], kind: str
) -> None:
    with KubeSim() as sim:
        kubectl = _kubectl(sim, tmp_path)
        refused = kubectl(*command)
        assert refused.returncode != 0
        assert "application/vnd.kubernetes.protobuf" in refused.stderr, refused.stderr
        assert "Protobuf" in refused.stderr
        assert "not valid JSON" not in refused.stderr
        # The workaround the message gives: render on the client, apply (JSON).
        rendered = _ok(kubectl(*command, "--dry-run=client", "-o", "yaml"))
        assert "created" in _ok(kubectl("apply", "-f", "-", stdin=rendered))
        name = command[3] if kind == "secret" else command[2]
        assert _ok(kubectl("get", kind, name, "-o", "name")).strip() == f"{kind}/{name}"


def test_namespaces_exist_once_created_as_kubectl_sees_them(tmp_path: Path) -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        "spec: {containers: [{name: c, image: x}]}\n"
    )
    with KubeSim() as sim:
        kubectl = _kubectl(sim, tmp_path)
        missing = kubectl("-n", "team-a", "apply", "-f", "-", stdin=pod)
        assert missing.returncode != 0
        assert 'namespaces "team-a" not found' in missing.stderr, missing.stderr
        got = kubectl("get", "namespace", "team-a")
        assert got.returncode != 0
        assert 'namespaces "team-a" not found' in got.stderr
        assert "No resources found" in kubectl("-n", "team-a", "get", "pods").stderr
        listed = _ok(kubectl("get", "namespaces", "-o", "name")).split()
        assert listed == [
            "namespace/default",
            "namespace/kube-node-lease",
            "namespace/kube-public",
            "namespace/kube-system",
        ]
        namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}"
        assert "namespace/team-a created" in _ok(kubectl("apply", "-f", "-", stdin=namespace))
        assert "pod/p created" in _ok(kubectl("-n", "team-a", "apply", "-f", "-", stdin=pod))
        refused = kubectl("delete", "namespace", "default", "--wait=false")
        assert "this namespace may not be deleted" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("apply", "--dry-run=server", "-f", "-"),
        ("apply", "--server-side", "--dry-run=server", "-f", "-"),
        ("diff", "-f", "-"),  # a server-side apply with dryRun=All
        ("delete", "--dry-run=server", "-f", "-"),
    ],
    ids=["apply", "server-side-apply", "diff", "delete"],
)
def test_a_server_dry_run_writes_nothing_and_says_kubesim_does_not_serve_it(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`kubectl apply --dry-run=server` (or `kubectl diff`, which is one) against kubesim used to
    write what it was meant only to check. kubesim does not model dry runs: it refuses them
    with a message naming dryRun, and nothing changes."""
    configmap = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: checked, namespace: default}\n"
        "data: {a: b}\n"
    )
    with KubeSim() as sim:
        kubectl = _kubectl(sim, tmp_path)
        if command[0] == "delete":
            _ok(kubectl("apply", "-f", "-", stdin=configmap))
        before = sim.objects("configmaps", "default")
        done = kubectl(*command, stdin=configmap.replace("a: b", "a: c"))
        assert done.returncode not in (0, 1) if command[0] == "diff" else done.returncode != 0
        assert "kubesim does not serve dry runs (dryRun=All)" in done.stderr, done.stderr
        assert sim.objects("configmaps", "default") == before


def test_applying_a_custom_resource_says_its_crd_is_missing(tmp_path: Path) -> None:
    """`kubectl apply -k deploy/monitoring` (PodMonitor, PrometheusRule) on kubesim, which has
    no CRDs, fails as on a cluster without the Prometheus Operator (kube-apiserver v1.36 gives
    these lines), not with "the server was unable to respond with a content type that the
    client supports" (kubectl's validation found no CRD list and no OpenAPI v2 document)."""
    with KubeSim() as sim:
        done = _kubectl(sim, tmp_path)("apply", "-k", str(ROOT / "deploy" / "monitoring"))
    assert done.returncode != 0
    for kind in ("PodMonitor", "PrometheusRule"):
        missing = f'no matches for kind "{kind}" in version "monitoring.coreos.com/v1"'
        assert missing in done.stderr, done.stderr
    assert "ensure CRDs are installed first" in done.stderr
    assert "content type" not in done.stderr
