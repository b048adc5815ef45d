"""Spark's ExecutorPodsLifecycleManagerSuite (SPARK-24248) as behaviour tests, with SPARK-54198."""

from __future__ import annotations

import logging

import pytest
from execpods.core import CoreSettings, ExecutorExited, ExecutorPodsSnapshot
from execpods.core.lifecycle import exit_reason
from execpods.core.testing import (
    deleted_executor,
    failed_executor,
    running_executor,
    succeeded_executor,
)

from .conftest import LifecycleRig, make_lifecycle_rig


def spark_exit_message(executor_id: int) -> str:
    pod = failed_executor(executor_id)
    statuses = "\n===\n".join(s.describe() for s in pod.container_statuses)
    return (
        f"The executor with id {executor_id} exited with exit code 1"
        " (a generic error, usually a failure in the application).\n"
        "The API gave the following brief reason: Executor failed because of a thrown error.\n"
        "The API gave the following message: Executor failed.\n"
        f"The API gave the following container statuses:\n\n{statuses}\n"
    )


def test_an_executor_in_an_error_state_is_removed_from_the_driver_and_deleted(
    life: LifecycleRig,
) -> None:
    failed = failed_executor(1)
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    expected = ExecutorExited(exit_code=1, exit_caused_by_app=True, message=spark_exit_message(1))
    assert life.driver.removed == [(1, expected)]
    assert life.pods.deletes_of(failed.name) == 1
    assert "name=spark-executor, image=k8s-spark, state=terminated(exitCode=1" in expected.message


def test_the_driver_hears_once_and_the_pod_is_deleted_once_per_round(life: LifecycleRig) -> None:
    failed = failed_executor(1)
    life.store.update_pod(failed)
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    assert len(life.driver.removals_of(1)) == 1
    assert life.pods.deletes_of(failed.name) == 1, "at most once per round (SPARK-54198)"

    # The deletion did not take (the pod is still reported): the next round deletes again,
    # but the driver is not told twice.
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed.name) == 2
    assert len(life.driver.removals_of(1)) == 1


def test_a_pod_still_in_the_snapshot_is_deleted_again_in_later_rounds_without_new_events(
    life: LifecycleRig,
) -> None:
    life.store.update_pod(failed_executor(1))
    life.store.notify_subscribers()
    life.store.notify_subscribers()  # an empty batch: nothing new arrived
    life.store.replace_snapshot([failed_executor(1)])  # a poll: the pod is still there
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed_executor(1).name) == 2
    assert len(life.driver.removals_of(1)) == 1


def test_executors_the_driver_knows_but_the_cluster_lacks_are_removed(life: LifecycleRig) -> None:
    life.driver.known = {1}
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    message = (
        "The executor with ID 1 was not found in the cluster but we didn't get a reason why. "
        "Marking the executor as failed. The executor may have been deleted but the driver "
        "missed the deletion event."
    )
    assert life.driver.removed == [
        (1, ExecutorExited(exit_code=-1, exit_caused_by_app=False, message=message))
    ]


def test_missing_executors_are_reported_once_within_the_cache_window(life: LifecycleRig) -> None:
    life.driver.known = {1}
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    life.driver.known = {1}  # a driver that did not forget it
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    assert len(life.driver.removals_of(1)) == 1


def test_deleted_pods_are_reported_as_not_caused_by_the_app_and_not_deleted_again(
    life: LifecycleRig,
) -> None:
    life.store.update_pod(deleted_executor(3))
    life.store.notify_subscribers()
    assert life.driver.removed == [
        (
            3,
            ExecutorExited(
                exit_code=-1,
                exit_caused_by_app=False,
                message="The executor with id 3 was deleted by a user or the framework.",
            ),
        )
    ]
    assert life.pods.deletes == []


def test_running_executors_in_the_snapshot_are_left_alone(life: LifecycleRig) -> None:
    life.driver.known = {1, 2}
    life.store.replace_snapshot([running_executor(1), running_executor(2)])
    life.store.notify_subscribers()
    assert life.driver.removed == []
    assert life.pods.deletes == []


def test_with_delete_on_termination_off_pods_are_kept_for_debugging() -> None:
    rig = make_lifecycle_rig(
        CoreSettings.from_properties({"spark.kubernetes.executor.deleteOnTermination": "false"})
    )
    rig.store.update_pod(failed_executor(1))
    rig.store.notify_subscribers()
    assert rig.pods.deletes == []
    assert [i for i, _ in rig.driver.removed] == [1]


def test_a_succeeded_executor_the_driver_still_counts_on_is_logged_at_info(
    life: LifecycleRig, caplog: pytest.LogCaptureFixture
) -> None:
    life.driver.active = {2}
    caplog.set_level(logging.INFO)
    life.store.update_pod(succeeded_executor(2))
    life.store.notify_subscribers()
    assert "even though the application has not requested for it to be removed" in caplog.text
    assert [i for i, _ in life.driver.removed] == [2]


def test_the_cache_window_bounds_memory_not_correctness(life: LifecycleRig) -> None:
    # As in Spark (SPARK-24248), the cache forgets after its window; a pod that is somehow still
    # listed then is reported again (a driver ignores removals of executors it no longer has).
    life.store.update_pod(failed_executor(1))
    life.store.notify_subscribers()
    life.clock.advance(CoreSettings().removed_executors_cache_ttl - 1)
    life.store.replace_snapshot([failed_executor(1)])
    life.store.notify_subscribers()
    assert len(life.driver.removals_of(1)) == 1
    life.clock.advance(2)
    life.store.replace_snapshot([failed_executor(1)])
    life.store.notify_subscribers()
    assert len(life.driver.removals_of(1)) == 2


def test_a_driver_that_raises_does_not_stop_the_round(life: LifecycleRig) -> None:
    told: list[int] = []

    def flaky_remove(executor_id: int, reason: ExecutorExited) -> None:
        told.append(executor_id)
        if executor_id == 1:
            raise RuntimeError("driver hiccup")

    life.driver.remove_executor = flaky_remove  # type: ignore[method-assign]
    life.store.update_pod(failed_executor(1))
    life.store.update_pod(failed_executor(2))
    life.store.notify_subscribers()
    assert told == [1, 2]
    assert life.pods.deletes_of(failed_executor(2).name) == 1


def test_exit_code_prefers_the_executor_container() -> None:
    snapshot = ExecutorPodsSnapshot.from_pods([failed_executor(4, exit_code=137)])
    state = snapshot.executor_pods[4]
    reason = exit_reason(state, 4)
    assert reason.exit_code == 137
    assert "OOMKilled" in reason.message
