"""Spark 4.3's newest executor-pod behaviours in the core, deterministic (manual clock, no sleeps).

- dynamic-allocation floors: Spark's `SchedulerBackendUtils.getInitialTargetExecutorNumber` and
  `Utils.getDynamicAllocationInitialExecutors` (UtilsSuite's "getDynamicAllocationInitialExecutors"
  cases, ported);
- graceful decommission on kills: `KubernetesClusterSchedulerBackend.doKillExecutors` labels the
  pods (`decommissionLabel`/`decommissionLabelValue`) and, Spark 4.2+, annotates their
  `controller.kubernetes.io/pod-deletion-cost`, before they go;
- driver readiness: `ExecutorPodsAllocator.start` waits up to `driver.readinessTimeout`;
- OOM recovery mode (Spark 4.2+): after a loss to OOM, new executors announce
  max(1, ceil(spark.task.cpus)) cores (`BasicExecutorFeatureStep`), unless the property is false.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from execpods.core import (
    AllocatorNotice,
    CoreSettings,
    DeterministicScheduler,
    ExecutorExited,
    ManualClock,
    NoticeKind,
    PodNotFound,
    SettingsError,
)
from execpods.core.features import NewExecutor
from execpods.core.notices import NoticeHub
from execpods.core.oom_recovery import OomRecoveryMode
from execpods.core.ports import ExecutorRemoval
from execpods.core.readiness import wait_for_driver_ready
from execpods.core.testing import (
    TEST_APP_ID,
    InMemoryPodOperations,
    SimpleExecutorPodBuilder,
    compose_deterministic,
    failed_executor,
    running_executor,
)

# --- dynamic-allocation floors ------------------------------------------------------------------


def _core(**properties: str) -> CoreSettings:
    return CoreSettings.from_properties(properties)


@pytest.mark.parametrize(
    ("properties", "initial"),
    [
        ({}, 2),  # Spark's DEFAULT_NUMBER_EXECUTORS without dynamic allocation
        ({"spark.executor.instances": "5"}, 5),
        ({"spark.executor.instances": "5", "spark.dynamicAllocation.minExecutors": "9"}, 5),
        # UtilsSuite "getDynamicAllocationInitialExecutors": max(min, initial, instances).
        ({"spark.dynamicAllocation.enabled": "true"}, 0),
        (
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "3",
            },
            3,
        ),
        (
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "3",
                "spark.executor.instances": "2",
            },
            3,
        ),
        (
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "3",
                "spark.dynamicAllocation.initialExecutors": "4",
                "spark.executor.instances": "2",
            },
            4,
        ),
        (
            {
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "3",
                "spark.dynamicAllocation.initialExecutors": "4",
                "spark.executor.instances": "6",
            },
            6,
        ),
    ],
)
def test_the_initial_target_is_sparks(properties: dict[str, str], initial: int) -> None:
    assert _core(**properties).initial_executors == initial


def test_an_initial_target_outside_min_and_max_is_refused_as_spark_does() -> None:
    with pytest.raises(SettingsError, match=r"initial executor number 8 must be between"):
        _core(
            **{
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.initialExecutors": "8",
                "spark.dynamicAllocation.maxExecutors": "5",
            }
        )


def test_the_backend_starts_at_the_dynamic_allocation_floor() -> None:
    settings = _core(
        **{
            "spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.minExecutors": "4",
            "spark.executor.instances": "1",
        }
    )
    pods = InMemoryPodOperations()
    composed = compose_deterministic(settings=settings, pod_operations=pods)
    backend, store = composed.backend, composed.store
    backend.start()
    store.notify_subscribers()
    assert backend.counts().total == 4
    assert pods.created_executor_ids() == [1, 2, 3, 4]


# --- graceful decommission on kills -------------------------------------------------------------


class OrderedPods(InMemoryPodOperations):
    """Records every call in order, to show the marks come before the deletion."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def patch_labels(self, name: str, labels: Any) -> None:
        self.calls.append(("label", name))
        super().patch_labels(name, labels)

    def patch_annotations(self, name: str, annotations: Any) -> None:
        self.calls.append(("annotate", name))
        super().patch_annotations(name, annotations)

    def delete_by_selector(self, selector: Any, *, grace_period_seconds: int | None = None) -> int:
        self.calls.append(("delete", selector.describe()))
        return super().delete_by_selector(selector, grace_period_seconds=grace_period_seconds)


def _kill(settings: CoreSettings, ids: list[int], live: list[int]) -> OrderedPods:
    """KillExecutors through the backend the composition root assembles (the decommission
    feature plugged from the settings)."""
    pods = OrderedPods()
    for executor_id in live:
        pod = running_executor(executor_id)
        pods.pods[pod.name] = pod
    scheduler = DeterministicScheduler(ManualClock())
    composed = compose_deterministic(
        settings=settings, pod_operations=pods, request_scheduler=scheduler
    )
    killed = composed.backend.kill_executors(ids)
    scheduler.run_until_idle()
    killed.result(timeout=0)
    return pods


def test_kill_labels_the_chosen_pods_before_deleting_them() -> None:
    """Ported from KubernetesClusterSchedulerBackendSuite's kill with decommissionLabel set:
    only the killed executors' pods get the label. The deletion cost is not set (issue 33 M3):
    `KubernetesClusterSchedulerBackend.doKillExecutors` annotates it only under the deployment
    allocator (`annotateExecutorDeletionCost` behind `pods.allocator == "deployment"`)."""
    settings = _core(
        **{
            "spark.kubernetes.executor.decommissionLabel": "spark.io/decommissioning",
            "spark.kubernetes.executor.decommissionLabelValue": "soon",
            "spark.kubernetes.executor.podDeletionCost": "-100",
        }
    )
    pods = _kill(settings, [2, 3], live=[1, 2, 3])
    names = {"spark-executor-2", "spark-executor-3"}
    assert {name for _, name in pods.calls[:2]} == names, "both pods marked, first"
    assert pods.calls[2][0] == "delete"
    assert sorted(pods.patches) == sorted((n, {"spark.io/decommissioning": "soon"}) for n in names)
    assert pods.annotation_patches == [], "no useless PATCH per pod"


def test_spark_kill_executors_marks_only_the_pods_that_exist() -> None:
    """Ported from KubernetesClusterSchedulerBackendSuite's "Kill executors": killing 1 and 2
    with no pods edits none; with only pod 1 listed, only pod 1 is edited (labelled)."""
    settings = _core(**{"spark.kubernetes.executor.decommissionLabel": "decom"})
    assert _kill(settings, [1, 2], live=[]).patches == []
    pods = _kill(settings, [1, 2], live=[1])
    assert pods.patches == [("spark-executor-1", {"decom": ""})]


def test_the_label_value_is_empty_by_default_as_spark() -> None:
    settings = _core(**{"spark.kubernetes.executor.decommissionLabel": "decom"})
    pods = _kill(settings, [1], live=[1, 2])
    assert pods.patches == [("spark-executor-1", {"decom": ""})]
    assert pods.annotation_patches == [], "no podDeletionCost, no annotation"


def test_a_deletion_cost_beyond_32_bits_is_refused() -> None:
    with pytest.raises(SettingsError, match="32-bit integer"):
        _core(**{"spark.kubernetes.executor.podDeletionCost": str(2**31)})
    assert _core(**{"spark.kubernetes.executor.podDeletionCost": str(-(2**31))})


def test_without_the_properties_a_kill_only_deletes() -> None:
    pods = _kill(CoreSettings(), [1], live=[1])
    assert [call for call, _ in pods.calls] == ["delete"]


class FailingMarks(OrderedPods):
    def patch_labels(self, name: str, labels: Any) -> None:
        raise PodNotFound(f"pods {name!r} not found")


def test_a_failed_mark_never_stops_the_kill(caplog: pytest.LogCaptureFixture) -> None:
    pods = FailingMarks()
    pod = running_executor(1)
    pods.pods[pod.name] = pod
    settings = _core(**{"spark.kubernetes.executor.decommissionLabel": "decom"})
    scheduler = DeterministicScheduler(ManualClock())
    backend = compose_deterministic(
        settings=settings, pod_operations=pods, request_scheduler=scheduler
    ).backend
    with caplog.at_level(logging.WARNING):
        killed = backend.kill_executors([1])
        scheduler.run_until_idle()
        assert killed.result(timeout=0) == 1
    assert "Could not mark pod" in caplog.text
    assert pod.name not in pods.pods


# --- driver readiness ---------------------------------------------------------------------------


def test_the_first_executors_wait_until_the_driver_is_ready() -> None:
    clock = ManualClock()
    ready_at = 0.35
    assert wait_for_driver_ready(
        lambda: clock.monotonic() >= ready_at, timeout=1.0, clock=clock, sleep=clock.advance
    )
    assert ready_at <= clock.monotonic() < ready_at + 0.1 + 1e-9, "no longer than one look"


def test_a_driver_never_ready_costs_the_timeout_then_executors_come_anyway(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    with caplog.at_level(logging.WARNING):
        ready = wait_for_driver_ready(
            lambda: False, timeout=2.5, clock=clock, sleep=clock.advance, driver="driver pod d"
        )
    assert not ready
    assert clock.monotonic() == pytest.approx(2.5)
    assert "Driver pod d was not ready within" in caplog.text


def test_an_unreadable_driver_pod_counts_as_not_ready_yet() -> None:
    clock = ManualClock()
    answers: list[bool | PodNotFound] = [PodNotFound("gone"), False, True]

    def probe() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, PodNotFound):
            raise answer
        return answer

    assert wait_for_driver_ready(probe, timeout=5.0, clock=clock, sleep=clock.advance)
    assert clock.monotonic() == pytest.approx(0.2)


# --- OOM recovery mode --------------------------------------------------------------------------


def _removal(executor_id: int, *, code: int, message: str, killed: bool = False) -> ExecutorRemoval:
    return ExecutorRemoval(
        executor_id=executor_id,
        reason=ExecutorExited(
            exit_code=code, exit_caused_by_app=True, message=message, killed_by_driver=killed
        ),
    )


def _cores(mode: OomRecoveryMode, executor_id: int) -> str | None:
    """What the pod of `executor_id` announces, built with what the feature decided."""
    executor = NewExecutor(app_id=TEST_APP_ID, executor_id=executor_id, resource_profile_id=0)
    pod = SimpleExecutorPodBuilder().build(
        executor_id=executor_id, app_id=TEST_APP_ID, decisions=mode.shape(executor)
    )
    env = pod["spec"]["containers"][0].get("env") or []
    values = [e["value"] for e in env if e["name"] == "SPARK_EXECUTOR_CORES"]
    return values[0] if values else None


def _mode(enabled: bool | None, cores: int = 1) -> tuple[OomRecoveryMode, list[AllocatorNotice]]:
    notices: list[AllocatorNotice] = []
    hub = NoticeHub()
    hub.add_listener(notices.append)
    return OomRecoveryMode(enabled=enabled, cores=cores, notices=hub), notices


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (137, "exited with exit code 137"),  # Spark: "(SIGKILL, possible container OOM)"
        (52, "exited with exit code 52"),  # Spark: "(JVM OOM)"
        (1, "The API gave the following brief reason: OOMKilled"),
    ],
)
def test_a_loss_to_oom_switches_recovery_mode_on_once(code: int, message: str) -> None:
    mode, notices = _mode(None, cores=2)
    assert _cores(mode, 1) is None, "before: the pod as built"
    mode.removed(_removal(1, code=code, message=message))
    mode.removed(_removal(2, code=code, message=message))
    assert mode.active
    assert _cores(mode, 3) == "2"
    assert [n.kind for n in notices] == [NoticeKind.RECOVERY_MODE], "told once"
    assert "Executor 1 was lost to OOM" in notices[0].message


def test_other_losses_and_kills_leave_it_off() -> None:
    mode, notices = _mode(None)
    mode.removed(_removal(1, code=1, message="exited with exit code 1 (generic)"))
    mode.removed(_removal(2, code=137, message="killed (OOMKilled)", killed=True))
    assert not mode.active
    assert notices == []


def test_false_never_and_true_from_the_start() -> None:
    never, notices = _mode(False)
    never.removed(_removal(1, code=137, message="OOMKilled"))
    assert not never.active
    assert notices == []
    always, _ = _mode(True)
    assert always.active


def test_recovery_cores_follow_spark_task_cpus() -> None:
    assert _core().recovery_cores == 1
    assert _core(**{"spark.task.cpus": "0.5"}).recovery_cores == 1
    assert _core(**{"spark.task.cpus": "2"}).recovery_cores == 2
    assert _core(**{"spark.task.cpus": "2.5"}).recovery_cores == 3


def test_through_the_backend_executors_after_an_oom_announce_one_core() -> None:
    """End to end in the core: an executor OOM-killed in a snapshot, its replacement's pod."""
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=_core(**{"spark.executor.instances": "2"}),
        pod_operations=pods,
        pod_builder=SimpleExecutorPodBuilder(cores=4),
    )
    backend, store = composed.backend, composed.store
    notices: list[AllocatorNotice] = []
    backend.add_notice_listener(notices.append)
    backend.start()
    store.notify_subscribers()
    assert [_env_cores(m) for m in pods.created] == ["4", "4"]
    store.update_pod(running_executor(1))
    store.update_pod(failed_executor(2, exit_code=137))
    store.notify_subscribers()  # the lifecycle manager removes 2; the allocator replaces it
    store.notify_subscribers()
    assert [n.kind for n in notices] == [NoticeKind.RECOVERY_MODE]
    assert [_env_cores(m) for m in pods.created[2:]] == ["1"]


def _env_cores(manifest: dict[str, Any]) -> str:
    env = manifest["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "SPARK_EXECUTOR_CORES"))
