"""Real Spark 4.3 as live peers of the time-to-target benchmark.

"Spark 4.3 alone" (its own allocator and fabric8 client) and "Spark 4.3 + execpods plugin"
(unmodified Spark allocating through an execpods sidecar with integrations/spark) run in real time
on a kubesim with the benchmark's cluster settings, and come back as the benchmark's `Run`s, so
they sit in the same table, with the same physical bound, as execpods' policies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from execpods.devtools.bench.runs import (
    SERVER_CREATE_RATE,
    START_JITTER,
    START_LATENCY,
    FirstPodBody,
    Run,
)
from execpods.devtools.spark import PEER_PLUGIN, PEER_SPARK, spark_time_to_target
from execpods.devtools.spark_plugin import build as build_plugin
from execpods.k8s import ApiRateSettings
from execpods.kubesim import ClusterConfig, KubeSim

__all__ = ["peak_per_second", "spark_peer", "spark_peers"]


def peak_per_second(times: list[float]) -> int:
    """The most of these instants that fall within any one second."""
    ordered = sorted(times)
    peak, start = 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= 1.0:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def spark_peer(executors: int, *, plugin_jar: Path | None = None) -> Run:
    """One real Spark run to ``executors`` Running pods, as a benchmark `Run`.

    The bound is the benchmark's: start latency + N / the limiting create rate, which for Spark
    alone is the server's cap (fabric8 has no client rate limit) and with the plugin the lower
    of the sidecar's default client limit and the cap.
    """
    cluster = ClusterConfig(
        nodes=math.ceil(executors / 110) + 2,
        start_latency=START_LATENCY,
        start_jitter=START_JITTER,
        create_rate=SERVER_CREATE_RATE,
    )
    limiting = SERVER_CREATE_RATE
    rate_limit = math.inf
    if plugin_jar is not None:
        rate = ApiRateSettings()
        # The table's limit column: what the sidecar's bucket lets through in one second.
        limiting = min(float(rate.qps), SERVER_CREATE_RATE)
        rate_limit = float(rate.burst + rate.qps)
    started = time.monotonic()
    with KubeSim(cluster=cluster) as sim:
        body = FirstPodBody(sim)
        run = spark_time_to_target(sim.url, executors, plugin_jar=plugin_jar, timeout=1800.0)
        calls = [r.at for r in sim.requests()]
        # Spark's creates: the run's namespace, created first as a user would, is not one.
        creates = sum(
            1 for r in sim.requests() if r.verb == "create" and r.path != "/api/v1/namespaces"
        )
        throttled = sim.create_limit.rejected
    return Run(
        policy=PEER_PLUGIN if plugin_jar is not None else PEER_SPARK,
        executors=executors,
        seconds=run.seconds_to_target,
        bound=START_LATENCY + executors / limiting,
        peak_rate=peak_per_second(calls),
        rate_limit=rate_limit,
        curve=list(run.curve),
        creates=creates,
        throttled=throttled,
        wall=time.monotonic() - started,
        pod_bytes=body.bytes,
    )


def spark_peers(workdir: Path) -> dict[str, Callable[[int], Run]]:
    """Both peers by name; builds the plugin jar into ``workdir`` first."""
    jar = build_plugin(workdir)
    return {
        PEER_SPARK: spark_peer,
        PEER_PLUGIN: lambda n: spark_peer(n, plugin_jar=jar),
    }
