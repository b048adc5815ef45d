"""What the plugin's real-Spark tests share: their marks, the in-process sidecar Spark reaches,
Spark's plugin properties and the watch of the application's executors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from execpods.devtools.simulated import simulator_properties
from execpods.devtools.spark import PLUGIN_CLASS, ExecutorWatch, spark_available
from execpods.kubesim import KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

PLUGIN_MARKS = [
    pytest.mark.slow,
    pytest.mark.jvm,
    pytest.mark.timeout(300),
    pytest.mark.skipif(spark_available() is not None, reason=str(spark_available())),
    pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed"),
]


def plugin_sidecar(sim: KubeSim, app: str, **conf: str) -> EmbeddedSidecar:
    """A sidecar on ``sim`` for application ``app`` (not started): no executors until Spark
    asks, a 200 ms allocation batch delay, and ``conf`` on top."""
    props = simulator_properties(
        sim.url,
        app,
        **{
            "spark.executor.instances": "0",
            "spark.kubernetes.allocation.batch.delay": "200ms",
            **conf,
        },
    )
    return EmbeddedSidecar(props)


def plugin_conf(jar: Path, address: str, app_id: str) -> dict[str, str]:
    """The jar, the allocator class, the sidecar's address, and the application id (the sidecar
    labels its pods with it, and Spark finds its executors by it)."""
    return {
        "spark.app.id": app_id,
        "spark.kubernetes.allocation.pods.allocator": PLUGIN_CLASS,
        "spark.execpods.sidecar.address": address,
        "spark.jars": str(jar),
    }


def executor_watch(sim: KubeSim, app: str) -> ExecutorWatch:
    """A started watch of the phases of ``app``'s executor pods."""
    watch = ExecutorWatch(sim.url, selector=f"spark-app-selector={app},spark-role=executor")
    watch.start()
    return watch


def running(phases: dict[str, str]) -> int:
    return sum(p == "Running" for p in phases.values())
