"""Real Spark 4.3 (pyspark from PyPI, its JVM driver in client mode) allocating on kubesim.

Spark's own allocator and Kubernetes client (fabric8 7.x) do everything here: the executor
ConfigMap, the WebSocket watch, batches of pod creates, deleting excess pending pods when the
target drops, and deleting every executor pod and the ConfigMap on exit. The simulated
executors never connect back to the driver, which allocation does not need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.spark import ExecutorWatch, SparkDriver, spark_available
from execpods.kubesim import ClusterConfig, KubeSim

JOB = Path(__file__).with_name("job_wait_for_executors.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.jvm,
    pytest.mark.timeout(300),
    pytest.mark.skipif(spark_available() is not None, reason=str(spark_available())),
]

NODES, PER_NODE = 2, 2
CAPACITY = NODES * PER_NODE


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(
        nodes=NODES, pods_per_node=PER_NODE, start_latency=0.3, start_jitter=0.1, seed=3
    )
    with KubeSim(cluster=cfg) as s:
        yield s


def running(phases: dict[str, str]) -> int:
    return sum(p == "Running" for p in phases.values())


def test_spark_allocates_scales_down_and_cleans_up(sim: KubeSim) -> None:
    conf = {
        # Pending executors older than this are deleted when the target drops (Spark's rule).
        "spark.dynamicAllocation.executorIdleTimeout": "1s",
        "spark.kubernetes.allocation.batch.size": "2",
    }
    driver = SparkDriver(f"k8s://{sim.url}", executors=CAPACITY, conf=conf).start()
    selector = f"spark-app-selector={driver.app_id},spark-role=executor"
    watch = ExecutorWatch(sim.url, selector=selector).start()
    try:
        # N executors reach Running, in batches of 2.
        assert watch.wait_for(lambda ph: running(ph) == CAPACITY, 60), watch.phases
        assert len(sim.objects("configmaps")) == 1  # the executors' configuration

        # Above capacity: two more pods are created and stay Pending (Unschedulable).
        driver.set_total(CAPACITY + 2)
        assert watch.wait_for(lambda ph: len(ph) == CAPACITY + 2, 60), watch.phases
        pending = {n for n, p in watch.phases.items() if p == "Pending"}
        assert len(pending) == 2

        # Scale down: Spark deletes the excess pending pods and keeps the running ones.
        driver.set_total(CAPACITY)
        assert watch.wait_for(lambda ph: not (pending & ph.keys()), 60), watch.phases
        assert running(watch.phases) == CAPACITY
        deletes = [r for r in sim.requests() if r.verb == "deletecollection"]
        assert any("status.phase=Pending" in r.query.get("fieldSelector", "") for r in deletes)

        # On exit every executor pod and the ConfigMap go.
        assert driver.stop() == 0
        assert watch.wait_for(lambda ph: not ph, 30), watch.phases
    finally:
        driver.stop()
        watch.close()
    assert sim.pods() == []
    assert sim.objects("configmaps") == []
    verbs = {(r.method, r.path.rsplit("/", 1)[-1], r.status) for r in sim.requests()}
    assert ("GET", "pods", 101) in verbs, "Spark's watch should be a WebSocket"
    assert ("POST", "configmaps", 201) in verbs


def spark_submit_under_kubesim(*kubesim_flags: str) -> subprocess.CompletedProcess[str]:
    """The one command of docs/spark.md: kubesim runs spark-submit with a user's job."""
    bin_dir = Path(sys.executable).parent
    argv = [
        str(bin_dir / "kubesim"), "--nodes", "1", "--node-capacity", "4", "--expect-clean",
        *kubesim_flags, "--",
        str(bin_dir / "spark-submit"), "--master", "{master}", "--deploy-mode", "client",
        "--conf", "spark.kubernetes.container.image=apache/spark:4.3.0",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.executor.instances=2",
        "--conf", "spark.scheduler.minRegisteredResourcesRatio=0",
        str(JOB),
    ]  # fmt: skip
    # As with the virtual environment activated: spark-submit finds pyspark with `python3`.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False, env=env)


def summary_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """kubesim's summary: the last JSON line on its stderr."""
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith('{"exitCode"')]
    assert lines, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def test_spark_submit_under_kubesim_falls_back_from_a_refused_websocket() -> None:
    """The documented one command, with WebSockets refused: a 503 to the upgrade is what
    fabric8 falls back from (to an HTTP watch), so the job still sees its executors Running
    and Spark still cleans up."""
    done = spark_submit_under_kubesim("--no-websocket-watch")
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"executorsRunning": true' in done.stdout
    summary = summary_of(done)
    assert summary["left"] == {"pods": [], "configmaps": [], "services": []}
    assert summary["requests"]["create"] >= 3  # the ConfigMap and two executor pods
    assert summary["watchStatuses"] == [200, 503]  # refused upgrades, then an HTTP watch
