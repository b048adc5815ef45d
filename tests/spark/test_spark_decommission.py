"""Graceful decommission with real Spark 4.3 through the plugin, on kubesim (issues 21, 33).

Spark's own executor builder applies the driver's `terminationGracePeriodSeconds` and, under
`spark.decommission.enabled`, the preStop hook (`/opt/decom.sh`) to the executor pods; the plugin
hands those pods to the sidecar, which keeps them. When Spark stops, the plugin does what Spark's
own `ExecutorPodsAllocator.stop` does: one delete of the application's executor pods by label,
each with its own grace period, and no mark (Spark labels and costs only the executors it scales
down, in `KubernetesClusterSchedulerBackend`, which the plugin leaves to Spark; the side-by-side
harness compares those). On a cluster whose executors take 30 s to stop, they are seen
Terminating, unmarked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from execpods.devtools.spark import SparkDriver
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
    conf = {
        "spark.kubernetes.executor.decommissionLabel": LABEL,
        "spark.kubernetes.executor.decommissionLabelValue": "true",
        "spark.kubernetes.executor.podDeletionCost": "-1000",
        "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "60s",
    }
    with plugin_sidecar(sim, APP, **conf) as started:
        yield started


def test_spark_decommissions_executors_through_the_sidecar(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    conf = {
        **plugin_conf(plugin_jar, sidecar.address, APP),
        "spark.decommission.enabled": "true",
        "spark.kubernetes.executor.terminationGracePeriodSeconds": "45",
        # Only the sidecar's configuration names the label: a mark at stop could only be its
        # own.
    }
    watch = executor_watch(sim, APP)
    driver = SparkDriver(f"k8s://{sim.url}", executors=EXECUTORS, conf=conf)
    try:
        driver.start()
        assert watch.wait_for(lambda ph: running(ph) == EXECUTORS, 60), watch.phases
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
        assert metadata["deletionGracePeriodSeconds"] == 45
        assert LABEL not in metadata["labels"], "Spark's stop marks nothing"
        assert COST not in (metadata.get("annotations") or {})
    assert not [r for r in sim.requests() if r.verb == "patch"]
    (stop,) = [r for r in sim.requests() if r.verb == "deletecollection" and "pods" in r.path]
    assert stop.query["labelSelector"] == f"spark-app-selector={APP},spark-role=executor"
