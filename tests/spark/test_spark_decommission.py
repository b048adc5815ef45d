"""Graceful decommission with real Spark 4.3 through the plugin, on kubesim (issue 21).

Spark's own executor builder applies the driver's `terminationGracePeriodSeconds` and, under
`spark.decommission.enabled`, the preStop hook (`/opt/decom.sh`) to the executor pods; the plugin
hands those pods to the sidecar, which keeps them. When the plugin stops the allocation it kills
the executors at the sidecar, which first labels them (`decommissionLabel`=`decommissionLabelValue`)
and sets their `controller.kubernetes.io/pod-deletion-cost`, then deletes them with their own
grace period: on a cluster whose executors take 30 s to stop, they are seen Terminating, marked.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from execpods.devtools.simulated import simulator_properties
from execpods.devtools.spark import PLUGIN_CLASS, ExecutorWatch, SparkDriver, spark_available
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(spark_available() is not None, reason=str(spark_available())),
    pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed"),
]

APP = "spark-decommission-test"
LABEL = "spark.example.com/decommissioning"
COST = "controller.kubernetes.io/pod-deletion-cost"
EXECUTORS = 2


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=2, pods_per_node=2, start_latency=0.3, stop_latency=30.0, seed=5)
    with KubeSim(cluster=cfg) as s:
        yield s


@pytest.fixture
def sidecar(sim: KubeSim) -> Iterator[EmbeddedSidecar]:
    # The same decommission properties as the application's spark-defaults.conf.
    props = simulator_properties(
        sim.url,
        APP,
        **{
            "spark.executor.instances": "0",
            "spark.kubernetes.allocation.batch.delay": "200ms",
            "spark.kubernetes.executor.decommissionLabel": LABEL,
            "spark.kubernetes.executor.decommissionLabelValue": "true",
            "spark.kubernetes.executor.podDeletionCost": "-1000",
            "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "60s",
        },
    )
    with EmbeddedSidecar(props) as running:
        yield running


def test_spark_decommissions_executors_through_the_sidecar(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    conf = {
        "spark.app.id": APP,
        "spark.kubernetes.allocation.pods.allocator": PLUGIN_CLASS,
        "spark.execpods.sidecar.address": sidecar.address,
        "spark.jars": str(plugin_jar),
        "spark.decommission.enabled": "true",
        "spark.kubernetes.executor.terminationGracePeriodSeconds": "45",
        # The label is the sidecar's to set (here only its configuration names it, so the marks
        # seen below can only be its own).
    }
    watch = ExecutorWatch(sim.url, selector=f"spark-app-selector={APP},spark-role=executor")
    watch.start()
    driver = SparkDriver(f"k8s://{sim.url}", executors=EXECUTORS, conf=conf)
    try:
        driver.start()
        assert watch.wait_for(
            lambda ph: sum(p == "Running" for p in ph.values()) == EXECUTORS, 60
        ), watch.phases
        for pod in sim.pods():
            raw = cast(dict[str, Any], pod)
            assert raw["spec"]["terminationGracePeriodSeconds"] == 45, "Spark's, kept"
            (container,) = raw["spec"]["containers"]
            assert container["lifecycle"]["preStop"]["exec"]["command"] == ["/opt/decom.sh"]
            assert LABEL not in raw["metadata"]["labels"], "not before it is chosen"
        # Stopping: the plugin kills every executor at the sidecar.
        assert driver.stop() == 0
    finally:
        driver.stop()
        watch.close()
    pods = [cast(dict[str, Any], pod) for pod in sim.pods()]
    assert len(pods) == EXECUTORS, "still stopping within their 45 s grace period"
    for raw in pods:
        metadata = raw["metadata"]
        assert metadata.get("deletionTimestamp"), metadata
        assert metadata["labels"][LABEL] == "true"
        assert metadata["annotations"][COST] == "-1000"
    patches = [r for r in sim.requests() if r.verb == "patch"]
    assert len(patches) >= 2 * EXECUTORS
