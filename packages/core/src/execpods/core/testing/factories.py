"""Executor pod values in each state a test needs, as Spark's ExecutorLifecycleTestUtils.

Values, not doubles: kept apart so that a test of a snapshot or a state classifier imports pods
without the port doubles or the composition rig.
"""

from __future__ import annotations

from datetime import UTC, datetime

from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.pods import (
    EXECUTOR_CONTAINER_NAME,
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
)

TEST_APP_ID = "spark-app-id"


# Pod factories, as Spark's ExecutorLifecycleTestUtils (SPARK-24248).


def executor_pod(
    executor_id: int, *, app_id: str = TEST_APP_ID, labels: ExecutorLabels = SPARK_LABELS
) -> ExecutorPod:
    return ExecutorPod(
        name=f"spark-executor-{executor_id}",
        labels=labels.for_executor(app_id, executor_id),
    )


def _with(pod: ExecutorPod, **changes: object) -> ExecutorPod:
    fields = {name: getattr(pod, name) for name in pod.__dataclass_fields__}
    fields.update(changes)
    return ExecutorPod(**fields)


def pending_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="pending")


def running_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="running")


def succeeded_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="succeeded")


def unknown_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="unknown")


def deleted_executor(executor_id: int) -> ExecutorPod:
    """Being deleted and no longer running (a pod whose containers stopped): Deleted."""
    return _with(
        executor_pod(executor_id),
        phase="failed",
        deletion_timestamp=datetime(1986, 7, 28, tzinfo=UTC),
    )


def terminating_executor(executor_id: int) -> ExecutorPod:
    """Being deleted while it still runs: Terminating (SPARK-31125), not gone yet."""
    return _with(
        executor_pod(executor_id),
        phase="running",
        deletion_timestamp=datetime(1986, 7, 28, tzinfo=UTC),
    )


def failed_executor(executor_id: int, *, exit_code: int = 1) -> ExecutorPod:
    """A failed pod as Spark's fixture since SPARK-49804: a sidecar container listed first exited 2,
    the executor container exited `exit_code`, and only the latter speaks for the executor."""
    return _with(
        executor_pod(executor_id),
        phase="failed",
        message="Executor failed.",
        reason="Executor failed because of a thrown error.",
        container_statuses=(
            ContainerStatus(
                name="spark-executor-sidecar",
                image="k8s-spark-sidecar",
                state=ContainerTerminated(exit_code=2, message="Failed"),
            ),
            ContainerStatus(
                name=EXECUTOR_CONTAINER_NAME,
                image="k8s-spark",
                state=ContainerTerminated(exit_code=exit_code, message="Failed"),
            ),
        ),
    )
