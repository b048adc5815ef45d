"""Graceful kills (Spark's `doKillExecutors` with `deleteGracePeriod`) and the failure tracker
(Spark's `ExecutorFailureTracker`, SPARK-41210) in the allocator and the backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from execpods.core import (
    ApiThrottled,
    CoreSettings,
    DeterministicScheduler,
    ManualClock,
    NoticeKind,
    PodAdmissionRejected,
    PodSelector,
)
from execpods.core.kills import GracefulKiller
from execpods.core.testing import (
    TEST_APP_ID,
    DeleteCall,
    InMemoryPodOperations,
    compose_deterministic,
    failed_executor,
    running_executor,
)

from .conftest import make_allocator_rig

GRACE = CoreSettings().delete_grace_period


class GracefulPods(InMemoryPodOperations):
    """Deletes as the API does: with a grace period a running pod stays (marked, still Running)
    until it stops; with grace 0 it is gone at once."""

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        if grace_period_seconds == 0:
            return super().delete_by_selector(selector, grace_period_seconds=0)
        self.deletes.append(DeleteCall(selector=selector))
        marked = datetime(2026, 1, 1, tzinfo=UTC)
        doomed = [name for name, pod in self.pods.items() if selector.matches(pod)]
        for name in doomed:
            self.pods[name] = replace(self.pods[name], deletion_timestamp=marked)
        return len(doomed)

    def stop(self, name: str) -> None:
        """The executor exited on SIGTERM: its pod goes."""
        self.pods.pop(name)


def _killer(pods: InMemoryPodOperations, killed: list[list[int]]) -> DeterministicScheduler:
    scheduler = DeterministicScheduler(ManualClock())
    killer = GracefulKiller(
        settings=CoreSettings(),
        pod_operations=pods,
        scheduler=scheduler,
        on_killed=lambda ids: killed.append(sorted(ids)),
    )
    assert killer.kill(TEST_APP_ID, [2, 1, 3]) == 3
    return scheduler


def _with_running(pods: InMemoryPodOperations, *ids: int) -> None:
    for executor_id in ids:
        pod = replace(running_executor(executor_id), phase="Running")
        pods.pods[pod.name] = pod


def test_kill_deletes_with_the_pods_grace_and_never_cuts_it_short() -> None:
    """Issue 33 M2: `KubernetesClusterSchedulerBackend.doKillExecutors` deletes the killed
    executors still Running after deleteGracePeriod with a plain delete: each pod's own
    terminationGracePeriodSeconds applies. 128638e force-deleted them (grace 0) at 5 s, cutting
    decommission, block migration and the preStop hook short."""
    pods = GracefulPods()
    _with_running(pods, 1, 2, 3, 4)
    killed: list[list[int]] = []
    scheduler = _killer(pods, killed)
    assert killed == [[1, 2, 3]], "the lifecycle manager hears first"
    (graceful,) = pods.deletes
    assert graceful.grace_period_seconds is None
    pods.stop("spark-executor-1")  # exited on SIGTERM in time
    scheduler.tick(GRACE)
    scheduler.tick(60.0)
    assert [d.grace_period_seconds for d in pods.deletes] == [None], "nothing forced, ever"
    assert set(pods.pods) == {"spark-executor-2", "spark-executor-3", "spark-executor-4"}
    assert all(pods.pods[f"spark-executor-{i}"].deletion_timestamp for i in (2, 3))


def test_a_killed_pod_still_running_undeleted_after_the_period_is_deleted_plainly() -> None:
    """The same follow-up finds a pod whose delete was lost (Running, no deletion timestamp):
    one more delete, without a grace period of its own (the pod's applies)."""
    pods = GracefulPods()
    _with_running(pods, 1, 2, 3)
    scheduler = _killer(pods, [])
    lost = replace(pods.pods["spark-executor-2"], deletion_timestamp=None)
    pods.pods["spark-executor-2"] = lost
    scheduler.tick(GRACE)
    again = pods.deletes[-1]
    assert len(pods.deletes) == 2
    assert again.grace_period_seconds is None
    assert again.selector is not None
    assert again.selector.phase == "Running"


def test_kill_forces_nothing_when_every_killed_executor_stopped_in_time() -> None:
    pods = GracefulPods()
    _with_running(pods, 1, 2, 3)
    scheduler = _killer(pods, [])
    for executor_id in (1, 2, 3):
        pods.stop(f"spark-executor-{executor_id}")
    scheduler.tick(GRACE)
    assert len(pods.deletes) == 1, "no second delete for pods already gone"


def test_the_grace_period_is_spark_s_property() -> None:
    settings = CoreSettings.from_properties(
        {"spark.kubernetes.dynamicAllocation.deleteGracePeriod": "2s"}
    )
    assert settings.delete_grace_period == 2.0
    assert CoreSettings().delete_grace_period == 5.0


@pytest.mark.parametrize(("limit", "stopped"), [(1, True), (10, False)])
def test_refused_creations_count_as_failures_and_a_tripped_tracker_stops_allocation(
    limit: int, stopped: bool
) -> None:
    rig = make_allocator_rig(
        CoreSettings.from_properties({"spark.executor.maxNumFailures": str(limit)})
    )
    tracker = rig.allocator._scale_up._failures  # the lifecycle manager's (compose_backend)
    assert tracker is not None
    rig.store.replace_snapshot([])
    rig.pods.fail_next_create(PodAdmissionRejected("quota exceeded"))
    rig.allocator.set_total_expected_executors(3)
    assert tracker.failed_executors == 1
    rig.clock.advance(600)  # past the refusal's back-off
    rig.pods.fail_next_create(ApiThrottled("slow down"))
    rig.store.notify_subscribers()
    rig.clock.advance(600)  # the unseen requests expire: the next round creates again
    rig.store.notify_subscribers()
    assert rig.told(NoticeKind.CREATE_THROTTLED) == 1
    assert tracker.failed_executors == 1, "throttling only paces creates: not a failure"
    rig.clock.advance(600)
    rig.pods.fail_next_create(PodAdmissionRejected("quota exceeded"))
    rig.store.notify_subscribers()
    assert tracker.failed_executors == 2
    assert (tracker.application_failure is not None) is stopped
    # Everything created so far runs; the driver asks for more.
    rig.store.replace_snapshot([running_executor(i) for i in rig.pods.created_executor_ids()])
    made = len(rig.pods.created)
    rig.clock.advance(600)
    rig.allocator.set_total_expected_executors(6)
    rig.store.notify_subscribers()
    assert (len(rig.pods.created) == made) is stopped


def test_the_application_failure_reaches_every_subscriber_once_late_ones_included() -> None:
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "1"})
    )
    store, backend = composed.store, composed.backend
    backend.start(initial_executors=0)
    early: list[str] = []
    backend.open_stream(
        1.0,
        on_snapshots=lambda _: None,
        on_removal=lambda _: None,
        on_application_failure=early.append,
    )
    store.update_pod(failed_executor(1))
    store.update_pod(failed_executor(2))
    store.notify_subscribers()
    store.update_pod(failed_executor(3))
    store.notify_subscribers()
    late: list[str] = []
    backend.open_stream(
        1.0,
        on_snapshots=lambda _: None,
        on_removal=lambda _: None,
        on_application_failure=late.append,
    )
    assert len(early) == 1
    assert early == late
    assert "Max number of executor failures (1) reached: 2 executors failed" in early[0]
