"""The pod classifier's settings take effect in the sidecar as `serve` assembles it.

`execpods-sidecar serve` builds its runtime with `wiring.connect`, which `EmbeddedSidecar` runs
too; the store it makes is made by core's composition root from the settings. Once, the sidecar
built its store beside that root, without the classifier, so
`spark.kubernetes.executor.checkAllContainers` and
`spark.kubernetes.executor.podTemplateContainerName` worked in core tests and not in the sidecar.
These tests go through the real gRPC contract, over a real kubesim.
"""

from __future__ import annotations

import time

from execpods.client import AllocatorClient, ExecutorRemoval, ExecutorState, StreamUpdate
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for

CHECK_ALL = "spark.kubernetes.executor.checkAllContainers"
CONTAINER_NAME = "spark.kubernetes.executor.podTemplateContainerName"


def _set_statuses(sim: KubeSim, name: str, phase: str, statuses: list[dict[str, object]]) -> None:
    """The kubelet's report: the pod's phase and its containers' states (the status subresource)."""
    body: dict[str, object] = {"status": {"phase": phase, "containerStatuses": statuses}}
    sim.api.patch("default", name, "application/merge-patch+json", body, status=True)  # type: ignore[arg-type]


def _running(name: str) -> dict[str, object]:
    return {
        "name": name,
        "ready": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }


def _exited(name: str, code: int) -> dict[str, object]:
    return {
        "name": name,
        "ready": False,
        "state": {"terminated": {"exitCode": code, "reason": "Error", "message": f"exit {code}"}},
    }


def _side_container_fails(
    sim: KubeSim, make_sidecar: SidecarFactory, check_all: str
) -> tuple[list[StreamUpdate], str]:
    app = f"check-{check_all}"
    # Polled every 100 ms, so the stream keeps sending and the loop below sees its deadline
    # (at the default 30 s, nothing more would come once the executor had settled).
    polled = {"spark.kubernetes.executor.apiPollingInterval": "100ms"}
    sidecar = make_sidecar(app, conf={CHECK_ALL: check_all, **polled})
    name = f"{app}-exec-1"
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(1)
        wait_for(lambda: running_ids(sim, app) == {1}, what="executor 1 running")
        # A side container exits 2 while the executor's container still runs.
        _set_statuses(
            sim, name, "Running", [_exited("log-shipper", 2), _running("spark-kubernetes-executor")]
        )
        deadline = time.monotonic() + 1.0  # ten lifecycle rounds
        for update in stream:
            updates.append(update)
            if any(r.executor_id == 1 for u in updates for r in u.removed):
                break
            if time.monotonic() > deadline:
                break
    return updates, name


def _removals(updates: list[StreamUpdate]) -> list[ExecutorRemoval]:
    return [r for u in updates for r in u.removed]


def test_with_check_all_containers_false_a_failed_side_container_leaves_the_executor_running(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    updates, name = _side_container_fails(sim, make_sidecar, "false")
    assert _removals(updates) == []
    assert sim.pod(name) is not None, "not deleted"
    states = [s.executors[1].state for u in updates for s in u.snapshots if 1 in s.executors]
    assert states[-1] is ExecutorState.RUNNING


def test_with_check_all_containers_true_a_failed_side_container_fails_the_executor(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    updates, name = _side_container_fails(sim, make_sidecar, "true")
    (removal,) = _removals(updates)
    assert removal.executor_id == 1
    assert removal.exit_caused_by_app
    wait_for(lambda: sim.pod(name) is None, what="the failed executor's pod deleted")


def test_a_custom_template_container_name_gives_the_exit_code(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("named", conf={CONTAINER_NAME: "main"})
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(1)
        wait_for(lambda: running_ids(sim, "named") == {1}, what="executor 1 running")
        # The side container is listed first and exited 2; the executor's ("main") exited 42.
        _set_statuses(
            sim, "named-exec-1", "Failed", [_exited("log-shipper", 2), _exited("main", 42)]
        )
        for update in stream:
            updates.append(update)
            if _removals(updates):
                break
    (removal,) = _removals(updates)
    assert removal.exit_code == 42
    assert "exit code 42" in removal.message
    failed = [s.executors[1] for u in updates for s in u.snapshots if 1 in s.executors]
    assert failed[-1].exit_code == 42
