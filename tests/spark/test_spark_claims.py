"""Unmodified Spark 4.3 with an OnDemand PVC volume, allocating through the plugin and a sidecar.

Spark's own executor builder makes the executor pod and its claim (for executor 0, the profile's
template); the plugin passes the claim to the sidecar with the template, and the sidecar makes one
claim per executor, named as Spark names it. kubesim binds each claim and holds the executor's
pod until its claim exists, as a cluster does. In client mode there is no driver pod: each claim is
owned by its executor's pod, so none is left once the application's executors are gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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

APP = "spark-claims-test"
EXECUTORS = 2
VOLUME = "spark.kubernetes.executor.volumes.persistentVolumeClaim.data"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    cfg = ClusterConfig(nodes=2, pods_per_node=4, start_latency=0.3, start_jitter=0.1, seed=3)
    with KubeSim(cluster=cfg) as s:
        yield s


@pytest.fixture
def sidecar(sim: KubeSim) -> Iterator[EmbeddedSidecar]:
    with plugin_sidecar(sim, APP) as started:
        yield started


def test_spark_with_an_on_demand_claim_per_executor(
    sim: KubeSim, sidecar: EmbeddedSidecar, plugin_jar: Path
) -> None:
    conf = {
        **plugin_conf(plugin_jar, sidecar.address, APP),
        "spark.executor.memory": "512m",
        f"{VOLUME}.mount.path": "/data",
        f"{VOLUME}.options.claimName": "OnDemand",
        f"{VOLUME}.options.storageClass": "standard",
        f"{VOLUME}.options.sizeLimit": "1Gi",
    }
    watch = executor_watch(sim, APP)
    driver = SparkDriver(f"k8s://{sim.url}", executors=EXECUTORS, conf=conf)
    try:
        driver.start()
        assert watch.wait_for(lambda ph: running(ph) == EXECUTORS, 90), watch.phases
        claims = {c["metadata"]["name"]: c for c in sim.objects("persistentvolumeclaims")}
        assert len(claims) == EXECUTORS, sorted(claims)
        for pod in sim.pods():
            executor_id = pod["metadata"]["labels"]["spark-exec-id"]
            spec: Any = pod["spec"]
            (volume,) = [v for v in spec["volumes"] if v["name"] == "data"]
            name = volume["persistentVolumeClaim"]["claimName"]
            assert name.endswith(f"-exec-{executor_id}-pvc-0"), name
            claim = claims[name]
            assert claim["status"]["phase"] == "Bound"
            assert claim["spec"]["storageClassName"] == "standard"
            assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
            assert claim["metadata"]["labels"]["spark-app-selector"] == APP
            (owner,) = claim["metadata"]["ownerReferences"]  # no driver pod: the executor's
            assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
            assert pod["metadata"]["name"] == f"{sanitize_prefix(APP)}-exec-{executor_id}"
        assert driver.stop() == 0
        assert watch.wait_for(lambda ph: not ph, 30), watch.phases
    finally:
        driver.stop()
        watch.close()
    assert sim.pods() == []
    assert sim.objects("persistentvolumeclaims") == []
