"""The cluster-backed `ExecutorIdLedger` over real HTTP against kubesim with the real client.

The mark outlives the process (a second ledger over the same cluster reads it back), never goes
down (two writers with stale versions), and a write the API refuses raises and keeps the mark.
"""

from __future__ import annotations

import copy
import random
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from execpods.core import LedgerMarkInvalid, PodForbidden
from execpods.core.ports import ExecutorIdLedger
from execpods.k8s import ApiGateway, connect
from execpods.k8s.ledger import (
    ANNOTATION,
    DATA_KEY,
    LEDGER_LABEL,
    ClusterIdLedger,
    ledger_config_map_name,
)
from execpods.kubesim import KubeSim
from kubernetes import client

APP = "spark-app-1"
GROUP = "rbac.authorization.k8s.io"
DRIVER: dict[str, Any] = {
    "metadata": {"name": "the-driver"},
    "spec": {"containers": [{"name": "driver", "image": "spark:test"}]},
}


def ledger_over(sim: KubeSim, **kwargs: Any) -> ClusterIdLedger:
    gateway = ApiGateway(connect(api_url=sim.url), namespace="default", request_timeout=5)
    return ClusterIdLedger(gateway, app_id=APP, **kwargs)


def sim_annotations(sim: KubeSim) -> dict[str, str]:
    pod = sim.pod("the-driver")
    assert pod is not None
    annotations: dict[str, str] = pod["metadata"].get("annotations") or {}
    return annotations


def config_map(sim: KubeSim) -> dict[str, Any]:
    (found,) = [
        c
        for c in sim.objects("configmaps", namespace="default")
        if c["metadata"]["name"] == ledger_config_map_name(APP)
    ]
    return found


def test_without_a_driver_the_mark_is_a_config_map_labelled_like_the_executors(
    sim: KubeSim,
) -> None:
    first: ExecutorIdLedger = ledger_over(sim)
    assert first.highest_reserved() == 0
    assert sim.objects("configmaps") == []  # reading creates nothing
    first.reserve_through(10)
    stored = config_map(sim)
    assert stored["data"] == {DATA_KEY: "10"}
    labels = stored["metadata"]["labels"]
    assert labels["spark-app-selector"] == APP
    assert labels["spark-role"] == "executor"
    assert labels[LEDGER_LABEL] == "executor-ids"
    first.reserve_through(30)
    assert config_map(sim)["data"] == {DATA_KEY: "30"}

    restarted = ledger_over(sim)  # a new process over the same cluster
    assert restarted.highest_reserved() == 30
    restarted.reserve_through(12)  # below the mark: nothing to write, nothing lowered
    assert restarted.writes == 0
    assert config_map(sim)["data"] == {DATA_KEY: "30"}


def test_with_a_driver_pod_the_mark_is_its_annotation(sim: KubeSim) -> None:
    sim.create_pod(copy.deepcopy(DRIVER))
    ledger = ledger_over(sim, driver_pod_name="the-driver")
    assert ledger.highest_reserved() == 0
    ledger.reserve_through(25)
    assert sim_annotations(sim)[ANNOTATION] == "25"
    assert sim.objects("configmaps") == []
    sim.run_until_idle()  # the kubelet changes the driver's status (a new resourceVersion)
    ledger.reserve_through(40)  # a stale version: 409, read again, write
    assert sim_annotations(sim)[ANNOTATION] == "40"
    assert ledger_over(sim, driver_pod_name="the-driver").highest_reserved() == 40


@pytest.mark.parametrize("driver", [None, "the-driver"])
def test_two_writers_never_lower_the_mark(sim: KubeSim, driver: str | None) -> None:
    sim.create_pod(copy.deepcopy(DRIVER))
    one = ledger_over(sim, driver_pod_name=driver)
    two = ledger_over(sim, driver_pod_name=driver)
    one.reserve_through(1)
    assert one.highest_reserved() == two.highest_reserved() == 1  # both hold this version
    one.reserve_through(50)
    two.reserve_through(30)  # based on the version before 50: refused (409), re-read, kept
    assert ledger_over(sim, driver_pod_name=driver).highest_reserved() == 50
    two.reserve_through(60)
    one.reserve_through(55)  # one's version is stale now: it reads 60 and writes nothing
    assert ledger_over(sim, driver_pod_name=driver).highest_reserved() == 60


def test_the_config_map_is_owned_by_the_driver_when_an_owner_is_given(sim: KubeSim) -> None:
    driver = sim.create_pod(copy.deepcopy(DRIVER))
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "the-driver",
        "uid": driver["metadata"]["uid"],
        "controller": True,
    }
    ledger_over(sim, owner=owner).reserve_through(3)
    assert config_map(sim)["metadata"]["ownerReferences"] == [owner]
    sim.delete_pod("the-driver", grace_period=0)
    sim.run_until_idle()
    assert sim.objects("configmaps") == []  # garbage-collected with its application


def test_a_refused_write_raises_and_keeps_the_mark(sim: KubeSim, tmp_path: Path) -> None:
    ledger = ledger_over(sim)
    ledger.reserve_through(7)
    rbac: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "read-only", "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "read-only", "namespace": "default"},
            "roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "read-only"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "reader", "namespace": "default"},
        },
    ]
    sim.enable_rbac(rbac)
    token = sim.token_for("reader", "default")
    client = connect(kubeconfig=sim.write_kubeconfig(tmp_path / "kc", token=token))
    reader = ClusterIdLedger(ApiGateway(client, namespace="default"), app_id=APP)
    assert reader.highest_reserved() == 7
    with pytest.raises(PodForbidden):
        reader.reserve_through(20)
    assert reader.highest_reserved() == 7


@pytest.mark.parametrize("raw", ["12x", "-3", "99999999999999999", "2147483648", " 7"])
def test_a_mark_that_is_no_executor_id_is_refused_naming_it_and_replaced_by_a_write(
    sim: KubeSim, raw: str
) -> None:
    """Issue 32 R2: a value that is no executor id (Spark's are Java ints) is never believed,
    and the next reservation replaces it (a numeric one beyond the limit included: on `128638e`
    such a value up to 19 digits was the mark, and any reservation below it wrote nothing)."""
    driver = copy.deepcopy(DRIVER)
    driver["metadata"]["annotations"] = {ANNOTATION: raw}
    sim.create_pod(driver)
    ledger = ledger_over(sim, driver_pod_name="the-driver")
    with pytest.raises(LedgerMarkInvalid, match="no executor id") as caught:
        ledger.highest_reserved()
    assert ANNOTATION in str(caught.value)
    assert "the-driver" in str(caught.value)
    ledger.reserve_through(5)
    assert sim_annotations(sim)[ANNOTATION] == "5"
    assert ledger.highest_reserved() == 5


@pytest.mark.parametrize("how", ["deleted", "lowered"])
def test_a_mark_a_read_finds_gone_or_lower_is_written_again_by_the_next_reservation(
    sim: KubeSim, how: str
) -> None:
    """Issue 32 R3: on `128638e` the ledger remembered the highest mark it ever wrote and
    skipped every reservation below it, so a ConfigMap deleted or restored from an old backup
    stayed so until the next block; now a read tells it what is stored."""
    ledger = ledger_over(sim)
    ledger.reserve_through(10)
    core = client.CoreV1Api(connect(api_url=sim.url))
    name = ledger_config_map_name(APP)
    if how == "deleted":
        core.delete_namespaced_config_map(name, "default")
    else:
        core.patch_namespaced_config_map(name, "default", {"data": {DATA_KEY: "3"}})
    assert ledger.highest_reserved() == (0 if how == "deleted" else 3)
    ledger.reserve_through(10)
    assert config_map(sim)["data"] == {DATA_KEY: "10"}


def test_config_map_names_are_valid_and_distinct() -> None:
    assert ledger_config_map_name("spark-app-1") == "spark-app-1-execpods-ids"
    odd = ledger_config_map_name("Spark_App")
    assert odd.endswith("-execpods-ids")
    assert odd == odd.lower()
    assert "_" not in odd
    assert ledger_config_map_name("Spark_App") != ledger_config_map_name("spark-app")
    assert len(ledger_config_map_name("a" * 400)) <= 253


def test_a_config_map_deleted_by_hand_is_written_again(sim: KubeSim) -> None:
    ledger = ledger_over(sim)
    ledger.reserve_through(10)
    core = client.CoreV1Api(connect(api_url=sim.url))
    core.delete_namespaced_config_map(ledger_config_map_name(APP), "default")  # by hand
    ledger.reserve_through(20)  # its version is gone: 404, then a create from its own mark
    assert config_map(sim)["data"] == {DATA_KEY: "20"}


@pytest.mark.parametrize("driver", [None, "the-driver"])
def test_racing_writers_end_at_the_highest_and_the_mark_never_goes_down(
    sim: KubeSim, driver: str | None
) -> None:
    sim.create_pod(copy.deepcopy(DRIVER))
    core = client.CoreV1Api(connect(api_url=sim.url))
    watch: Any = (
        core.list_namespaced_pod(
            "default",
            watch=True,
            resource_version=sim.resource_version,
            timeout_seconds=5,
            _preload_content=False,
        )
        if driver
        else core.list_namespaced_config_map(
            "default",
            watch=True,
            resource_version=sim.resource_version,
            timeout_seconds=5,
            _preload_content=False,
        )
    )
    rng = random.Random(20)
    wanted = [[rng.randrange(1, 500) for _ in range(40)] for _ in range(3)]
    writers = [ledger_over(sim, driver_pod_name=driver) for _ in wanted]
    threads = [
        threading.Thread(target=lambda w=w, ids=ids: [w.reserve_through(i) for i in ids])
        for w, ids in zip(writers, wanted, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    highest = max(max(ids) for ids in wanted)
    assert ledger_over(sim, driver_pod_name=driver).highest_reserved() == highest
    sim.drop_watches(abrupt=False)
    marks = []
    for line in watch.read().splitlines():
        obj = orjson.loads(line)["object"]
        stored = obj["metadata"].get("annotations", {}) if driver else obj.get("data", {})
        key = ANNOTATION if driver else DATA_KEY
        if key in (stored or {}):
            marks.append(int(stored[key]))
    assert marks == sorted(marks)  # every stored value rose; none was ever lowered
    assert marks[-1] == highest
