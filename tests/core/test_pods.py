"""The pod model: which container speaks for the executor."""

from __future__ import annotations

from execpods.core import (
    EXECUTOR_CONTAINER_NAME,
    ContainerRunning,
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
)


def _pod(*statuses: ContainerStatus) -> ExecutorPod:
    return ExecutorPod(name="p", container_statuses=statuses)


def test_the_executor_container_speaks_for_the_executor_wherever_it_is_listed() -> None:
    sidecar = ContainerStatus(name="log-shipper", state=ContainerTerminated(exit_code=1))
    executor = ContainerStatus(
        name=EXECUTOR_CONTAINER_NAME, state=ContainerTerminated(exit_code=137, reason="OOMKilled")
    )
    pod = _pod(sidecar, executor)
    assert pod.executor_container() is executor
    assert pod.executor_exit_code() == 137


def test_spark_49804_without_the_executor_container_there_is_no_exit_code() -> None:
    # The landed code took the first terminated container's code: 3 here, a helper's.
    running = ContainerStatus(name="custom", state=ContainerRunning())
    exited = ContainerStatus(name="helper", state=ContainerTerminated(exit_code=3))
    pod = _pod(running, exited)
    assert pod.executor_container() is None
    assert pod.executor_exit_code() is None
    assert pod.executor_container("custom") is running
    assert pod.executor_exit_code("helper") == 3


def test_while_the_executor_runs_a_helper_that_exited_gives_no_exit_code() -> None:
    executor = ContainerStatus(name=EXECUTOR_CONTAINER_NAME, state=ContainerRunning())
    helper = ContainerStatus(name="init-ish", state=ContainerTerminated(exit_code=0))
    assert _pod(executor, helper).executor_exit_code() is None
    assert _pod().executor_container() is None
    assert _pod().executor_exit_code() is None
