"""kubectl (Debian's kubernetes-client) can get, apply and delete pods against the simulator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from execpods.kubesim import KubeSim

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: nginx:1.27
"""


def find_kubectl() -> str | None:
    return shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
    )


def kubectl_path() -> str:
    """Find kubectl, installing Debian's kubernetes-client when possible; skip otherwise."""
    found = find_kubectl()
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("kubectl is missing and cannot be installed (not root or no apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", *args], capture_output=True, text=True, timeout=50, check=False, env=env
        )

    try:
        result = apt("install", "-y", "-qq", "kubernetes-client")
        if result.returncode != 0:  # a fresh image has no package lists yet
            apt("update", "-qq")
            result = apt("install", "-y", "-qq", "kubernetes-client")
    except subprocess.TimeoutExpired as exc:
        pytest.skip(f"kubectl is missing and apt-get timed out: {exc}")
    found = find_kubectl()
    if found is None:
        pytest.skip(
            f"kubectl is missing and apt-get install failed: {result.stderr.strip()[-300:]}"
        )
    return found


def test_kubectl_get_apply_delete(sim: KubeSim, tmp_path: Path) -> None:
    kubectl = kubectl_path()

    def run(*args: str) -> str:
        proc = subprocess.run(
            [kubectl, "--kubeconfig", str(sim.kubeconfig_path), "--request-timeout=20s", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "HOME": str(tmp_path)},
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD_YAML)
    assert "pod/web created" in run("apply", "--validate=false", "-f", str(manifest))
    assert sim.pod("web") is not None
    sim.run_until_idle()
    listed = run("get", "pods", "-o", "wide").splitlines()
    assert listed[0].split()[:6] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"]
    assert listed[1].split()[:3] == ["web", "1/1", "Running"]
    as_json = orjson.loads(run("get", "pod", "web", "-o", "json"))
    assert as_json["status"]["phase"] == "Running"
    manifest.write_text(POD_YAML.replace("app: web", "app: web\n    tier: front"))
    assert "pod/web configured" in run("apply", "--validate=false", "-f", str(manifest))
    pod = sim.pod("web")
    assert pod is not None
    assert pod["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert 'pod "web" deleted' in run("delete", "pod", "web", "--wait=false")
    terminating = sim.pod("web")
    assert terminating is not None
    assert terminating["metadata"]["deletionTimestamp"]
    sim.run_until_idle()
    assert sim.pod("web") is None
    assert "web" not in run("get", "pods", "-A")


def test_setup_installs_debians_kubernetes_client_when_kubectl_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The install path, exercised without touching the real kubectl: as root with apt-get, a
    missing kubectl is installed from Debian's kubernetes-client (updating the package lists
    when the first attempt fails)."""
    installed: list[str] = []
    calls: list[list[str]] = []

    def fake_run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        if args[1] == "update":
            installed.append("lists")
        ok = args[1] == "update" or bool(installed)
        if args[1] == "install" and ok:
            installed.append("kubectl")
        return subprocess.CompletedProcess(args, 0 if ok else 100, "", "" if ok else "no lists")

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(
        sys.modules[__name__],
        "find_kubectl",
        lambda: "/kubectl" if "kubectl" in installed else None,
    )
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert kubectl_path() == "/kubectl"
    assert [c[:2] for c in calls] == [
        ["apt-get", "install"],
        ["apt-get", "update"],
        ["apt-get", "install"],
    ]
    assert all(c[-1] == "kubernetes-client" for c in calls if c[1] == "install")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    installed.clear()
    with pytest.raises(pytest.skip.Exception, match="cannot be installed"):
        kubectl_path()
