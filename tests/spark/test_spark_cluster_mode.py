"""Cluster mode rehearsed end to end: docs/spark.md's block `cluster-mode`, as written.

`spark-submit --deploy-mode cluster` with `deploy/overlays/cluster-mode` against kubesim; the
driver pod runs through the local kubelet (its JVM, and the execpods native sidecar beside it);
executors come through the plugin and the sidecar; the job ends, the pod completes, no executor
pod is left. Beyond the block's own checks (the driver pod Succeeded, no executor pod left), this
test reads kubesim's exit summary and the containers' logs (copied out by the local kubelet):
Spark applied its objects server-side, the plugin was loaded from the jar the init container
copied, the sidecar created the executors and deleted them when the driver stopped it.

Costs about 40 s (two JVMs: spark-submit's and the driver's).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from execpods.devtools.localkubelet import LocalKubelet, missing_tools
from execpods.devtools.localkubelet.apiclient import Api
from execpods.devtools.localkubelet.images import ImageCatalogue
from execpods.devtools.localkubelet.kubelet import LOGS_ENV
from execpods.kubesim.nodesim import NodeSimulator

from tests.kubesim.test_kubectl import kubectl_path
from tests.test_docs_run import block_by_id, missing_needs, run_block

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "overlays" / "cluster-mode"
# The documented block's settings (docs/spark.md, "Cluster mode, end to end on kubesim").
SUBMIT_CONF = [
    "--properties-file", str(OVERLAY / "spark-defaults.conf"),
    "--conf", f"spark.kubernetes.driver.podTemplateFile={OVERLAY / 'driver-pod-template.yaml'}",
    "--conf", "spark.kubernetes.driver.scheduler.name=execpods-local",
    "--conf", "spark.executor.instances=2",
    "--conf", "spark.scheduler.minRegisteredResourcesRatio=0",
]  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.jvm]


@pytest.mark.timeout(360)  # two JVMs; 40 s quiet, two minutes under a load average of 30
def test_spark_submit_cluster_mode_runs_the_shipped_overlay_through_execpods(
    tmp_path: Path,
) -> None:
    where, script, needs = block_by_id("cluster-mode")
    missing = missing_needs(needs) + [
        t for t in ("unshare", "nsenter", "ip") if not shutil.which(t)
    ]
    if missing:
        pytest.skip(f"{where} needs {', '.join(missing)}")
    logs = tmp_path / "pod-logs"
    code, output = run_block(
        script, tmp_path, timeout=240, env={"EXECPODS_LOCAL_KUBELET_LOGS": str(logs)}
    )
    assert code == 0, f"{where} exited {code}:\n{output}"
    assert "driver pod: Succeeded" in output
    summary = json.loads(
        next(line for line in reversed(output.splitlines()) if line.startswith("{"))
    )
    assert summary["exitCode"] == 0
    (driver,) = summary["left"]["pods"]  # the completed driver pod stays, as on a cluster
    assert driver.endswith("-driver")
    assert summary["requests"]["patch"] >= 3  # Service, ConfigMap, NetworkPolicy: applied
    pod_logs = logs / f"spark_{driver}"
    spark = (pod_logs / "spark-kubernetes-driver.log").read_text()
    assert "are allocated by the sidecar at 127.0.0.1:50551 (plaintext, bearer token)" in spark
    assert '"executorsRunning": true' in spark
    assert "deleted 2 executor pods" in spark  # the plugin's stop: by label, as Spark's
    sidecar = [
        json.loads(line)
        for line in (pod_logs / "execpods.log").read_text().splitlines()
        if line.startswith("{")
    ]
    messages = [record["message"] for record in sidecar]
    assert any("Received SIGTERM" in m for m in messages)  # stopped after the driver ended
    assert sidecar[-1]["message"].startswith("The sidecar for application spark-")
    assert (pod_logs / "execpods-plugin.log").read_text() == ""  # cp copied the jar quietly


@pytest.mark.timeout(480)  # the same two JVMs, on a loaded machine
def test_cluster_mode_on_the_real_api_server_with_simulated_nodes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    plugin_jar: Path,
) -> None:
    """The same rehearsal against kube-apiserver (the real-server tier), with its RBAC,
    admission and service-account tokens: the overlay applied by kubectl, spark-submit run as the
    overlay's spark-submitter (its Role is enough), Spark's objects applied server-side, the
    driver pod run by the local kubelet under the base Role's permissions, the executors on the
    tier's simulated nodes."""
    if missing := missing_tools() + missing_needs(["java"]):
        pytest.skip(f"needs {', '.join(missing)}")
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", deploy, ignore=shutil.ignore_patterns("token", "helm"))
    (deploy / "base" / "token").write_text(secrets.token_hex(32))
    server = request.getfixturevalue("real_server")  # the session's (tests/conftest.py)
    kubeconfig = str(server.kubeconfig_path)
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path)}
    logs = tmp_path / "pod-logs"
    monkeypatch.setenv(LOGS_ENV, str(logs))  # the kubelet copies the pods' logs there at exit
    try:
        applied = subprocess.run(
            [kubectl_path(), "apply", "-k", str(deploy / "overlays" / "cluster-mode")],
            env=env, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        # spark-submit runs as the overlay's spark-submitter: its Role is what it needs.
        token = subprocess.run(
            [kubectl_path(), "create", "token", "spark-submitter", "-n", "spark"],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        config = json.loads(Path(kubeconfig).read_text())
        config["users"][0]["user"] = {"token": token}
        submitter = tmp_path / "submitter.kubeconfig"
        submitter.write_text(json.dumps(config))
        simulator = NodeSimulator(
            url=server.url, token=server.token, ca_file=str(server.ca_path), namespaces=("spark",)
        )
        # The images carry the run's plugin jar (tests/spark/conftest.py), not whatever
        # integrations/spark/build holds: in a fresh clone that is nothing until the other
        # rehearsal's docs block builds it, and the init container's cp then fails.
        images = ImageCatalogue(plugin_jar=plugin_jar)
        kubelet = LocalKubelet(Api(kubeconfig=kubeconfig), namespace="spark", images=images)
        with simulator, kubelet:
            submit = subprocess.run(
                [str(ROOT / ".venv" / "bin" / "spark-submit"), "--master", f"k8s://{server.url}",
                 "--deploy-mode", "cluster", *SUBMIT_CONF,
                 "--conf", f"spark.kubernetes.file.upload.path=file://{tmp_path}",
                 str(ROOT / "tests" / "spark" / "job_wait_for_executors.py")],
                env={**env, "KUBECONFIG": str(submitter),
                     "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"},
                capture_output=True, text=True, check=False, timeout=300, cwd=ROOT,
            )  # fmt: skip
        assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
        pods = json.loads(
            subprocess.run(
                [kubectl_path(), "get", "pods", "-n", "spark", "-o", "json"],
                env=env, capture_output=True, text=True, check=True, timeout=60,
            ).stdout
        )["items"]  # fmt: skip
        (driver,) = [p for p in pods if p["metadata"]["labels"].get("spark-role") == "driver"]
        spark = logs / f"spark_{driver['metadata']['name']}" / "spark-kubernetes-driver.log"
        assert driver["status"]["phase"] == "Succeeded", _driver_story(driver, spark, submit)
        assert [p for p in pods if p["metadata"]["labels"].get("spark-role") == "executor"] == []
        assert '"executorsRunning": true' in spark.read_text()
    finally:  # the server is shared: leave it as found
        subprocess.run(
            [kubectl_path(), "delete", "namespace", "spark", "--wait=false"],
            env=env, capture_output=True, check=False, timeout=60,
        )  # fmt: skip


def _driver_story(
    driver: dict[str, object], log: Path, submit: subprocess.CompletedProcess[str]
) -> str:
    """What a failed rehearsal needs to be understood: the driver pod's status, the end of its
    log when the local kubelet copied one (it does when the pod's containers exit), and the end
    of what spark-submit printed."""
    told = log.read_text()[-3000:] if log.exists() else f"(no driver log at {log})"
    status = json.dumps(driver.get("status"), indent=1)[-2000:]
    return f"driver status: {status}\ndriver log: {told}\nspark-submit: {submit.stdout[-1500:]}"
