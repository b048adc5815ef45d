"""Issue 20: disruptions are the cluster's doing (defect 8), one spelling per id (defect 10), and
removals are remembered for the backend's life in little memory (defects 2 and 3)."""

from __future__ import annotations

import dataclasses

from execpods.core import SPARK_LABELS, CoreSettings, ExecutorPodsSnapshot
from execpods.core.idruns import IdRuns
from execpods.core.testing import TEST_APP_ID, failed_executor, running_executor
from hypothesis import given
from hypothesis import strategies as st

from tests.core.conftest import make_lifecycle_rig


def evicted(executor_id: int, *, condition: str | None, reason: str | None = None):  # type: ignore[no-untyped-def]
    return dataclasses.replace(
        failed_executor(executor_id, exit_code=137),
        disruption=condition,
        reason=reason,
        message="The node was low on resource: memory.",
    )


def test_defect_8_disruptions_are_reported_with_their_cause_and_not_counted() -> None:
    rig = make_lifecycle_rig(CoreSettings(max_num_failures=1))
    pods = [
        evicted(1, condition="TerminationByKubelet", reason="Evicted"),
        evicted(2, condition="PreemptionByScheduler"),
        evicted(3, condition="DeletionByTaintManager"),
        evicted(4, condition=None, reason="Evicted"),  # a cluster before 1.26: the reason says
    ]
    for pod in pods:
        rig.store.update_pod(pod)
    rig.store.notify_subscribers()
    assert rig.manager.failures.failed_executors == 0
    assert rig.observer.failures == []
    for executor_id, cause in [
        (1, "TerminationByKubelet"),
        (2, "PreemptionByScheduler"),
        (3, "DeletionByTaintManager"),
        (4, "Evicted"),
    ]:
        (reason,) = rig.driver.removals_of(executor_id)
        assert f"disrupted by Kubernetes ({cause})" in reason.message
        assert not reason.exit_caused_by_app
        assert reason.exit_code == 137
    rig.store.update_pod(failed_executor(5))
    rig.store.update_pod(failed_executor(6))
    rig.store.notify_subscribers()
    assert rig.manager.failures.failed_executors == 2, "ordinary failures still count"
    assert len(rig.observer.failures) == 1


def test_count_disruptions_restores_spark_s_counting() -> None:
    settings = CoreSettings.from_properties({"execpods.executor.countDisruptions": "true"})
    rig = make_lifecycle_rig(settings)
    rig.store.update_pod(evicted(1, condition="EvictionByEvictionAPI"))
    rig.store.notify_subscribers()
    assert rig.manager.failures.failed_executors == 1
    (reason,) = rig.driver.removals_of(1)
    assert "EvictionByEvictionAPI" in reason.message


def test_defect_10_a_label_with_leading_zeros_is_no_executor() -> None:
    real = running_executor(7)
    alias = dataclasses.replace(
        real,
        name="spark-executor-0007",
        labels={**SPARK_LABELS.for_app(TEST_APP_ID), SPARK_LABELS.executor_id: "0007"},
    )
    snapshot = ExecutorPodsSnapshot.from_pods([real, alias])
    assert list(snapshot.executor_pods) == [7]
    assert snapshot.executor_pods[7].pod.name == real.name
    assert SPARK_LABELS.executor_id_of("x", {SPARK_LABELS.executor_id: "0"}) == 0


@given(st.lists(st.integers(min_value=0, max_value=60), max_size=80))
def test_id_runs_hold_exactly_what_a_set_does(values: list[int]) -> None:
    runs = IdRuns()
    for value in values:
        runs.add(value)
    assert [v for v in range(62) if v in runs] == sorted(set(values))
    assert len(runs) == len(set(values))
    assert runs.runs <= len(set(values))


def test_ten_thousand_removed_executors_in_order_are_one_run() -> None:
    runs = IdRuns()
    for value in range(1, 10_001):
        runs.add(value)
    assert runs.runs == 1
    assert 10_000 in runs
    assert 10_001 not in runs
