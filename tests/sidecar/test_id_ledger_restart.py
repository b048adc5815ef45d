"""Issue 20, defect 1 end to end: a restarted sidecar never reuses an executor id, even when
every pod that carried it is gone, because the mark lives in the cluster (the driver pod's
annotation, or without one a ConfigMap).

Real sidecars (the production wiring, `wiring.connect`) over real gRPC and HTTP to kubesim. Both
tests fail on fde8f25: recovery continued above the highest id still in the cluster, so the
restarted sidecar created `-exec-3` again, and after a scale to zero `-exec-1` to `-exec-3`.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from execpods.client import AllocatorClient, AllocatorNotice, StreamUpdate
from execpods.k8s import connect
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
from execpods.kubesim import KubeSim
from kubernetes import client

from tests.sidecar.conftest import (
    SidecarOnFactory,
    app_pods,
    collect_updates,
    running_ids,
    wait_for,
)

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


@pytest.mark.parametrize("raw", ["12x", "99999999999999999"])
def test_a_mark_that_is_no_executor_id_is_told_and_allocation_goes_on(
    sim: KubeSim,
    make_sidecar_on: SidecarOnFactory,
    raw: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 32 R2: on `128638e` a ConfigMap holding `12x` stopped every create (read again and
    again, never a guess), and one holding 17 digits was taken as the mark, so that the next id
    was beyond any executor id Spark can hold. Now the value is not believed: it is said, naming
    the object, ids continue above the application's pods, and the mark is written again; a
    value written while the sidecar runs reaches the driver's stream."""
    core = client.CoreV1Api(connect(api_url=sim.url))
    name = ledger_config_map_name("tampered")
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={DATA_KEY: raw})
    core.create_namespaced_config_map("default", body)
    metrics = {
        "execpods.sidecar.metrics.enabled": "true",
        "execpods.sidecar.metrics.host": "127.0.0.1",
        "execpods.sidecar.metrics.port": "0",
    }
    with caplog.at_level(logging.WARNING):
        sidecar = make_sidecar_on(sim, "tampered", conf=metrics)
        updates: list[StreamUpdate] = []
        with AllocatorClient(sidecar.address) as driver, driver.stream_snapshots() as stream:
            driver.request_total(2)
            wait_for(lambda: running_ids(sim, "tampered") == {1, 2}, what="ids from 1")
            assert 2 <= config_map_mark(core, name) < 2**31
            said = [r.getMessage() for r in caplog.records if "no executor id" in r.getMessage()]
            assert any(name in m and raw in m for m in said), said
            registry = sidecar.server.ops.metrics.registry  # type: ignore[union-attr]
            counted = registry.get_sample_value(
                "execpods_id_ledger_distrusted_total", {"reason": "LedgerMarkInvalid"}
            )
            assert counted == 1
            # Written again while it runs: read back when executors leave, and told.
            core.patch_namespaced_config_map(name, "default", {"data": {DATA_KEY: raw}})
            driver.request_total(1)
            assert driver.kill_executors([2]) == 1
            collect_updates(iter(stream), updates, lambda: bool(distrusted(updates)))
    (notice,) = distrusted(updates)
    assert notice.reason == "LedgerMarkInvalid"
    assert name in notice.message
    wait_for(lambda: 2 <= config_map_mark(core, name) < 2**31, what="the mark written again")


def test_a_ledger_deleted_while_running_is_written_again_before_a_restart_needs_it(
    sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    """Issue 32 R3, as the probe did it: six running, the ledger's ConfigMap deleted, executors
    3-6 killed (the driver lowering its target: no create follows), the sidecar gone, a new one
    asked for six. On `128638e` the mark was written again only at the next block, so the new
    sidecar issued 3-6 again; now the executors leaving make the sidecar read the mark back and
    write it again."""
    conf = {"spark.kubernetes.executor.deleteOnTermination": "false"}  # pods stay, as a crash
    first = make_sidecar_on(sim, "lost", conf=conf)
    core = client.CoreV1Api(connect(api_url=sim.url))
    name = ledger_config_map_name("lost")
    with AllocatorClient(first.address) as driver:
        driver.request_total(6)
        wait_for(lambda: running_ids(sim, "lost") == set(range(1, 7)), what="six running")
        core.delete_namespaced_config_map(name, "default")
        driver.request_total(2)
        assert driver.kill_executors([3, 4, 5, 6]) == 4
        wait_for(lambda: ids_of(sim, "lost") == {1, 2}, what="3-6 gone")
        wait_for(lambda: config_map_mark(core, name) >= 6, what="the mark written again")
    first.stop()
    second = make_sidecar_on(sim, "lost", conf=conf)
    with AllocatorClient(second.address) as driver:
        driver.request_total(6)
        wait_for(lambda: len(running_ids(sim, "lost")) == 6, what="six running again")
    assert not running_ids(sim, "lost") & {3, 4, 5, 6}, "ids issued twice"


def distrusted(updates: list[StreamUpdate]) -> list[AllocatorNotice]:
    return [n for u in updates for n in u.notices if n.kind == "id_ledger_distrusted"]


def config_map_mark(core: client.CoreV1Api, name: str) -> int:
    try:
        found = core.read_namespaced_config_map(name, "default")
    except client.ApiException:
        return 0
    raw = str((found.data or {}).get(DATA_KEY, "0"))
    return int(raw) if raw.isdigit() else -1


def ledger_reads(sim: KubeSim, name: str) -> int:
    return sum(1 for r in sim.requests() if r.verb == "get" and r.path.endswith(f"/{name}"))
