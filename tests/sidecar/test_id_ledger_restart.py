"""Issue 20, defect 1 end to end: a restarted sidecar never reuses an executor id, even when
every pod that carried it is gone, because the mark lives in the cluster (the driver pod's
annotation, or without one a ConfigMap).

Real sidecars (the production wiring, `wiring.connect`) over real gRPC and HTTP to kubesim. Both
tests fail on fde8f25: recovery continued above the highest id still in the cluster, so the
restarted sidecar created `-exec-3` again, and after a scale to zero `-exec-1` to `-exec-3`.
"""

from __future__ import annotations

from typing import Any

import pytest
from execpods.client import AllocatorClient
from execpods.k8s import connect
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
from execpods.kubesim import KubeSim
from kubernetes import client

from tests.sidecar.conftest import SidecarOnFactory, app_pods, creates, running_ids, wait_for

DRIVER: dict[str, Any] = {
    "metadata": {"name": "the-driver"},
    "spec": {"containers": [{"name": "driver", "image": "spark:test"}]},
}


def conf_for(sim: KubeSim, driver: bool, **extra: str) -> dict[str, str]:
    if not driver:
        return extra
    sim.create_pod(DRIVER)
    return {"spark.kubernetes.driver.pod.name": "the-driver", **extra}


def ids_of(sim: KubeSim, app_id: str) -> set[int]:
    return {int(p["metadata"]["labels"]["spark-exec-id"]) for p in app_pods(sim, app_id)}


@pytest.mark.parametrize("driver", [False, True], ids=["configmap", "driver-annotation"])
def test_a_killed_executors_id_is_not_reused_after_a_restart(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory, driver: bool
) -> None:
    # The first sidecar leaves its pods when stopped, as one that crashed would.
    conf = conf_for(sim, driver, **{"spark.kubernetes.executor.deleteOnTermination": "false"})
    first = make_sidecar_on(sim, "ids", conf=conf)
    with AllocatorClient(first.address) as client:
        client.request_total(3)
        wait_for(lambda: running_ids(sim, "ids") == {1, 2, 3}, what="three running")
        client.request_total(2)  # the driver lets executor 3 go: no replacement
        assert client.kill_executors([3]) == 1
    wait_for(lambda: ids_of(sim, "ids") == {1, 2}, what="executor 3's pod gone")
    first.stop()

    second = make_sidecar_on(sim, "ids", conf=conf)
    with AllocatorClient(second.address) as client:
        client.request_total(3)
        wait_for(lambda: len(running_ids(sim, "ids")) == 3, what="three running again")
    new = running_ids(sim, "ids") - {1, 2}
    assert len(new) == 1
    assert min(new) > 3, f"executor id {new} was issued before"


@pytest.mark.parametrize("driver", [False, True], ids=["configmap", "driver-annotation"])
def test_no_id_is_reused_after_a_restart_from_zero_pods(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory, driver: bool
) -> None:
    conf = conf_for(sim, driver)
    first = make_sidecar_on(sim, "zero", conf=conf)
    with AllocatorClient(first.address) as client:
        client.request_total(3)
        wait_for(lambda: running_ids(sim, "zero") == {1, 2, 3}, what="three running")
    first.stop()  # deletes every executor pod: nothing in the pods says which ids were used
    wait_for(lambda: not app_pods(sim, "zero"), what="every executor pod gone")

    second = make_sidecar_on(sim, "zero", conf=conf)
    with AllocatorClient(second.address) as client:
        client.request_total(3)
        wait_for(lambda: len(running_ids(sim, "zero")) == 3, what="three running again")
    assert min(running_ids(sim, "zero")) > 3


def test_an_unreadable_mark_creates_nothing_until_it_is_fixed(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    core = client.CoreV1Api(connect(api_url=sim.url))
    name = ledger_config_map_name("unreadable")
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={DATA_KEY: "12x"})
    core.create_namespaced_config_map("default", body)
    sidecar = make_sidecar_on(sim, "unreadable")
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(2)
        # The mark is read again every round; while it is not a number, nothing is created.
        wait_for(lambda: ledger_reads(sim, name) >= 3, what="the mark read three times")
        assert creates(sim) == 0
        core.patch_namespaced_config_map(name, "default", {"data": {DATA_KEY: "12"}})
        wait_for(lambda: running_ids(sim, "unreadable") == {13, 14}, what="ids above the mark")


def ledger_reads(sim: KubeSim, name: str) -> int:
    return sum(1 for r in sim.requests() if r.verb == "get" and r.path.endswith(f"/{name}"))
