"""Unmodified Spark 4.3 allocating through an execpods sidecar with the plugin (issue 14).

Spark runs with ``spark.kubernetes.allocation.pods.allocator=io.execpods.spark.ExecPodsAllocator``
and the jar built by ``tools/dev.py spark-plugin``; the sidecar runs in process on the same
kubesim. Spark keeps its own watch and lifecycle manager; every executor pod is created and
deleted by the sidecar, from the pod Spark's own executor builder made.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from execpods.devtools.spark import (
    ExecutorWatch,
    SparkDriver,
    spark_available,
    spark_on_kubesim,
)
from execpods.devtools.spark_plugin import build
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar, simulator_properties

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(spark_available() is not None, reason=str(spark_available())),
    pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed"),
]

APP = "spark-plugin-test"
CAPACITY = 4


@pytest.fixture(scope="module")
def plugin_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("plugin"))


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=2, pods_per_node=2, start_latency=0.3, start_jitter=0.1, seed=5)
    with KubeSim(cluster=cfg) as s:
        yield s


def running(phases: dict[str, str]) -> int:
    return sum(p == "Running" for p in phases.values())


def test_spark_allocates_through_the_sidecar(sim: KubeSim, plugin_jar: Path) -> None:
    props = simulator_properties(
        sim.url,
        APP,
        **{
            "spark.executor.instances": "0",
            "spark.kubernetes.allocation.batch.delay": "200ms",
            "spark.dynamicAllocation.executorIdleTimeout": "1s",
            "spark.executor.memory": "2g",  # the sidecar's own default, which Spark's overrides
        },
    )
    with EmbeddedSidecar(props) as sidecar:
        conf = {
            "spark.app.id": APP,
            "spark.kubernetes.allocation.pods.allocator": "io.execpods.spark.ExecPodsAllocator",
            "spark.execpods.sidecar.address": sidecar.address,
            "spark.driver.extraClassPath": str(plugin_jar),
            "spark.executor.memory": "512m",
        }
        driver = SparkDriver(f"k8s://{sim.url}", executors=CAPACITY, conf=conf).start()
        watch = ExecutorWatch(sim.url, selector=f"spark-app-selector={APP},spark-role=executor")
        watch.start()
        try:
            assert watch.wait_for(lambda ph: running(ph) == CAPACITY, 60), watch.phases
            # The pods are Spark's own executor pods (its builder's JVM options in the env),
            # named and numbered by the sidecar.
            pod = sim.pods()[0]
            env = {str(e["name"]) for e in pod["spec"]["containers"][0].get("env", [])}
            assert any(name.startswith("SPARK_JAVA_OPT_") for name in env), sorted(env)
            assert "SPARK_DRIVER_URL" in env
            # Sized as Spark sizes it: 512 MiB heap + the 384 MiB minimum overhead.
            container: Any = pod["spec"]["containers"][0]
            assert container["resources"]["requests"]["memory"] == "896Mi", container

            # Dynamic allocation's target reaches the sidecar: up (two stay Pending, the
            # cluster is full), then down (the sidecar deletes the surplus pending pods).
            driver.set_total(CAPACITY + 2)
            assert watch.wait_for(lambda ph: len(ph) == CAPACITY + 2, 60), watch.phases
            pending = {n for n, p in watch.phases.items() if p == "Pending"}
            driver.set_total(CAPACITY)
            assert watch.wait_for(lambda ph: not (pending & ph.keys()), 60), watch.phases
            assert running(watch.phases) == CAPACITY

            # On exit the plugin stops the sidecar's allocation and deletes every executor.
            assert driver.stop() == 0
            assert watch.wait_for(lambda ph: not ph, 30), watch.phases
        finally:
            driver.stop()
            watch.close()
    assert sim.pods() == []
    assert sim.objects("configmaps") == []


def test_the_benchmark_peers_measure_both_ways(plugin_jar: Path) -> None:
    """The time-to-target benchmark's peers: Spark alone and Spark with the plugin, measured
    the same way on the same cluster settings; both reach N and leave nothing behind."""
    cluster = ClusterConfig(nodes=1, pods_per_node=10, start_latency=0.2, start_jitter=0.1)
    alone = spark_on_kubesim(cluster, 3)
    plugged = spark_on_kubesim(cluster, 3, plugin_jar=plugin_jar)
    for run in (alone, plugged):
        assert run.seconds_to_target >= 0.1  # at least the simulated start latency
        assert (run.pods_created, run.exit_code, run.pods_left) == (3, 0, 0)
