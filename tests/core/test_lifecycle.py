"""Spark's ExecutorPodsLifecycleManagerSuite as behaviour tests, at newest Spark's behaviour.

The tests named after a defect of issue 10 fail on the code before it: the driver hearing of a kept
pod again every cache window, a registered executor reported missing before any list could show
it, a sidecar container's exit code reported as the executor's, a terminating pod reported gone.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from execpods.core import CoreSettings, ExecutorExited, ExecutorPodsSnapshot, ExecutorState
from execpods.core.lifecycle import describe_exit_code, exit_reason
from execpods.core.testing import (
    deleted_executor,
    failed_executor,
    running_executor,
    succeeded_executor,
    terminating_executor,
)

from .conftest import LifecycleRig, make_lifecycle_rig

DELTA = CoreSettings().missing_pod_detect_delta


def exit_message(executor_id: int, code: int = 1) -> str:
    pod = failed_executor(executor_id, exit_code=code)
    statuses = "\n===\n".join(s.describe() for s in pod.container_statuses)
    return (
        f"The executor with id {executor_id} exited with exit code {code}"
        f" ({describe_exit_code(code)}).\n"
        "The API gave the following brief reason: Executor failed because of a thrown error.\n"
        "The API gave the following message: Executor failed.\n"
        f"The API gave the following container statuses:\n\n{statuses}\n"
    )


def keep_pods_rig() -> LifecycleRig:
    return make_lifecycle_rig(
        CoreSettings.from_properties({"spark.kubernetes.executor.deleteOnTermination": "false"})
    )


def test_when_an_executor_reaches_error_states_immediately_remove_it(life: LifecycleRig) -> None:
    failed = failed_executor(1)
    life.pods.pods[failed.name] = failed
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    expected = ExecutorExited(exit_code=1, exit_caused_by_app=True, message=exit_message(1))
    assert life.driver.removed == [(1, expected)]
    assert life.pods.deletes_of(failed.name) == 1
    assert "name=spark-kubernetes-executor, image=k8s-spark, state=terminated(exitCode=1" in (
        expected.message
    )
    assert "name=spark-executor-sidecar" in expected.message, "every container's state"


def test_spark_49804_use_the_exit_code_of_the_executor_container_always(
    life: LifecycleRig,
) -> None:
    # Spark's fixture: a sidecar listed first exited 2, the executor container 1. The landed
    # code reported 2.
    life.store.update_pod(failed_executor(1))
    life.store.notify_subscribers()
    ((_, reason),) = life.driver.removed
    assert reason.exit_code == 1
    assert "exit code 1 (a generic error" in reason.message


def test_an_executor_without_its_named_container_exits_with_unknown_code() -> None:
    pod = replace(failed_executor(1), container_statuses=failed_executor(1).container_statuses[:1])
    observed = ExecutorPodsSnapshot.from_pods([pod]).executor_pods[1]
    assert exit_reason(observed, 1).exit_code == -1
    assert "exit code -1 (unexpected)" in exit_reason(observed, 1).message


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (0, "success"),
        (1, "generic"),
        (10, "uncaught exception"),
        (50, "uncaught exception"),
        (42, "douglas adams"),
        (52, "out of memory"),
        (53, "local (DiskStore) directories"),
        (126, "not executable"),
        (137, "SIGKILL"),
        (139, "SIGSEGV"),
        (143, "SIGTERM"),
        (255, "-1"),
        (3, "unexpected"),
    ],
)
def test_every_exit_code_spark_describes_is_described(code: int, words: str) -> None:
    assert words in describe_exit_code(code)


def test_spark_54198_dont_remove_executors_twice_from_spark_but_remove_from_k8s_repeatedly(
    life: LifecycleRig,
) -> None:
    failed = failed_executor(1)
    life.store.update_pod(failed)
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    assert len(life.driver.removals_of(1)) == 1
    assert life.pods.deletes_of(failed.name) == 1, "at most once per round (SPARK-54198)"
    # The deletion did not take (the pod is still reported): the next round deletes again, but
    # the driver is not told twice.
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed.name) == 2
    assert len(life.driver.removals_of(1)) == 1


def test_spark_47797_dont_remove_executors_twice_from_spark_and_k8s(life: LifecycleRig) -> None:
    failed = failed_executor(1)
    life.store.update_pod(failed)
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed.name) == 1
    # The pod is now terminating, then gone: no second delete, no second removal.
    life.store.update_pod(
        replace(failed, deletion_timestamp=deleted_executor(1).deletion_timestamp)
    )
    life.store.notify_subscribers()
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed.name) == 1
    assert len(life.driver.removals_of(1)) == 1


def test_a_pod_that_failed_and_then_went_terminating_in_one_round_is_not_deleted(
    life: LifecycleRig,
) -> None:
    failed = failed_executor(1)
    life.store.update_pod(failed)
    life.store.update_pod(
        replace(failed, deletion_timestamp=deleted_executor(1).deletion_timestamp)
    )
    life.store.notify_subscribers()
    assert life.pods.deletes == []
    assert [i for i, _ in life.driver.removed] == [1]


def test_a_pod_still_listed_is_deleted_again_in_later_rounds_without_new_events(
    life: LifecycleRig,
) -> None:
    life.store.update_pod(failed_executor(1))
    life.store.notify_subscribers()
    life.store.notify_subscribers()  # an empty batch: nothing new arrived
    life.store.replace_snapshot([failed_executor(1)])  # a poll: the pod is still there
    life.store.notify_subscribers()
    assert life.pods.deletes_of(failed_executor(1).name) == 2
    assert len(life.driver.removals_of(1)) == 1


def test_spark_33711_when_the_driver_lists_executors_missing_from_the_cluster_remove_them(
    life: LifecycleRig,
) -> None:
    life.driver.known = {1}
    life.driver.registered_at = {1: 0.007}
    life.clock.advance(DELTA + 0.007)
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    assert life.driver.removed == [], "exactly the delta after registration: not yet"

    life.clock.advance(0.001)
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    ((executor_id, reason),) = life.driver.removed
    assert executor_id == 1
    assert (reason.exit_code, reason.exit_caused_by_app) == (-1, False)
    for fact in ("id 1", "(7 ms)", "(30008 ms)", "30.001s later", "missingPodDetectDelta (30s)"):
        assert fact in reason.message


def test_a_registered_executor_is_not_missing_before_a_list_could_show_it(
    life: LifecycleRig,
) -> None:
    # The landed code reported it missing at once, from any snapshot.
    life.clock.advance(100.0)
    life.driver.known = {1}
    life.driver.registered_at = {1: 100.0}
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    life.store.update_pod(running_executor(2))  # a watch event: never judged for missing pods
    life.clock.advance(DELTA + 1)
    life.store.notify_subscribers()
    assert life.driver.removed == []
    life.store.replace_snapshot([running_executor(2)])  # a list past the delta
    life.store.notify_subscribers()
    assert [i for i, _ in life.driver.removed] == [1]


def test_missing_executors_are_reported_once_within_the_cache_window(life: LifecycleRig) -> None:
    life.clock.advance(DELTA + 1)
    life.driver.known = {1}
    life.store.replace_snapshot([])
    life.store.notify_subscribers()
    life.driver.known = {1}  # a driver that did not forget it
    life.clock.advance(1)
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
                pod_deleted=True,
            ),
        )
    ]
    assert life.pods.deletes == []


def test_spark_31125_a_terminating_executor_is_not_reported_until_it_stops(
    life: LifecycleRig,
) -> None:
    # The landed code reported it gone while its executor still ran.
    life.store.update_pod(terminating_executor(1))
    life.store.notify_subscribers()
    assert life.driver.removed == []
    assert life.pods.deletes == []
    life.store.update_pod(replace(terminating_executor(1), phase="Failed"))
    life.store.notify_subscribers()
    assert [i for i, _ in life.driver.removed] == [1]


def test_running_executors_in_the_snapshot_are_left_alone(life: LifecycleRig) -> None:
    life.clock.advance(DELTA + 1)
    life.driver.known = {1, 2}
    life.store.replace_snapshot([running_executor(1), running_executor(2)])
    life.store.notify_subscribers()
    assert life.driver.removed == []
    assert life.pods.deletes == []


def test_keep_executor_pods_in_k8s_if_configured() -> None:
    rig = keep_pods_rig()
    failed = failed_executor(1)
    rig.pods.pods[failed.name] = failed
    rig.store.update_pod(failed)
    rig.store.notify_subscribers()
    assert rig.pods.deletes == []
    assert rig.pods.patches == [(failed.name, {"spark-exec-inactive": "true"})]
    assert rig.driver.removed == [
        (1, ExecutorExited(exit_code=1, exit_caused_by_app=True, message=exit_message(1)))
    ]


def test_kept_pods_are_labelled_once_and_the_driver_hears_once_however_long_it_runs() -> None:
    # The landed code told the driver again every 3 minutes while the pod stayed.
    rig = keep_pods_rig()
    failed = failed_executor(1)
    rig.pods.pods[failed.name] = failed
    rig.store.update_pod(failed)
    rig.store.notify_subscribers()
    for _ in range(10):  # 30 minutes: ten cache windows
        rig.clock.advance(CoreSettings().deleted_executors_cache_timeout)
        rig.store.notify_subscribers()
    # The label went on: the watch now reports the pod (it left the selection) with it.
    rig.store.update_pod(rig.pods.pods[failed.name])
    rig.clock.advance(CoreSettings().deleted_executors_cache_timeout)
    rig.store.notify_subscribers()
    assert rig.pods.patches_of(failed.name) == 1
    assert len(rig.driver.removals_of(1)) == 1
    assert rig.pods.deletes == []


def test_a_list_taken_before_the_label_arrived_does_not_label_the_pod_twice() -> None:
    rig = keep_pods_rig()
    failed = failed_executor(1)
    rig.pods.pods[failed.name] = failed
    rig.store.update_pod(failed)
    rig.store.notify_subscribers()
    rig.store.update_pod(rig.pods.pods[failed.name])  # labelled: it left the watch
    rig.store.notify_subscribers()
    rig.store.replace_snapshot([failed])  # a list from before the label, arriving late
    rig.store.notify_subscribers()
    assert rig.pods.patches_of(failed.name) == 1
    assert len(rig.driver.removals_of(1)) == 1


def test_an_inactive_pod_in_a_snapshot_is_left_alone() -> None:
    rig = keep_pods_rig()
    inactive = replace(failed_executor(1), labels={**failed_executor(1).labels})
    inactive = replace(inactive, labels={**inactive.labels, "spark-exec-inactive": "true"})
    rig.store.replace_snapshot([inactive])
    rig.store.notify_subscribers()
    assert rig.driver.removed == []
    assert rig.pods.patches == []


def test_defect_2_and_3_a_lingering_pod_is_reported_and_counted_once_past_the_cache() -> None:
    """Issue 20: on fde8f25 the removed-executors cache expired every
    deletedExecutorsCacheTimeout and a pod that could not be deleted was reported, and counted
    as a failure, again each time: one lingering pod failed the application after 720 s."""
    settings = CoreSettings.from_properties(
        {"spark.kubernetes.executor.deletedExecutorsCacheTimeout": "10s"}
    )
    assert settings.deleted_executors_cache_timeout == 10.0
    assert CoreSettings().deleted_executors_cache_timeout == 180.0
    rig = make_lifecycle_rig(settings)
    rig.pods.delete = lambda name: None  # type: ignore[method-assign]  # a finalizer holds it
    rig.store.update_pod(failed_executor(1))
    rig.store.notify_subscribers()
    for _ in range(100):  # 1,000 s: a hundred cache periods
        rig.clock.advance(10)
        rig.store.replace_snapshot([failed_executor(1)])
        rig.store.notify_subscribers()
    assert len(rig.driver.removals_of(1)) == 1
    assert len(rig.observer.removals) == 1
    assert rig.manager.failures.failed_executors == 1
    assert rig.observer.failures == []


def test_a_succeeded_executor_the_driver_still_counts_on_is_logged_at_info(
    life: LifecycleRig, caplog: pytest.LogCaptureFixture
) -> None:
    life.driver.active = {2}
    caplog.set_level(logging.INFO)
    life.store.update_pod(succeeded_executor(2))
    life.store.notify_subscribers()
    assert "succeeded although the application did not ask for it to exit" in caplog.text
    assert [i for i, _ in life.driver.removed] == [2]


def test_each_decision_that_changes_the_cluster_is_one_info_line(
    life: LifecycleRig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="execpods.core.lifecycle")
    life.store.update_pod(failed_executor(1))
    life.store.notify_subscribers()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 2
    assert lines[0].startswith("Removing executor 1 (exit code 1, caused by the app)")
    assert lines[1] == "Deleted the pod spark-executor-1 of executor 1, which failed."


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


def test_executors_killed_by_the_driver_are_reported_once_as_its_doing(life: LifecycleRig) -> None:
    life.manager.executors_killed([1, 2])
    life.store.update_pod(terminating_executor(1))
    life.store.notify_subscribers()
    assert life.driver.removed == []
    life.store.update_pod(replace(failed_executor(1), phase="Failed", deletion_timestamp=None))
    life.store.update_pod(deleted_executor(2))
    life.store.notify_subscribers()
    life.store.update_pod(deleted_executor(1))
    life.store.notify_subscribers()
    reasons = dict(life.driver.removed)
    assert sorted(reasons) == [1, 2]
    assert len(life.driver.removed) == 2
    assert all(r.killed_by_driver and not r.exit_caused_by_app for r in reasons.values())
    assert "killed by the driver" in reasons[1].message
    assert life.manager.failures.failed_executors == 0, "a kill is not a failure"


def test_spark_41210_window_based_executor_failure_tracking() -> None:
    rig = make_lifecycle_rig(
        CoreSettings.from_properties(
            {"spark.executor.maxNumFailures": "2", "spark.executor.failuresValidityInterval": "2s"}
        )
    )
    failures = rig.manager.failures
    assert failures.failed_executors == 0
    rig.clock.advance(1)
    rig.store.update_pod(failed_executor(1))
    rig.store.update_pod(failed_executor(2))
    rig.store.notify_subscribers()
    assert failures.failed_executors == 2
    assert rig.observer.failures == []
    rig.clock.advance(1)
    rig.store.notify_subscribers()
    assert failures.failed_executors == 2
    rig.clock.advance(2)
    assert failures.failed_executors == 0
    rig.clock.advance(1)
    for executor_id in (3, 4, 5):
        rig.store.update_pod(failed_executor(executor_id))
    rig.store.notify_subscribers()
    assert failures.failed_executors == 3
    (message,) = rig.observer.failures
    assert "(2)" in message
    assert "3 executors failed" in message
    rig.store.update_pod(failed_executor(6))
    rig.store.notify_subscribers()
    assert len(rig.observer.failures) == 1, "the driver is told once"


@pytest.mark.parametrize(
    ("properties", "limit"),
    [
        # Unset instances count as 0 (ExecutorFailureTracker: EXECUTOR_INSTANCES.getOrElse(0)).
        ({}, 3),
        ({"spark.executor.instances": "2"}, 4),  # 2 x spark.executor.instances
        ({"spark.executor.instances": "1"}, 3),  # at least 3
        ({"spark.executor.instances": "50"}, 100),
        ({"spark.dynamicAllocation.enabled": "true"}, 2**31 - 1),  # no overflow
        (
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.maxExecutors": "7",
            },
            14,
        ),
        ({"spark.executor.maxNumFailures": "9", "spark.executor.instances": "50"}, 9),
    ],
)
def test_max_num_failures_defaults_as_spark(properties: dict[str, str], limit: int) -> None:
    assert CoreSettings.from_properties(properties).max_executor_failures == limit


def test_a_terminal_state_is_final_and_other_states_are_not() -> None:
    assert {s for s in ExecutorState if s.is_final} == {
        ExecutorState.SUCCEEDED,
        ExecutorState.FAILED,
        ExecutorState.DELETED,
    }
