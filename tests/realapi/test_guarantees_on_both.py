"""Issue 32's fault scenarios on kubesim and on a real kube-apiserver (``[real]``).

The faults of `execpods.devtools.fault_scenarios` that a real server can play (kubesim's fault
injection has no counterpart there, docs/kubesim.md): the id ledger's ConfigMap deleted, lowered
or set to a value that is no executor id, each followed by kills and a restart of the sidecar;
the ledger made unreadable by the real RBAC authorizer (the Role loses configmaps); and a driver
sending garbage, including a template the real API server would refuse (a privileged container
with the sidecar's no-escalation). The sidecar runs as the project's Role on the real server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import grpc
import pytest
from execpods.client import AllocatorClient, ExecutorProfile
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
from execpods.v1 import allocator_pb2 as pb

from tests.realapi.conftest import SidecarFactory, Target
from tests.realapi.test_sidecar_on_both import _notices, wait_for

NOTICED_S = 1.5
"""A few allocation rounds (150 ms here) for the sidecar to see what was done to its ledger."""


def mark(target: Target, app_id: str) -> str | None:
    try:
        found = target.core.read_namespaced_config_map(
            ledger_config_map_name(app_id), target.namespace
        )
    except Exception:  # deleted
        return None
    return str((found.data or {}).get(DATA_KEY))


def restart_after(
    target: Target, make_sidecar: SidecarFactory, app_id: str, fault: Callable[[], None]
) -> set[int]:
    """Six running; `fault` on the ledger; the executors 4-6 killed (the driver's target down to
    3: no create follows); a moment; the sidecar stopped (its pods deleted: only the ledger
    remembers the ids); a new one asked for six. Returns the new one's ids."""
    first = make_sidecar(app_id)
    with AllocatorClient(first.address) as driver:
        driver.request_total(6)
        wait_for(lambda: target.running_ids(app_id) == set(range(1, 7)), what="six running")
        fault()
        driver.request_total(3)
        assert driver.kill_executors([4, 5, 6]) == 3
        wait_for(lambda: target.pod_ids(app_id) <= {1, 2, 3}, what="4-6 gone")
        time.sleep(NOTICED_S)
    first.stop()
    wait_for(lambda: not target.app_pods(app_id), what="every executor pod gone")
    second = make_sidecar(app_id)
    with AllocatorClient(second.address) as driver:
        driver.request_total(6)
        wait_for(lambda: len(target.running_ids(app_id)) == 6, what="six running again")
    return target.running_ids(app_id)


def test_a_ledger_deleted_while_running_reuses_no_id(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    def delete() -> None:
        target.core.delete_namespaced_config_map(ledger_config_map_name("lost"), target.namespace)

    ids = restart_after(target, make_sidecar, "lost", delete)
    assert min(ids) > 6, f"ids issued twice: {sorted(ids)}"


def test_a_ledger_lowered_while_running_reuses_no_id(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    def lower() -> None:
        target.core.patch_namespaced_config_map(
            ledger_config_map_name("low"), target.namespace, {"data": {DATA_KEY: "1"}}
        )

    ids = restart_after(target, make_sidecar, "low", lower)
    assert min(ids) > 6, f"ids issued twice: {sorted(ids)}"


@pytest.mark.parametrize("raw", ["99999999999999999999", "12x"])
def test_a_ledger_that_is_no_executor_id_is_told_and_allocation_goes_on(
    target: Target, make_sidecar: SidecarFactory, raw: str
) -> None:
    def tamper() -> None:
        target.core.patch_namespaced_config_map(
            ledger_config_map_name("odd"), target.namespace, {"data": {DATA_KEY: raw}}
        )

    ids = restart_after(target, make_sidecar, "odd", tamper)
    assert min(ids) > 6, f"ids issued twice: {sorted(ids)}"
    value = mark(target, "odd")
    assert value is not None
    assert value.isdigit()
    assert int(value) < 2**31


def test_a_ledger_the_role_may_not_read_stalls_and_says_so(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    if not target.real:
        pytest.skip("kubesim's RBAC is the sidecar tests' (tests/sidecar/test_progress_health.py)")
    server = target.server
    assert server is not None
    role = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{target.namespace}/roles"
    code, found = server.request("GET", role)
    assert code == 200, found
    (current,) = found["items"]
    current["rules"] = [r for r in current["rules"] if "configmaps" not in r["resources"]]
    code, answer = server.request("PUT", f"{role}/{current['metadata']['name']}", current)
    assert code == 200, answer
    sidecar = make_sidecar("denied", conf={"execpods.sidecar.checkPermissions": "false"})
    notices: list[pb.AllocatorNotice] = []
    cancel = _notices(sidecar.address, notices)
    try:
        with AllocatorClient(sidecar.address) as driver:
            driver.request_total(2)
        wait_for(
            lambda: any(n.kind == pb.AllocatorNotice.KIND_ALLOCATION_STALLED for n in notices),
            what="the stall on the stream",
        )
    finally:
        cancel()
    (stall,) = [n for n in notices if n.kind == pb.AllocatorNotice.KIND_ALLOCATION_STALLED]
    assert stall.reason == "IdLedgerUnreadable"
    assert "forbidden" in stall.message
    assert target.app_pods("denied") == []


PRIVILEGED = {
    "spec": {
        "containers": [
            {"name": "spark-kubernetes-executor", "securityContext": {"privileged": True}}
        ]
    }
}
LIST_AS_STRING = {
    "spec": {
        "containers": [
            {
                "name": "spark-kubernetes-executor",
                "securityContext": {"capabilities": {"add": "NET_BIND_SERVICE"}},
            }
        ]
    }
}


def test_a_driver_sending_garbage_changes_nothing(
    target: Target, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("garbage", conf={"execpods.sidecar.templatePolicy": "none"})
    unknown = range(1_000_000_000, 1_000_050_000)
    with AllocatorClient(sidecar.address) as driver:
        driver.request_total(2)
        wait_for(lambda: target.running_ids("garbage") == {1, 2}, what="two running")
        assert driver.update_driver_executors(registered=unknown) <= {1, 2}
        assert driver.kill_executors(unknown) == 0
        for template in ("[" * 90_000 + "]" * 90_000, json.dumps(PRIVILEGED),
                         json.dumps(LIST_AS_STRING)):  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                driver.request_total(
                    2, profiles=[ExecutorProfile(id=5, pod_template=template)],
                    profile_totals={5: 1},
                )  # fmt: skip
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert target.running_ids("garbage") == {1, 2}
        assert sidecar.runtime.backend.failed_executors == 0
