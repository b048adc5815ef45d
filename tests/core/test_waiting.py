"""Why executors wait: each Pending pod's reason, in Kubernetes' words, and the count by reason."""

from __future__ import annotations

import pytest
from execpods.core import (
    ContainerRunning,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPod,
    PodCondition,
    PodWarning,
)
from execpods.core.states import classify
from execpods.core.waiting import PendingReason, WaitingFor, count_waiting, waiting_for

SCHEDULER = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available."
UNSCHEDULABLE = PodCondition(
    type="PodScheduled", status="False", reason="Unschedulable", message=SCHEDULER
)
GATED = PodCondition(type="PodScheduled", status="False", reason="SchedulingGated")
SCHEDULED = PodCondition(type="PodScheduled", status="True")
MOUNT = PodWarning(
    reason="FailedMount",
    message='MountVolume.SetUp failed for volume "conf" : secret "s" not found',
)


def waiting(name: str, reason: str | None, message: str | None = None) -> ContainerStatus:
    return ContainerStatus(name=name, state=ContainerWaiting(reason=reason, message=message))


def pending(
    *,
    conditions: tuple[PodCondition, ...] = (),
    containers: tuple[ContainerStatus, ...] = (),
    inits: tuple[ContainerStatus, ...] = (),
    warning: PodWarning | None = None,
    phase: str = "Pending",
) -> ExecutorPod:
    return ExecutorPod(
        name="exec-1",
        phase=phase,
        labels={"spark-exec-id": "1"},
        conditions=conditions,
        container_statuses=containers,
        init_container_statuses=inits,
        warning=warning,
    )


EXEC = "spark-kubernetes-executor"
CASES = [
    (pending(conditions=(UNSCHEDULABLE,)), PendingReason.UNSCHEDULABLE, "Unschedulable", SCHEDULER),
    (pending(conditions=(GATED,)), PendingReason.SCHEDULING_GATED, "SchedulingGated", ""),
    (
        pending(
            conditions=(SCHEDULED,),
            containers=(waiting(EXEC, "ErrImagePull", 'failed to pull image "x": not found'),),
        ),
        PendingReason.IMAGE_PULL,
        "ErrImagePull",
        f'container {EXEC}: failed to pull image "x": not found',
    ),
    (
        pending(containers=(waiting(EXEC, "ImagePullBackOff", "Back-off pulling image"),)),
        PendingReason.IMAGE_PULL,
        "ImagePullBackOff",
        f"container {EXEC}: Back-off pulling image",
    ),
    (
        pending(containers=(waiting(EXEC, "CreateContainerConfigError", 'secret "s" not found'),)),
        PendingReason.CONTAINER_CONFIG,
        "CreateContainerConfigError",
        f'container {EXEC}: secret "s" not found',
    ),
    (
        pending(
            inits=(waiting("fetch", "CrashLoopBackOff"),),
            containers=(waiting(EXEC, "PodInitializing"),),
        ),
        PendingReason.CRASH_LOOP,
        "CrashLoopBackOff",
        "container fetch",
    ),
    # an init container's trouble comes before the main containers' (which wait for it)
    (
        pending(
            inits=(waiting("fetch", "ImagePullBackOff"),),
            containers=(waiting(EXEC, "CreateContainerConfigError"),),
        ),
        PendingReason.IMAGE_PULL,
        "ImagePullBackOff",
        "container fetch",
    ),
    # a sidecar container's trouble holds the executor too
    (
        pending(containers=(waiting(EXEC, "ContainerCreating"), waiting("side", "ErrImagePull"))),
        PendingReason.IMAGE_PULL,
        "ErrImagePull",
        "container side",
    ),
    (
        pending(
            conditions=(SCHEDULED,), containers=(waiting(EXEC, "ContainerCreating"),), warning=MOUNT
        ),
        PendingReason.FAILED_MOUNT,
        "FailedMount",
        MOUNT.message,
    ),
    (
        pending(conditions=(SCHEDULED,), warning=MOUNT),
        PendingReason.FAILED_MOUNT,
        "FailedMount",
        MOUNT.message,
    ),
]


@pytest.mark.parametrize(("pod", "reason", "api_reason", "message"), CASES)
def test_each_reason_with_kubernetes_words(
    pod: ExecutorPod, reason: PendingReason, api_reason: str, message: str
) -> None:
    assert waiting_for(classify(pod)) == WaitingFor(
        reason=reason, api_reason=api_reason, message=message
    )


NO_REASON = [
    pending(),  # just created
    pending(conditions=(SCHEDULED,), containers=(waiting(EXEC, "ContainerCreating"),)),
    pending(conditions=(PodCondition(type="PodScheduled", status="False", reason="Other"),)),
    # a mount warning no longer holds a pod whose volumes were mounted (its sandbox is ready)
    pending(
        conditions=(SCHEDULED, PodCondition(type="PodReadyToStartContainers", status="True")),
        containers=(waiting(EXEC, "ContainerCreating"),),
        warning=MOUNT,
    ),
    # nor one whose containers were made
    pending(containers=(ContainerStatus(name=EXEC, state=ContainerRunning()),), warning=MOUNT),
    # not pending: a running or failed executor waits for nothing, whatever its conditions say
    pending(phase="Running", conditions=(UNSCHEDULABLE,)),
    pending(
        phase="Failed",
        containers=(ContainerStatus(name=EXEC, state=ContainerTerminated(exit_code=1)),),
        inits=(waiting("fetch", "CrashLoopBackOff"),),
    ),
]


@pytest.mark.parametrize("pod", NO_REASON)
def test_nothing_says_it_is_stuck(pod: ExecutorPod) -> None:
    assert waiting_for(classify(pod)) is None


def test_the_reason_clears_when_the_scheduler_places_the_pod() -> None:
    stuck = pending(conditions=(UNSCHEDULABLE,))
    placed = pending(conditions=(SCHEDULED,), containers=(waiting(EXEC, "ContainerCreating"),))
    assert waiting_for(classify(stuck)) is not None
    assert waiting_for(classify(placed)) is None


def test_pending_executors_are_counted_by_reason() -> None:
    pods = [
        pending(conditions=(UNSCHEDULABLE,)),
        pending(conditions=(UNSCHEDULABLE,)),
        pending(containers=(waiting(EXEC, "ErrImagePull"),)),
        pending(),
        pending(phase="Running"),
    ]
    assert count_waiting(classify(p) for p in pods) == {
        PendingReason.UNSCHEDULABLE: 2,
        PendingReason.IMAGE_PULL: 1,
    }
