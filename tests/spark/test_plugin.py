"""Real Spark 4.3 allocating through the execpods plugin and a sidecar, on kubesim.

The plugin jar (integrations/spark, built by tools/build_spark_plugin.py) replaces Spark's
executor-pod allocator with `spark.kubernetes.allocation.pods.allocator`; an execpods sidecar
runs beside the driver (here in the test's process) and creates the pods. Spark keeps its watch,
its snapshots and its lifecycle manager, and sees the sidecar's pods as its own executors.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.spark import ExecutorWatch, SparkDriver, spark_available
from execpods.devtools.spark_plugin import ALLOCATOR, plugin_conf
from execpods.k8s import sanitize_prefix
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar, simulator_properties

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "build_spark_plugin.py"
IMAGE = "apache/spark:4.3.0"


def _unavailable() -> str | None:
    if reason := spark_available():
        return reason
    if shutil.which("javac") is None:
        return "javac is not installed (python3 tools/dev.py installs openjdk-17-jdk-headless)"
    return None


pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(_unavailable() is not None, reason=str(_unavailable())),
]

NODES, PER_NODE = 2, 2
CAPACITY = NODES * PER_NODE
APP_ID = "spark-execpods-plugin-test"


@pytest.fixture(scope="module")
def plugin_jar() -> Path:
    done = subprocess.run(
        [sys.executable, str(BUILD)], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(
        nodes=NODES, pods_per_node=PER_NODE, start_latency=0.3, start_jitter=0.1, seed=5
    )
    with KubeSim(cluster=cfg) as s:
        yield s


@pytest.fixture
def sidecar(sim: KubeSim) -> Iterator[EmbeddedSidecar]:
    props = simulator_properties(
        sim.url,
        APP_ID,
        **{
            "spark.kubernetes.container.image": IMAGE,
            "spark.executor.instances": "0",
            "spark.kubernetes.allocation.batch.delay": "200ms",
            # The sidecar's allocation settings are its own (Spark's go to Spark's allocator,
            # which the plugin replaces): pending pods older than this go when a target drops.
            "spark.dynamicAllocation.executorIdleTimeout": "1s",
        },
    )
    with EmbeddedSidecar(props) as running:
        yield running


def env_of(pod: Any) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def running(phases: dict[str, str]) -> int:
    return sum(p == "Running" for p in phases.values())


def test_spark_allocates_through_the_sidecar(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    # The jar, the allocator class, the sidecar's address, and the application id (the sidecar
    # labels its pods with it, and Spark watches its executors by it).
    conf = plugin_conf(plugin_jar, sidecar.address, APP_ID)
    backend = sidecar.runtime.backend
    selector = f"spark-app-selector={APP_ID},spark-role=executor"
    watch = ExecutorWatch(sim.url, selector=selector).start()
    driver = SparkDriver(f"k8s://{sim.url}", executors=CAPACITY, conf=conf)
    try:
        driver.start()
        assert driver.app_id == APP_ID
        # Spark's initial target reaches the sidecar, whose pods reach Running.
        assert watch.wait_for(lambda ph: running(ph) == CAPACITY, 90), watch.phases
        assert backend.targets()[0] == CAPACITY

        # The pods are Spark's executor pods (its builder's driver URL, environment, image),
        # with the sidecar's executor ids in their names, labels, environment and hostnames.
        pods = sim.pods()
        prefix = sanitize_prefix(APP_ID)
        ids = set()
        for pod in pods:
            name, labels, env = pod["metadata"]["name"], pod["metadata"]["labels"], env_of(pod)
            executor_id = labels["spark-exec-id"]
            ids.add(executor_id)
            assert name == f"{prefix}-exec-{executor_id}"
            assert env["SPARK_EXECUTOR_ID"] == executor_id
            assert env["SPARK_APPLICATION_ID"] == APP_ID
            assert env["SPARK_DRIVER_URL"].startswith("spark://CoarseGrainedScheduler@127.0.0.1:")
            spec: dict[str, Any] = dict(pod["spec"])  # hostname: beyond kubesim's typed body
            assert spec["hostname"] == name
            assert pod["spec"]["containers"][0]["image"] == IMAGE
            assert labels["spark-exec-resourceprofile-id"] == "0"
        assert ids == {str(i) for i in range(1, CAPACITY + 1)}

        # Above capacity the sidecar's two extra pods stay Pending; dynamic allocation's lower
        # target reaches the sidecar, which deletes exactly those.
        driver.set_total(CAPACITY + 2)
        assert watch.wait_for(lambda ph: len(ph) == CAPACITY + 2, 60), watch.phases
        pending = {n for n, p in watch.phases.items() if p == "Pending"}
        assert len(pending) == 2
        driver.set_total(CAPACITY)
        assert backend.targets()[0] == CAPACITY
        assert watch.wait_for(lambda ph: not (pending & ph.keys()), 60), watch.phases
        assert running(watch.phases) == CAPACITY

        # On exit the plugin stops the allocation and no executor pod is left.
        assert driver.stop() == 0
        assert backend.targets()[0] == 0
        assert watch.wait_for(lambda ph: not ph, 30), watch.phases
    finally:
        driver.stop()
        watch.close()
    assert [p["metadata"]["name"] for p in sim.pods()] == []


def test_spark_fails_to_start_without_its_sidecar(sim: KubeSim, plugin_jar: Path) -> None:
    """No sidecar at the configured address: Spark's start fails and names the address."""
    with socket_nobody_listens_on() as address:
        conf = {
            "spark.jars": str(plugin_jar),
            "spark.kubernetes.allocation.pods.allocator": ALLOCATOR,
            "spark.execpods.sidecar.address": address,
            "spark.execpods.sidecar.timeout": "2s",
        }
        driver = SparkDriver(f"k8s://{sim.url}", executors=1, conf=conf)
        with pytest.raises(RuntimeError):
            driver.start(timeout=120)
        driver.stop()
        assert any(address in line for line in driver.stderr_tail), driver.stderr_tail[-20:]
    assert sim.pods() == []


def test_spark_fails_to_start_with_a_sidecar_of_another_application(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    """Spark's application id is not the sidecar's: the sidecar would label its pods so that
    Spark never saw them. The sidecar refuses the first target instead, and Spark's start fails
    saying which id to give the sidecar."""
    driver = SparkDriver(
        f"k8s://{sim.url}", executors=1, conf=plugin_conf(plugin_jar, sidecar.address, "spark-x")
    )
    with pytest.raises(RuntimeError):
        driver.start(timeout=120)
    driver.stop()
    assert any("--app-id spark-x" in line for line in driver.stderr_tail), driver.stderr_tail[-20:]
    assert sidecar.runtime.backend.targets() == {0: 0}
    assert sim.pods() == []


class socket_nobody_listens_on:  # noqa: N801 (used as a context manager, like a function)
    """A 127.0.0.1 address that was free a moment ago: bound, read back, then closed."""

    def __enter__(self) -> str:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return f"127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        return None
