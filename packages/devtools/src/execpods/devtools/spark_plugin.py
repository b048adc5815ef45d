"""Spark 4.3 with the execpods plugin, measured next to Spark 4.3 alone.

    python -m execpods.devtools.spark_plugin --executors 20     # both, each on a kubesim of its own

:func:`plugin_time_to_target` is the "Spark 4.3 + execpods plugin" peer of the time-to-target
benchmark: the same measurement as :func:`execpods.devtools.spark.spark_time_to_target` (from the
first executor pod's creation to N pods Running, then Spark stopped and its leftovers counted),
with Spark's allocation delegated (``spark.kubernetes.allocation.pods.allocator``) to an execpods
sidecar started here, in this process, on the same API server and namespace.

The plugin jar is built by ``python3 tools/dev.py plugin`` (tools/build_spark_plugin.py); this
module only takes its path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from pathlib import Path

from execpods.devtools.spark import SparkRun, spark_available, spark_time_to_target
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar, simulator_properties

__all__ = ["ALLOCATOR", "DEFAULT_JAR", "main", "plugin_conf", "plugin_time_to_target"]

ALLOCATOR = "io.execpods.spark.ExecpodsPodsAllocator"
"""The plugin's class, the value of spark.kubernetes.allocation.pods.allocator."""
DEFAULT_JAR = Path("build") / "spark-plugin" / "execpods-spark-plugin-4.3.0.jar"
"""Where tools/build_spark_plugin.py writes the jar, relative to the repository root."""
IMAGE = "apache/spark:4.3.0"


def plugin_conf(jar: Path, sidecar_address: str, app_id: str) -> dict[str, str]:
    """The Spark properties that route allocation through a sidecar: the jar, the allocator
    class, the sidecar's address, and the application id the sidecar labels its pods with."""
    return {
        "spark.app.id": app_id,
        "spark.jars": str(jar),
        "spark.kubernetes.allocation.pods.allocator": ALLOCATOR,
        "spark.execpods.sidecar.address": sidecar_address,
    }


def plugin_time_to_target(
    api_url: str,
    executors: int,
    *,
    jar: Path,
    conf: dict[str, str] | None = None,
    sidecar_conf: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> SparkRun:
    """Spark's time to ``executors`` Running pods with its allocation done by a sidecar.

    The sidecar runs with its defaults, which are Spark's (batches of
    spark.kubernetes.allocation.batch.size every batch.delay), unless ``sidecar_conf`` says
    otherwise; ``conf`` goes to Spark.
    """
    if not jar.exists():
        raise FileNotFoundError(f"{jar}: build the plugin first (python3 tools/dev.py plugin)")
    suffix = uuid.uuid4().hex[:8]
    namespace, app_id = f"plugin-{suffix}", f"spark-{suffix}"
    properties = simulator_properties(
        api_url,
        app_id,
        **{
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.container.image": IMAGE,
            "spark.executor.instances": "0",
            **(sidecar_conf or {}),
        },
    )
    with EmbeddedSidecar(properties) as sidecar:
        settings = {**plugin_conf(jar, sidecar.address, app_id), **(conf or {})}
        return spark_time_to_target(
            api_url, executors, conf=settings, timeout=timeout, namespace=namespace
        )


def main(argv: list[str] | None = None) -> int:
    """Time Spark alone and Spark with the plugin, each on a fresh kubesim; one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=10, help="kubesim nodes")
    parser.add_argument("--jar", type=Path, default=DEFAULT_JAR, help="the plugin jar")
    parser.add_argument("--only-plugin", action="store_true", help="skip 'Spark 4.3 alone'")
    args = parser.parse_args(argv)
    if reason := spark_available():
        parser.error(reason)
    peers = [("Spark 4.3 + execpods plugin", True)]
    if not args.only_plugin:
        peers.insert(0, ("Spark 4.3 alone", False))
    for peer, with_plugin in peers:
        with KubeSim(cluster=ClusterConfig(nodes=args.nodes)) as sim:
            if with_plugin:
                run = plugin_time_to_target(sim.url, args.executors, jar=args.jar.resolve())
            else:
                run = spark_time_to_target(sim.url, args.executors)
        print(json.dumps({"peer": peer, **dataclasses.asdict(run)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
