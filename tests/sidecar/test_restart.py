"""Issue 11, restart safety, with real processes: SIGKILL mid scale-up, then a restart.

`execpods-sidecar serve` runs as a subprocess against the simulator; it is killed with SIGKILL
(nothing runs on the way out) at several moments of a scale-up, a pod fails while no sidecar
runs, and a second sidecar for the same application is started. It must end with exactly the
target running, every executor id used once (no 409, no id created twice), the failed executor
reported to the driver once, no pod without an owner, and, after a SIGTERM, no executor pod of the
app left while a bystander pod is untouched.
"""

from __future__ import annotations

import signal
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from execpods.client import AllocatorClient, ExecutorState
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import app_pods, running_ids, wait_for
from tests.sidecar.serve_process import serve

TARGET = 6


def _ids(sim: KubeSim, app_id: str) -> list[int]:
    return sorted(int(p["metadata"]["labels"]["spark-exec-id"]) for p in app_pods(sim, app_id))


def sidecar(
    sim: KubeSim, app_id: str, properties: Path
) -> AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    return serve(
        sim,
        app_id,
        "--properties-file",
        str(properties),
        env={"EXECPODS_INITIAL_EXECUTORS": str(TARGET), "EXECPODS_IMAGE": "spark:t"},
    )


@pytest.mark.slow
@pytest.mark.parametrize("killed_after", [1, 3, 5])
def test_sigkill_mid_scale_up_then_a_restart_ends_with_the_target_and_every_id_once(
    sim: KubeSim, tmp_path: Path, killed_after: int
) -> None:
    app_id = f"restart-{killed_after}"
    properties = tmp_path / "sidecar.conf"
    properties.write_text(
        "spark.kubernetes.allocation.batch.delay 200ms\n"
        "spark.kubernetes.allocation.batch.size 2\n"
        "execpods.allocation.adaptiveBatches false\n",
        encoding="utf-8",
    )
    bystander = sim.create_pod(
        {
            "metadata": {
                "name": "bystander",
                "labels": {
                    "spark-app-selector": "another-app",
                    "spark-role": "executor",
                    "spark-exec-id": "1",
                },
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    with sidecar(sim, app_id, properties) as (first, first_address):
        # The driver streams from the first sidecar, as Spark does, and resumes from where it
        # stood: a removal decided before its new stream opens (the restarted sidecar's first
        # round can beat the driver's reconnect) is then sent, not lost to that race.
        with AllocatorClient(first_address) as client, client.stream_snapshots() as stream:
            position = next(iter(stream)).position
        assert position is not None
        wait_for(lambda: len(app_pods(sim, app_id)) >= killed_after, what="a scale-up under way")
        first.send_signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL
    left_behind = _ids(sim, app_id)
    assert left_behind, "the killed sidecar left its pods (nothing ran on the way out)"
    # An executor fails while no sidecar runs: the next one must report it, once.
    wait_for(lambda: running_ids(sim, app_id), what="a running executor to fail")
    failed = min(running_ids(sim, app_id))
    sim.fail_pod(f"{app_id}-exec-{failed}", exit_code=137, reason="Error")
    sim.clear_requests()
    with sidecar(sim, app_id, properties) as (second, address):
        removals: list[int] = []
        with (
            AllocatorClient(address) as client,
            client.stream_snapshots(resume_from=position) as stream,
        ):
            for update in stream:
                removals.extend(r.executor_id for r in update.removed)
                latest = update.latest
                if (
                    latest is not None
                    and latest.count(ExecutorState.RUNNING) == TARGET
                    and len(running_ids(sim, app_id)) == TARGET
                    and failed in removals
                ):
                    break
        assert removals.count(failed) == 1, removals
        live = running_ids(sim, app_id)
        assert len(live) == TARGET
        # Every id once: the restart created only ids above the killed sidecar's, never a 409.
        # (The start-up permission check's dry-run create of an invalid pod answers 422: not a pod.)
        creates = [
            r for r in sim.requests() if r.verb == "create" and r.query.get("dryRun") != "All"
        ]
        assert creates
        assert [r.status for r in creates if r.status != 201] == []
        assert min(live - set(left_behind), default=max(left_behind) + 1) > max(left_behind)
        # No pod without an owner: every pod of the app is one of the target's.
        wait_for(lambda: set(_ids(sim, app_id)) == live, what="only the target's pods left")
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0
    wait_for(lambda: not app_pods(sim, app_id), what="every executor pod deleted")
    untouched = sim.pod("bystander")
    assert untouched is not None
    assert untouched["metadata"]["uid"] == bystander["metadata"]["uid"]
    assert untouched["metadata"].get("deletionTimestamp") is None
