"""The lifecycle manager: turns executors in final states into driver notices and pod deletions.

Spark's rules (SPARK-24248), with newer Spark's fix that a terminated pod is deleted at most once
per round (SPARK-54198): a deleted pod is reported to the driver as not caused by the app; a failed
or succeeded pod is deleted (when `deleteOnTermination` is on) and reported with its exit code and
the API's explanation. A cache of removed executors keeps the driver from hearing twice while a
deletion is retried in later rounds. An executor the driver knows but the latest snapshot lacks
(and that was not handled otherwise) is reported with exit code -1: its deletion event was missed.

A round works on what changed: the first snapshot of a round (and any full snapshot) is examined
for every executor in a final state; later snapshots only for the executors they changed. That is
the same set of actions as walking every executor of every snapshot, since repeats within a round
are no-ops, at a cost proportional to the changes instead of executors x snapshots.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from execpods.core.errors import PodOperationError
from execpods.core.expiring import ExpiringSet
from execpods.core.ports import (
    UNKNOWN_EXIT_CODE,
    Clock,
    DriverView,
    ExecutorExited,
    ExecutorRemoval,
    LifecycleObserver,
    PodOperations,
    SnapshotsReader,
)
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorPodState, PodState

logger = logging.getLogger(__name__)

_EXIT_CODE_MEANINGS = {
    0: "exited normally",
    1: "a generic error, usually a failure in the application",
    42: "the executor exited on purpose because of an error",
    50: "an uncaught exception in the executor",
    52: "an out-of-memory error in the JVM",
    53: "the executor could not create its local directories",
    134: "SIGABRT: the process aborted",
    137: "SIGKILL: killed, possibly the container ran out of memory (OOMKilled)",
    143: "SIGTERM: asked to stop",
}


def describe_exit_code(code: int) -> str:
    return _EXIT_CODE_MEANINGS.get(code, "no known meaning")


def exit_code_of(state: ExecutorPodState) -> int:
    """The executor container's exit code, else the first terminated container's, else -1."""
    code = state.pod.executor_exit_code()
    return UNKNOWN_EXIT_CODE if code is None else code


def exit_reason(state: ExecutorPodState, executor_id: int) -> ExecutorExited:
    """What the driver is told about an executor in a final state."""
    code = exit_code_of(state)
    if state.state is PodState.DELETED:
        return ExecutorExited(
            exit_code=code,
            exit_caused_by_app=False,
            message=f"The executor with id {executor_id} was deleted by a user or the framework.",
        )
    pod = state.pod
    statuses = "\n===\n".join(status.describe() for status in pod.container_statuses)
    message = (
        f"The executor with id {executor_id} exited with exit code {code}"
        f" ({describe_exit_code(code)}).\n"
        f"The API gave the following brief reason: {pod.reason}\n"
        f"The API gave the following message: {pod.message}\n"
        f"The API gave the following container statuses:\n\n{statuses}\n"
    )
    return ExecutorExited(exit_code=code, exit_caused_by_app=True, message=message)


def missing_executor_reason(executor_id: int) -> ExecutorExited:
    return ExecutorExited(
        exit_code=UNKNOWN_EXIT_CODE,
        exit_caused_by_app=False,
        message=(
            f"The executor with ID {executor_id} was not found in the cluster but we didn't get "
            "a reason why. Marking the executor as failed. The executor may have been deleted "
            "but the driver missed the deletion event."
        ),
    )


class _Round:
    """What one processing round has done, so that nothing is done twice in it."""

    __slots__ = ("deciding_on", "deleted_pods", "removed", "visited")

    def __init__(self) -> None:
        self.removed: set[int] = set()
        self.deleted_pods: set[str] = set()
        self.visited = False
        self.deciding_on = 0
        """Serial of the snapshot the round is making decisions on (for `ExecutorRemoval`)."""


class ExecutorPodsLifecycleManager:
    """Reports final executors to a `DriverView`, and each decision to a `LifecycleObserver`."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        pod_operations: PodOperations,
        store: SnapshotsReader,
        clock: Clock,
        observer: LifecycleObserver | None = None,
    ) -> None:
        self._settings = settings
        self._pods = pod_operations
        self._store = store
        self._observer = observer
        self._removed = ExpiringSet(ttl=settings.removed_executors_cache_ttl, clock=clock)
        self._last_seen: ExecutorPodsSnapshot | None = None
        self._final_ids: set[int] = set()
        self._driver: DriverView | None = None

    def start(self, driver: DriverView) -> None:
        """Subscribe; rounds run every `spark.kubernetes.executor.eventProcessingInterval`."""
        self._driver = driver
        self._store.add_subscriber(self._settings.event_processing_interval, self.on_new_snapshots)

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        driver = self._driver
        if driver is None:
            raise RuntimeError("the lifecycle manager was not started")
        self._observe_round(snapshots)
        work = _Round()
        for snapshot in snapshots:
            work.deciding_on = snapshot.serial
            for executor_id in self._ids_to_visit(snapshot, work):
                state = snapshot.executor_pods.get(executor_id)
                if state is not None and state.is_final:
                    self._on_final_state(driver, executor_id, state, work)
            self._last_seen = snapshot
            work.visited = True
        if snapshots:
            self._remove_missing(driver, snapshots[-1], work)
        if work.removed:
            logger.debug(
                "Removed executors with ids %s from the driver that were either found to be "
                "deleted or non-existent in the cluster.",
                ",".join(str(i) for i in sorted(work.removed)),
            )

    def _observe_round(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        if self._observer is None:
            return
        try:
            self._observer.round_started(snapshots)
        except Exception:
            logger.exception(
                "The lifecycle observer failed on a round of %d snapshots", len(snapshots)
            )

    def _ids_to_visit(self, snapshot: ExecutorPodsSnapshot, work: _Round) -> Iterable[int]:
        changed = snapshot.changes_since(self._last_seen)
        if changed is None:
            self._final_ids = {i for i, s in snapshot.executor_pods.items() if s.is_final}
            return sorted(self._final_ids)
        for executor_id in changed:
            state = snapshot.executor_pods.get(executor_id)
            if state is not None and state.is_final:
                self._final_ids.add(executor_id)
            else:
                self._final_ids.discard(executor_id)
        # The first snapshot of a round revisits every final executor (deletions are retried
        # each round while the pod exists); later ones only what they changed.
        return sorted(changed) if work.visited else sorted(self._final_ids)

    def _on_final_state(
        self, driver: DriverView, executor_id: int, state: ExecutorPodState, work: _Round
    ) -> None:
        name = state.pod.name
        if state.state is PodState.DELETED:
            logger.debug(
                "Snapshot reported deleted executor with id %d, pod name %s", executor_id, name
            )
        else:
            if state.state is PodState.SUCCEEDED and self._is_active(driver, executor_id):
                logger.info(
                    "Snapshot reported succeeded executor with id %d, even though the "
                    "application has not requested for it to be removed.",
                    executor_id,
                )
            else:
                logger.debug(
                    "Snapshot reported %s executor with id %d, pod name %s",
                    state.state.value,
                    executor_id,
                    name,
                )
            if self._settings.delete_on_termination and name not in work.deleted_pods:
                work.deleted_pods.add(name)
                self._delete_pod(name)
        self._tell_driver(driver, executor_id, state, work)
        work.removed.add(executor_id)

    def _is_active(self, driver: DriverView, executor_id: int) -> bool:
        try:
            return driver.is_executor_active(executor_id)
        except Exception:
            logger.exception("The driver could not say whether executor %d is active", executor_id)
            return False

    def _delete_pod(self, name: str) -> None:
        # Best effort: if it fails, a later round sees the pod again and retries.
        try:
            self._pods.delete(name)
        except PodOperationError as error:
            logger.warning("Could not delete terminated executor pod %s: %s", name, error)

    def _tell_driver(
        self, driver: DriverView, executor_id: int, state: ExecutorPodState, work: _Round
    ) -> None:
        if executor_id in self._removed:
            return
        self._removed.add(executor_id)
        self._remove(driver, executor_id, exit_reason(state, executor_id), work)

    def _remove(
        self, driver: DriverView, executor_id: int, reason: ExecutorExited, work: _Round
    ) -> None:
        try:
            driver.remove_executor(executor_id, reason)
        except Exception:
            logger.exception("The driver failed to remove executor %d", executor_id)
        if self._observer is None:
            return
        removal = ExecutorRemoval(
            executor_id=executor_id, reason=reason, snapshot_serial=work.deciding_on
        )
        try:
            self._observer.executor_removed(removal)
        except Exception:
            logger.exception("The lifecycle observer failed on the removal of %d", executor_id)

    def _remove_missing(
        self, driver: DriverView, latest: ExecutorPodsSnapshot, work: _Round
    ) -> None:
        try:
            known = list(driver.executor_ids())
        except Exception:
            logger.exception("The driver could not list its executors")
            return
        pods = latest.executor_pods
        for executor_id in sorted(known):
            if executor_id in pods or executor_id in work.removed or executor_id in self._removed:
                continue
            reason = missing_executor_reason(executor_id)
            logger.info("%s", reason.message)
            self._removed.add(executor_id)
            self._remove(driver, executor_id, reason, work)
            work.removed.add(executor_id)
