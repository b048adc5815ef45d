"""Unmodified Spark 4.3 allocating through an execpods sidecar with the plugin (issue 14).

Spark runs with ``spark.kubernetes.allocation.pods.allocator=io.execpods.spark.ExecPodsAllocator``
and the jar built by ``tools/dev.py spark-plugin``; the sidecar runs in process on the same
kubesim (port 0, read back). Spark keeps its own watch and lifecycle manager; every executor pod
is created and deleted by the sidecar, from the pod Spark's own executor builder made.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.bench.runs import START_JITTER, START_LATENCY
from execpods.devtools.bench.spark_peers import peak_per_second, spark_peer
from execpods.devtools.spark import SparkDriver
from execpods.k8s import sanitize_prefix
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

from tests.spark.support import (
    PLUGIN_MARKS,
    executor_watch,
    plugin_conf,
    plugin_sidecar,
    running,
)

pytestmark = PLUGIN_MARKS

APP = "spark-plugin-test"
CAPACITY = 4


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=2, pods_per_node=2, start_latency=0.3, start_jitter=0.1, seed=5)
    with KubeSim(cluster=cfg) as s:
        yield s


@pytest.fixture
def sidecar(sim: KubeSim) -> Iterator[EmbeddedSidecar]:
    conf = {
        # The sidecar's allocation settings are its own (Spark's configured the allocator the
        # plugin replaces): pending pods older than this go when a target drops.
        "spark.dynamicAllocation.executorIdleTimeout": "1s",
        "spark.executor.memory": "2g",  # the sidecar's own default, which Spark's overrides
    }
    with plugin_sidecar(sim, APP, **conf) as started:
        yield started


def test_spark_allocates_through_the_sidecar(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    backend = sidecar.runtime.backend
    conf = {**plugin_conf(plugin_jar, sidecar.address, APP), "spark.executor.memory": "512m"}
    watch = executor_watch(sim, APP)
    driver = SparkDriver(f"k8s://{sim.url}", executors=CAPACITY, conf=conf)
    try:
        driver.start()
        assert driver.app_id == APP
        # Spark's initial target reaches the sidecar, whose pods reach Running.
        assert watch.wait_for(lambda ph: running(ph) == CAPACITY, 60), watch.phases
        assert backend.targets()[0] == CAPACITY
        # The pods are Spark's own executor pods (its builder's driver URL and JVM options in
        # the env), with the sidecar's executor ids in name, labels, env and hostname.
        ids = set()
        for pod in sim.pods():
            container: Any = pod["spec"]["containers"][0]
            env = {str(e["name"]): e.get("value", "") for e in container.get("env", [])}
            name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
            assert any(key.startswith("SPARK_JAVA_OPT_") for key in env), sorted(env)
            assert env["SPARK_DRIVER_URL"].startswith("spark://CoarseGrainedScheduler@127.0.0.1:")
            ids.add(labels["spark-exec-id"])
            assert name == f"{sanitize_prefix(APP)}-exec-{labels['spark-exec-id']}"
            assert env["SPARK_EXECUTOR_ID"] == labels["spark-exec-id"]
            spec: dict[str, Any] = dict(pod["spec"])  # hostname: beyond kubesim's typed body
            assert spec["hostname"] == name
            # Sized as Spark sizes it: 512 MiB heap + the 384 MiB minimum overhead.
            assert container["resources"]["requests"]["memory"] == "896Mi", container
        assert ids == {str(i) for i in range(1, CAPACITY + 1)}

        # Dynamic allocation's target reaches the sidecar: up (two stay Pending, the cluster
        # is full), then down (the sidecar deletes the surplus pending pods).
        driver.set_total(CAPACITY + 2)
        assert watch.wait_for(lambda ph: len(ph) == CAPACITY + 2, 60), watch.phases
        pending = {n for n, p in watch.phases.items() if p == "Pending"}
        assert len(pending) == 2
        driver.set_total(CAPACITY)
        assert backend.targets()[0] == CAPACITY
        assert watch.wait_for(lambda ph: not (pending & ph.keys()), 60), watch.phases
        assert running(watch.phases) == CAPACITY

        # On exit the plugin stops the sidecar's allocation and deletes every executor.
        assert driver.stop() == 0
        assert backend.targets()[0] == 0
        assert watch.wait_for(lambda ph: not ph, 30), watch.phases
    finally:
        driver.stop()
        watch.close()
    assert sim.pods() == []
    assert sim.objects("configmaps") == []


def test_spark_fails_to_start_with_a_sidecar_of_another_application(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    """Spark's application id is not the sidecar's: the sidecar would label its pods so that
    Spark never saw them. The sidecar refuses the first target instead, and Spark's start fails
    saying which id to give the sidecar."""
    conf = plugin_conf(plugin_jar, sidecar.address, "spark-x")
    driver = SparkDriver(f"k8s://{sim.url}", executors=1, conf=conf)
    with pytest.raises(RuntimeError):
        driver.start(timeout=120)
    driver.stop()
    assert any("--app-id spark-x" in line for line in driver.stderr_tail), driver.stderr_tail[-20:]
    assert any(
        "serves another application" in line and "spark.app.id" in line
        for line in driver.stderr_tail
    ), driver.stderr_tail[-20:]
    assert sidecar.runtime.backend.targets() == {0: 0}
    assert sim.pods() == []


def test_spark_fails_to_start_without_its_sidecar(sim: KubeSim, plugin_jar: Path) -> None:
    """No sidecar at the configured address: Spark's start fails and names the address."""
    with socket.socket() as probe:  # a loopback port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    conf = {**plugin_conf(plugin_jar, address, APP), "spark.execpods.sidecar.deadlineMs": "2000"}
    driver = SparkDriver(f"k8s://{sim.url}", executors=1, conf=conf)
    with pytest.raises(RuntimeError):
        driver.start(timeout=120)
    driver.stop()
    said = "\n".join(driver.stderr_tail)
    assert f"the sidecar at {address} (spark.execpods.sidecar.address)" in said, said[-2000:]
    assert "is not reachable" in said or "did not answer within" in said
    assert sim.pods() == []


def test_the_benchmark_peers_measure_both_ways(plugin_jar: Path) -> None:
    """The time-to-target benchmark's live peers (``--spark``): Spark alone and Spark with the
    plugin, on the benchmark's cluster settings, both reach N and come back as its `Run`s."""
    # Three pods and the executors' ConfigMap; with the plugin also the sidecar's id ledger (a
    # ConfigMap: Spark's driver runs outside the cluster here, so there is no pod to annotate).
    for run, creates in ((spark_peer(3), 4), (spark_peer(3, plugin_jar=plugin_jar), 5)):
        assert run.seconds is not None
        assert run.seconds >= START_LATENCY - START_JITTER  # at least a simulated start
        assert run.ratio is not None
        assert run.curve[-1][1] == 3
        assert run.creates == creates
        assert run.throttled == 0


def test_peak_per_second_counts_the_busiest_second() -> None:
    assert peak_per_second([]) == 0
    # Windows are half-open, [t, t + 1 s): 0.5, 0.99 and 1.0 (1.5 is a full second after 0.5).
    assert peak_per_second([0.0, 0.5, 0.99, 1.0, 1.5, 3.0]) == 3
    assert peak_per_second([0.0, 0.2, 0.4, 0.6, 0.8, 0.9]) == 6
    assert peak_per_second([2.0, 0.1, 0.2]) == 2
