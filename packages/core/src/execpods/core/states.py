"""Executor pod states, classified exactly as Spark does (SPARK-24248's `ExecutorPodsSnapshot`).

A deletion timestamp wins over any phase (the pod is going away); otherwise the phase decides,
compared case-insensitively; an unexpected phase is `UNKNOWN`, logged so that an API change shows.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from execpods.core.pods import ExecutorPod

logger = logging.getLogger(__name__)


class PodState(enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"
    UNKNOWN = "unknown"

    @property
    def is_final(self) -> bool:
        """Succeeded, failed and deleted pods never come back: their executor is gone."""
        return self in _FINAL


_FINAL = frozenset({PodState.SUCCEEDED, PodState.FAILED, PodState.DELETED})
_BY_PHASE = {
    "pending": PodState.PENDING,
    "running": PodState.RUNNING,
    "succeeded": PodState.SUCCEEDED,
    "failed": PodState.FAILED,
}


@dataclass(frozen=True, slots=True)
class ExecutorPodState:
    """An executor's state together with the pod it was read from."""

    state: PodState
    pod: ExecutorPod

    @property
    def is_final(self) -> bool:
        return self.state.is_final


def classify(pod: ExecutorPod) -> ExecutorPodState:
    """The state of `pod`, as Spark's `ExecutorPodsSnapshot.toState` (SPARK-24248)."""
    if pod.is_deleted:
        return ExecutorPodState(PodState.DELETED, pod)
    phase = (pod.phase or "").lower()
    state = _BY_PHASE.get(phase)
    if state is None:
        logger.warning(
            "Received unknown phase %s for executor pod with name %s in namespace %s",
            pod.phase,
            pod.name,
            pod.namespace,
        )
        state = PodState.UNKNOWN
    return ExecutorPodState(state, pod)
