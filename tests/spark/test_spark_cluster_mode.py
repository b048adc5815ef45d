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
import shutil
from pathlib import Path

import pytest

from tests.test_docs_run import block_by_id, missing_needs, run_block

pytestmark = pytest.mark.slow


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
    assert "deleted 2 executor pods" in spark  # the plugin's stop, through KillExecutors
    sidecar = [
        json.loads(line)
        for line in (pod_logs / "execpods.log").read_text().splitlines()
        if line.startswith("{")
    ]
    messages = [record["message"] for record in sidecar]
    assert any("Received SIGTERM" in m for m in messages)  # stopped after the driver ended
    assert sidecar[-1]["message"].startswith("The sidecar for application spark-")
    assert (pod_logs / "execpods-plugin.log").read_text() == ""  # cp copied the jar quietly
