"""Executor states, classified from pods as newest Spark's `ExecutorPodsSnapshot.toState`.

- A pod that is gone (a DELETED event reported it) or has a deletion timestamp and no longer
  runs is `DELETED`: its executor is gone.
- A pod with a deletion timestamp whose phase is still Running is `TERMINATING` (SPARK-31125):
  its executor is shutting down gracefully and may still finish work; it is not gone yet.
- A Running pod whose executor container terminated is `SUCCEEDED` or `FAILED` by that container's
  exit code; with `spark.kubernetes.executor.checkAllContainers` and restartPolicy Never, any
  container that terminated non-zero fails the pod (a crashed sidecar container leaves the
  executor unusable, and Never means the kubelet will not restart it).
- Otherwise the phase decides, compared case-insensitively; an unexpected phase is `UNKNOWN`,
  logged so that an API change shows.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from execpods.core.pods import (
    EXECUTOR_CONTAINER_NAME,
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
)

logger = logging.getLogger(__name__)


class ExecutorState(enum.Enum):
    """What an executor's pod says about the executor (the contract's `ExecutorState`)."""

    PENDING = "pending"
    RUNNING = "running"
    TERMINATING = "terminating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"
    UNKNOWN = "unknown"

    @property
    def is_final(self) -> bool:
        """Succeeded, failed and deleted pods never come back: their executor is gone."""
        return self in _FINAL


_FINAL = frozenset({ExecutorState.SUCCEEDED, ExecutorState.FAILED, ExecutorState.DELETED})
_BY_PHASE = {
    "pending": ExecutorState.PENDING,
    "running": ExecutorState.RUNNING,
    "succeeded": ExecutorState.SUCCEEDED,
    "failed": ExecutorState.FAILED,
    # Not a phase the API uses, but Spark accepts it (kubectl shows it for pods being deleted).
    "terminating": ExecutorState.TERMINATING,
}
_STILL_RUNNING = frozenset({"running", "terminating"})


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """An executor's pod as last observed, with the state it was classified into.

    `executor_container_name` names the container that speaks for the executor (its exit code is
    the executor's), so every reader of a snapshot agrees with the classifier on it.
    """

    state: ExecutorState
    pod: ExecutorPod
    executor_container_name: str = EXECUTOR_CONTAINER_NAME

    @property
    def is_final(self) -> bool:
        return self.state.is_final

    def executor_container(self) -> ContainerStatus | None:
        return self.pod.executor_container(self.executor_container_name)

    def exit_code(self) -> int | None:
        """The executor container's exit code once it terminated; None before (or without it)."""
        return self.pod.executor_exit_code(self.executor_container_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodClassifier:
    """How pods are classified: which container is the executor, and whether all containers count.

    `executor_container` is `spark.kubernetes.executor.podTemplateContainerName`;
    `check_all_containers` is `spark.kubernetes.executor.checkAllContainers`.
    """

    executor_container: str = EXECUTOR_CONTAINER_NAME
    check_all_containers: bool = True

    def classify(self, pod: ExecutorPod) -> ObservedPod:
        """The state of `pod` (see the module docstring for the rules)."""
        phase = (pod.phase or "").lower()
        if pod.gone or (pod.deletion_timestamp is not None and phase not in _STILL_RUNNING):
            return self._observed(ExecutorState.DELETED, pod)
        if phase == "running":
            return self._observed(self._running_state(pod), pod)
        state = _BY_PHASE.get(phase)
        if state is None:
            logger.warning(
                "Received unknown phase %s for executor pod with name %s in namespace %s",
                pod.phase,
                pod.name,
                pod.namespace,
            )
            state = ExecutorState.UNKNOWN
        return self._observed(state, pod)

    def _observed(self, state: ExecutorState, pod: ExecutorPod) -> ObservedPod:
        return ObservedPod(state, pod, self.executor_container)

    def _running_state(self, pod: ExecutorPod) -> ExecutorState:
        # One pass over the containers: this runs for every event of every running executor.
        never = self.check_all_containers and pod.restart_policy == "Never"
        code: int | None = None
        for status in pod.container_statuses:
            state = status.state
            if not isinstance(state, ContainerTerminated):
                continue
            if never and state.exit_code != 0:
                return ExecutorState.FAILED
            if status.name == self.executor_container:
                code = state.exit_code
        if code is not None:
            return ExecutorState.SUCCEEDED if code == 0 else ExecutorState.FAILED
        if pod.deletion_timestamp is not None:
            return ExecutorState.TERMINATING
        return ExecutorState.RUNNING


DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Preempted", "NodeLost", "Shutdown"})
"""`status.reason`s that mean Kubernetes ended the pod, for pods without the `DisruptionTarget`
condition (clusters before 1.26, the kubelet's node-pressure evictions)."""


def disruption_of(pod: ExecutorPod) -> str | None:
    """Why Kubernetes disrupted this pod (evicted, preempted, removed from a tainted or lost
    node), or None when nothing says it did: the `DisruptionTarget` condition's reason first,
    then a `status.reason` of `DISRUPTION_REASONS`."""
    if pod.disruption is not None:
        return pod.disruption
    return pod.reason if pod.reason in DISRUPTION_REASONS else None


DEFAULT_CLASSIFIER = PodClassifier()


def classify(pod: ExecutorPod) -> ObservedPod:
    """The state of `pod` under Spark's defaults (`DEFAULT_CLASSIFIER`)."""
    return DEFAULT_CLASSIFIER.classify(pod)
