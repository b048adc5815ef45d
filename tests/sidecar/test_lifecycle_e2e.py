"""The lifecycle's newest-Spark behaviour end to end: real gRPC to a sidecar, kubesim over HTTP.

Terminating executors and graceful kills (SPARK-31125, deleteGracePeriod), kept pods labelled
inactive and reported once (deleteOnTermination=false), the failure limit on the stream
(spark.executor.maxNumFailures), and the driver's registration times crossing the wire
(SPARK-33711).
"""

from __future__ import annotations

import time

from execpods.client import AllocatorClient, ExecutorState, StreamUpdate
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import (
    SidecarFactory,
    SidecarOnFactory,
    app_pods,
    collect_updates,
    creates,
    removals,
    reserve_ids,
    running_ids,
    wait_for,
)


def test_spark_31125_a_killed_executor_is_terminating_then_gone_and_reported_once(
    slow_stop_sim: KubeSim, make_sidecar_on: SidecarOnFactory
) -> None:
    sim = slow_stop_sim
    sidecar = make_sidecar_on(
        sim,
        "kill",
        conf={
            "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "600ms",
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
            # The executors take 30 s to stop: their 2 s grace ends first (the kubelet kills).
            "spark.kubernetes.executor.terminationGracePeriodSeconds": "2",
        },
    )
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(2)
        wait_for(lambda: len(running_ids(sim, "kill")) == 2, what="two running")
        killed_at = time.monotonic()
        assert client.kill_executors([1]) == 1

        def reported() -> bool:
            return any(r.executor_id == 1 for r in removals(updates))

        collect_updates(iter(stream), updates, reported)
        reported_after = time.monotonic() - killed_at
        # A few more rounds must not report it again.
        client.request_total(1)
        deadline = time.monotonic() + 1.0
        collect_updates(iter(stream), updates, lambda: time.monotonic() > deadline)
    states = [s.executors[1].state for u in updates for s in u.snapshots if 1 in s.executors]
    assert ExecutorState.TERMINATING in states, "shown as shutting down, not gone"
    first_terminating = states.index(ExecutorState.TERMINATING)
    assert ExecutorState.DELETED not in states[:first_terminating]
    (removal,) = [r for r in removals(updates) if r.executor_id == 1]
    assert removal.killed_by_driver
    assert not removal.exit_caused_by_app
    assert "killed by the driver" in removal.message
    # It went at the end of its own 2 s grace; nothing cut that short (issue 33 M2), though the
    # deleteGracePeriod (0.6 s) passed long before.
    assert 1.9 <= reported_after < 10
    assert removal.exit_code == 137
    assert sim.pod("kill-exec-1") is None
    deletes = [r for r in sim.requests() if r.verb in ("delete", "deletecollection")]
    assert not [r for r in deletes if r.query.get("gracePeriodSeconds") == "0"]


def test_kept_pods_are_labelled_inactive_and_the_driver_hears_once(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    # The landed code told the driver again every deletedExecutorsCacheTimeout.
    sidecar = make_sidecar(
        "keep",
        conf={
            "spark.kubernetes.executor.deleteOnTermination": "false",
            "spark.kubernetes.executor.deletedExecutorsCacheTimeout": "200ms",
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
        },
    )
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(2)
        wait_for(lambda: len(running_ids(sim, "keep")) == 2, what="two running")
        sim.fail_pod("keep-exec-2", exit_code=3, message="boom")
        deadline = time.monotonic() + 1.5  # seven cache windows, fifteen polls
        collect_updates(iter(stream), updates, lambda: time.monotonic() > deadline)
    assert [r.executor_id for r in removals(updates)] == [2]
    kept = sim.pod("keep-exec-2")
    assert kept is not None, "the pod is kept for inspection"
    assert kept["metadata"]["labels"]["spark-exec-inactive"] == "true"
    patches = [r for r in sim.requests() if r.verb == "patch"]
    assert len(patches) == 1
    requests = sim.requests()
    # (the poll's list of FailedMount events is no read of pods)
    reads = [r for r in requests if r.verb in ("list", "watch") and r.path.endswith("/pods")]
    unfiltered = [r for r in reads if "spark-exec-inactive!=true" not in r.query["labelSelector"]]
    # Only the start-up list that continues the id counter sees inactive pods (their ids are
    # taken); every list and watch that feeds the snapshots excludes them. It comes before the
    # first create (the watch's and the poll's first lists may run before or after it).
    assert [r.verb for r in unfiltered] == ["list"]
    first_create = next(
        i for i, r in enumerate(requests) if r.verb == "create" and r.path.endswith("/pods")
    )
    assert requests.index(unfiltered[0]) < first_create


def test_too_many_failures_stop_allocation_and_fail_the_application_on_the_stream(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar(
        "doomed",
        conf={
            "spark.executor.maxNumFailures": "1",
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
        },
    )
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        client.request_total(2)
        wait_for(lambda: len(running_ids(sim, "doomed")) == 2, what="two running")
        sim.fail_pod("doomed-exec-1", exit_code=1)
        sim.fail_pod("doomed-exec-2", exit_code=1)
        collect_updates(iter(stream), updates, lambda: bool(updates[-1].application_failure))
        made = creates(sim)
        deadline = time.monotonic() + 0.8  # eight allocation rounds
        collect_updates(iter(stream), updates, lambda: time.monotonic() > deadline)
        with AllocatorClient(sidecar.address) as late, late.stream_snapshots() as late_stream:
            first = [next(iter(late_stream)), next(iter(late_stream))]
    failures = [u.application_failure for u in updates if u.application_failure]
    assert len(failures) == 1, "told once"
    assert "Max number of executor failures (1)" in failures[0]
    # A replacement may have been asked for before the lifecycle round counted the failures (as
    # in Spark, the limit is checked there); after the notice, nothing more is created.
    assert creates(sim) == made, "allocation stopped"
    assert made <= 4
    assert any(u.application_failure for u in first), "a stream opened later hears it too"
    names = {pod["metadata"]["name"] for pod in app_pods(sim, "doomed")}
    assert not names & {"doomed-exec-1", "doomed-exec-2"}, "the failed pods are still cleaned up"


def test_registration_times_cross_the_wire(sim: KubeSim, make_sidecar: SidecarFactory) -> None:
    reserve_ids(sim, "registered", 8)
    sidecar = make_sidecar(
        "registered",
        conf={
            "spark.kubernetes.executor.apiPollingInterval": "100ms",
            "spark.kubernetes.executor.missingPodDetectDelta": "30s",
        },
    )
    # Executors 7 and 8 ran in an earlier life (the ledger says so): their pods are gone.
    wait_for(lambda: sidecar.runtime.backend.highest_executor_id() == 8, what="the ledger read")
    now_ms = int(time.time() * 1000)
    updates: list[StreamUpdate] = []
    with AllocatorClient(sidecar.address) as client, client.stream_snapshots() as stream:
        known = client.update_driver_executors(
            registered=[7, 8], registered_at_ms={7: 7, 8: now_ms}, explicit=True
        )
        assert known == {7, 8}
        collect_updates(iter(stream), updates, lambda: bool(removals(updates)))
        deadline = time.monotonic() + 0.5  # five more full lists
        collect_updates(iter(stream), updates, lambda: time.monotonic() > deadline)
    (removal,) = removals(updates)
    assert removal.executor_id == 7, "8 registered just now: within the delta"
    assert "(7 ms)" in removal.message
    assert "missingPodDetectDelta (30s)" in removal.message
    assert (removal.exit_code, removal.exit_caused_by_app) == (-1, False)
