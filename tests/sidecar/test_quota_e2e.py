"""Quota as capacity, end to end: a sidecar over real HTTP to the simulator's quota admission.

A namespace ResourceQuota below the target, with a small spark.executor.maxNumFailures: the
application is not failed, the quota's worth run, the stream names the quota and its figures,
refused creates stay under a few a second, and once the quota is raised the target is reached.
"""

from __future__ import annotations

import time
from typing import Any

from execpods.client import AllocatorClient, StreamUpdate
from execpods.kubesim import ClusterConfig, KubeSim
from kubernetes import client

from tests.sidecar.capacity_support import collect, notices, sidecar_on
from tests.sidecar.conftest import SidecarOnFactory, app_pods, running_ids, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape, scrape_until, value

QUOTA = "spark-quota"


def _refused_creates(sim: KubeSim) -> list[float]:
    """When each pod create the quota refused was answered (simulator clock)."""
    return [
        r.at
        for r in sim.requests()
        if r.verb == "create" and r.path.endswith("/pods") and r.status == 403
    ]


def _core(sim: KubeSim) -> Any:
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=sim.url)))


def test_a_quota_below_the_target_caps_it_fails_nothing_and_is_reached_once_raised(
    make_sidecar_on: SidecarOnFactory,
) -> None:
    with KubeSim(cluster=ClusterConfig(start_latency=0.15, start_jitter=0.1)) as sim:
        core = _core(sim)
        core.create_namespaced_resource_quota(
            "default", {"metadata": {"name": QUOTA}, "spec": {"hard": {"pods": "6"}}}
        )
        conf = {
            "spark.executor.maxNumFailures": "3",
            "execpods.quota.maxRetryInterval": "2s",
            **METRICS_CONF,
        }
        updates: list[StreamUpdate] = []
        with (
            sidecar_on(sim, make_sidecar_on, "quota", conf) as sidecar,
            AllocatorClient(sidecar.address) as driver,
            driver.stream_snapshots() as stream,
        ):
            collect(iter(stream), updates)
            driver.request_total(10)
            wait_for(lambda: len(running_ids(sim, "quota")) == 6, what="the quota's worth running")
            wait_for(lambda: notices(updates, "quota_exceeded"), what="the quota notice")
            named = notices(updates, "quota_exceeded")[0]
            assert f"ResourceQuota {QUOTA}: requested pods=1, used pods=6, limited pods=6" in named
            assert "capped at 6" in named
            address = sidecar.server.ops.metrics_address
            capped = scrape_until(
                address,
                lambda m: value(m, "execpods_executors_waiting", reason="Quota") == 4,
                "four executors kept out by the quota, in the metrics",
            )
            assert value(capped, "execpods_effective_target_executors", resource_profile="0") == 6
            assert value(capped, "execpods_target_executors", resource_profile="0") == 10
            # The namespace stays full for a while: nothing fails, the refusals are slow.
            started = sim.now()
            time.sleep(5.0)
            refused = [t for t in _refused_creates(sim) if t >= started]
            assert len(refused) / (sim.now() - started) < 3.0, refused
            assert len(app_pods(sim, "quota")) == 6
            assert not any(u.application_failure for u in list(updates))
            assert sidecar.runtime.backend.failed_executors == 0
            # Raised: the target is reached, and the cap lifted.
            core.patch_namespaced_resource_quota(
                QUOTA, "default", {"spec": {"hard": {"pods": "10"}}}
            )
            wait_for(
                lambda: len(running_ids(sim, "quota")) == 10,
                timeout=30.0,
                what="the target reached once the quota was raised",
            )
            wait_for(lambda: notices(updates, "quota_cap_lifted"), what="the cap lifted")
            lifted = scrape(address)
            assert value(lifted, "execpods_executors_waiting", reason="Quota") == 0
            assert value(lifted, "execpods_effective_target_executors", resource_profile="0") == 10
            assert not any(u.application_failure for u in list(updates))
            assert sidecar.runtime.backend.failed_executors == 0
