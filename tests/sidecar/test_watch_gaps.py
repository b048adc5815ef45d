"""Issue 32 item 4 (R9): the view follows the cluster through watch gaps and a server that went
back in time.

On `128638e`:
- an executor the driver killed, whose deletion the watch missed, reached the driver only after
  `missingPodDetectDelta` (30 s) though the very next full list showed it gone;
- after the API server's state was restored from an older backup, every full list was ignored as
  "older than the last one applied" and the watch waited, silent, for the restored server's
  resourceVersions to pass the old ones: the sidecar's view kept pods that no longer existed.
"""

from __future__ import annotations

import time

import pytest
from execpods.client import AllocatorClient, StreamUpdate
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, collect_updates, removals, running_ids, wait_for

WITHOUT_WATCH = {
    # The watch off: every deletion is missed, and only full lists tell (as in a long gap).
    "spark.kubernetes.executor.enableApiWatcher": "false",
    "spark.kubernetes.executor.apiPollingInterval": "200ms",
    "spark.kubernetes.executor.missingPodDetectDelta": "30s",
}


def test_an_executor_killed_in_a_watch_gap_is_reported_with_the_next_full_list(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("gap", conf=WITHOUT_WATCH)
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(2)
        wait_for(lambda: running_ids(sim, "gap") == {1, 2}, what="two running")
        view = sidecar.runtime.driver_view
        wait_for(lambda: set(view.executor_ids()) == {1, 2}, what="both known to the driver")
        client.request_total(1)
        killed_at = time.monotonic()
        assert client.kill_executors([2]) == 1
        deadline = killed_at + 10.0  # the delta is 30 s: 10 s tells them apart
        collect_updates(
            iter(stream),
            updates,
            lambda: bool(removals(updates)) or time.monotonic() > deadline,
        )
    (removal,) = removals(updates)
    assert removal.executor_id == 2
    assert removal.killed_by_driver
    assert not removal.exit_caused_by_app
    assert time.monotonic() - killed_at < 10.0


@pytest.mark.parametrize("watch", ["true", "false"], ids=["watch", "lists-only"])
def test_a_server_restored_from_a_backup_is_followed_at_once(
    sim: KubeSim, make_sidecar: SidecarFactory, watch: str
) -> None:
    """With the watch on, its resumption from a version the restored server has not reached is
    answered 504 Too large and it re-lists (as before); with lists only (the watch off, or
    silent), every list was ignored on `128638e` until the new versions passed the old."""
    sidecar = make_sidecar(
        "restored",
        conf={
            "spark.kubernetes.executor.apiPollingInterval": "300ms",
            "spark.kubernetes.executor.enableApiWatcher": watch,
        },
    )
    backend = sidecar.runtime.backend
    with AllocatorClient(sidecar.address) as client:
        client.request_total(2)
        wait_for(lambda: running_ids(sim, "restored") == {1, 2}, what="two running")
        backup = sim.backup()
        client.request_total(4)
        wait_for(lambda: len(running_ids(sim, "restored")) == 4, what="four running")
        wait_for(lambda: len(backend.current_snapshot.executor_pods) == 4, what="four seen")
        restored_at = time.monotonic()
        sim.restore(backup)  # executors 3 and 4 never happened, as far as the API says
        wait_for(
            lambda: not {3, 4} & set(backend.current_snapshot.executor_pods),
            timeout=10.0,
            what="the view without 3 and 4",
        )
        assert time.monotonic() - restored_at < 10.0
        if watch == "false":
            assert sidecar.runtime.backend.current_snapshot.parent_serial is None
        # The target holds again with fresh ids: none of the lost pods' ids is issued again.
        wait_for(lambda: len(running_ids(sim, "restored")) == 4, what="four running again")
        assert not {3, 4} & running_ids(sim, "restored")
