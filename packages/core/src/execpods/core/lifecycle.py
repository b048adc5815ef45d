"""The lifecycle manager: turns executors in final states into driver notices and pod clean-up.

Newest Spark's `ExecutorPodsLifecycleManager`, round by round (every
`spark.kubernetes.executor.eventProcessingInterval`):

- an executor whose pod is Deleted is reported as not caused by the app; a Failed or Succeeded one
  is reported with its executor container's exit code (SPARK-49804) and the API's explanation;
- a finished pod is deleted (`deleteOnTermination`), at most once per round (SPARK-54198) and not
  when the round's latest snapshot shows it already terminating or gone (SPARK-47797); with
  `deleteOnTermination=false` it is labelled `spark-exec-inactive=true` once instead, and the
  sources leave inactive pods out, so the driver hears of it once however long the pod stays;
- an executor the driver registered that a *full* list lacks is reported missing, but only when
  the list was taken more than `spark.kubernetes.executor.missingPodDetectDelta` after the
  registration (SPARK-33711): a pod can register before any list shows it; an executor the
  driver killed is reported as soon as a full list taken after the kill lacks it (its pod is
  gone for sure: the watch missed the deletion), not a delta later;
- executors the driver killed (KillExecutors) are reported as such, never as failures; other
  failures are counted by the `ExecutorFailureTracker`, and too many fail the application;
- every executor reported removed is remembered for the manager's life (`IdRuns`: runs of
  consecutive ids), so a pod that lingers (a finalizer, a denied delete) is never reported or
  counted again; Spark forgets after `deletedExecutorsCacheTimeout` and then does both;
- a pod Kubernetes disrupted (a `DisruptionTarget` condition: evicted, preempted, removed from a
  tainted node; or status reason Evicted) is reported with that cause, not caused by the app, and
  not counted as a failure unless `execpods.executor.countDisruptions` (Spark counts it);
- what any other failed executor's failure does is the failure rules' to say
  (`failurerules.py`, a Job's podFailurePolicy): counted (the default), ignored (reported as not
  caused by the app), or the application fails at once; countDisruptions is their first rule.

A round works on what changed: the first snapshot of a round (and any full snapshot) is examined
for every executor in a final state; later snapshots only for the executors they changed. That is
the same set of actions as walking every executor of every snapshot, since repeats within a round
are no-ops, at a cost proportional to the changes instead of executors x snapshots.

Every decision that changes the cluster or the driver's view is logged at INFO, one line each.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime

from execpods.core.errors import PodOperationError
from execpods.core.failurerules import (
    DISRUPTIONS_IGNORED,
    FailureAction,
    FailureDecision,
    FailureRules,
    parse_rules,
)
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.idruns import IdRuns
from execpods.core.notices import AllocatorNotice, NoticeKind
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
from execpods.core.profiles import profile_id_of
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState, ObservedPod, disruption_of

logger = logging.getLogger(__name__)

_EXIT_CODE_MEANINGS = {
    0: "success",
    1: "a generic error: the executor's log says more",
    10: "an uncaught exception in the executor",
    50: "an uncaught exception in the executor",
    42: "no meaning defined by Spark (its 'douglas adams' code): the executor's log says more",
    52: "the executor's JVM ran out of memory",
    53: "the executor could not create its local (DiskStore) directories",
    126: "the command is not executable: check permissions or the image's architecture",
    137: "SIGKILL: killed, possibly because the container ran out of memory (OOMKilled)",
    139: "SIGSEGV: a segmentation fault, which is unexpected",
    143: "SIGTERM: the executor was asked to stop (a pod deletion or eviction)",
    255: "exit status -1: no specific meaning, the executor's log says more",
}


def describe_exit_code(code: int) -> str:
    """What an exit code usually means, for every code Spark describes; "unexpected" otherwise."""
    return _EXIT_CODE_MEANINGS.get(code, "unexpected")


def exit_code_of(observed: ObservedPod) -> int:
    """The executor container's exit code, else -1 (a sidecar container never speaks for it)."""
    code = observed.exit_code()
    return UNKNOWN_EXIT_CODE if code is None else code


def exit_reason(
    observed: ObservedPod,
    executor_id: int,
    *,
    killed_by_driver: bool = False,
    disruption: str | None = None,
) -> ExecutorExited:
    """What the driver is told about an executor in a final state."""
    code = exit_code_of(observed)
    if disruption is not None:
        pod = observed.pod
        return ExecutorExited(
            exit_code=code,
            exit_caused_by_app=False,
            pod_deleted=observed.state is ExecutorState.DELETED,
            message=(
                f"The executor with id {executor_id} was disrupted by Kubernetes ({disruption}): "
                f"its pod was {observed.state.value}"
                + ("" if code == UNKNOWN_EXIT_CODE else f" with exit code {code}")
                + f". The API gave the following brief reason: {pod.reason or 'N/A'}; "
                f"message: {pod.message or 'N/A'}. Not caused by the application."
            ),
        )
    if killed_by_driver:
        return ExecutorExited(
            exit_code=code,
            exit_caused_by_app=False,
            killed_by_driver=True,
            pod_deleted=observed.state is ExecutorState.DELETED,
            message=(
                f"The executor with id {executor_id} was killed by the driver (KillExecutors) "
                "and has stopped"
                + (
                    "."
                    if code == UNKNOWN_EXIT_CODE
                    else f": exit code {code} ({describe_exit_code(code)})."
                )
            ),
        )
    if observed.state is ExecutorState.DELETED:
        return ExecutorExited(
            exit_code=code,
            exit_caused_by_app=False,
            pod_deleted=True,
            message=f"The executor with id {executor_id} was deleted by a user or the framework.",
        )
    pod = observed.pod
    statuses = "\n===\n".join(status.describe() for status in pod.container_statuses)
    message = (
        f"The executor with id {executor_id} exited with exit code {code}"
        f" ({describe_exit_code(code)}).\n"
        f"The API gave the following brief reason: {pod.reason or 'N/A'}\n"
        f"The API gave the following message: {pod.message or 'N/A'}\n"
        f"The API gave the following container statuses:\n\n{statuses}\n"
    )
    return ExecutorExited(exit_code=code, exit_caused_by_app=True, message=message)


def _ruled(reason: ExecutorExited, decision: FailureDecision) -> ExecutorExited:
    """The removal's reason with what a configured failure rule decided: an ignored failure is
    reported as not caused by the application (so a driver does not count it either)."""
    said = {
        FailureAction.FAIL_APPLICATION: "fails the application",
        FailureAction.IGNORE: "is not counted as a failure",
        FailureAction.COUNT: "counts as a failure",
    }[decision.action]
    return ExecutorExited(
        exit_code=reason.exit_code,
        exit_caused_by_app=reason.exit_caused_by_app
        and decision.action is not FailureAction.IGNORE,
        killed_by_driver=reason.killed_by_driver,
        message=f"{reason.message.rstrip()}\nFailure rule {decision.explain()}: it {said}.",
    )


def _instant(seconds: float) -> str:
    when = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return f"{when} ({round(seconds * 1000)} ms)"


def missing_executor_reason(
    executor_id: int,
    *,
    registered_at: float,
    listed_at: float,
    delta: float,
    killed_by_driver: bool = False,
    killed_at: float | None = None,
) -> ExecutorExited:
    """Why an executor whose pod a full list lacks is removed (SPARK-33711's facts); with
    `killed_at`, the driver killed it then, and the list came after."""
    if killed_at is not None:
        return ExecutorExited(
            exit_code=UNKNOWN_EXIT_CODE,
            exit_caused_by_app=False,
            killed_by_driver=True,
            message=(
                f"The executor with id {executor_id}, killed by the driver at "
                f"{_instant(killed_at)}, is not in the full list of executor pods taken at "
                f"{_instant(listed_at)}: its pod is gone (its deletion was not seen); the "
                "executor is removed at once."
            ),
        )
    return ExecutorExited(
        exit_code=UNKNOWN_EXIT_CODE,
        exit_caused_by_app=False,
        killed_by_driver=killed_by_driver,
        message=(
            f"The executor with id {executor_id}, registered at {_instant(registered_at)}, "
            f"is not in the full list of executor pods taken at {_instant(listed_at)}, "
            f"{listed_at - registered_at:.3f}s later, which is more than "
            f"spark.kubernetes.executor.missingPodDetectDelta ({delta:g}s) allows. Its pod is "
            "gone but its deletion was not seen (the event may have been missed); the executor "
            "is removed as lost."
        ),
    )


class RemovalReasons:
    """Reasons to report for executors whose pods someone deletes for a reason of their own (a
    feature: the registration timeout), instead of what the pod says; any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[int, ExecutorExited] = {}

    def expect(self, executor_id: int, reason: ExecutorExited) -> None:
        """The executor's pod is being deleted for `reason`: its end is reported with it."""
        with self._lock:
            self._reasons[executor_id] = reason

    def take(self, executor_id: int) -> ExecutorExited | None:
        with self._lock:
            return self._reasons.pop(executor_id, None)


class _Round:
    """What one processing round has done, so that nothing is done twice in it."""

    __slots__ = ("deciding_on", "finished", "removed", "visited")

    def __init__(self) -> None:
        self.removed: set[int] = set()
        self.finished: dict[int, ObservedPod] = {}
        """Executors whose pods ended Failed or Succeeded: cleaned up once, at the round's end."""
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
        failure_tracker: ExecutorFailureTracker | None = None,
        failure_rules: FailureRules | None = None,
        notify: Callable[[AllocatorNotice], None] | None = None,
        reasons: RemovalReasons | None = None,
    ) -> None:
        self._settings = settings
        self._rules = (
            failure_rules
            if failure_rules is not None
            else FailureRules(
                parse_rules(settings.failure_rules),
                count_disruptions=settings.count_disruptions,
                executor_container=settings.executor_container_name,
            )
        )
        """What a failed executor's failure does: countDisruptions, the configured rules, and
        Count when none matches."""
        self._notify = notify
        """Hears what a configured failure rule decided (FailApplication, Ignore)."""
        self._observer = observer
        self._labels = settings.labels
        self._pods = pod_operations
        self._store = store
        self._clock = clock
        self._removed = IdRuns()
        """Every executor reported removed, for the manager's life (Spark forgets them after
        deletedExecutorsCacheTimeout, and then reports and counts a lingering pod again)."""
        self.failures = (
            failure_tracker
            if failure_tracker is not None
            else ExecutorFailureTracker.from_settings(settings, clock)
        )
        self._last_seen: ExecutorPodsSnapshot | None = None
        self._last_full_snapshot_ts = 0.0
        self._final_ids: set[int] = set()
        self._inactivated = IdRuns()
        """Executors whose kept pods were labelled inactive: never labelled twice, even when a
        list taken before the label arrives late (ints: small, and ids are never reused)."""
        self._killed: dict[int, float] = {}
        """Executors the driver killed, with when (wall clock), until reported."""
        self._killed_lock = threading.Lock()
        self._reasons = reasons if reasons is not None else RemovalReasons()
        """Reasons to report instead of the pod's, set by whoever deleted it (a timeout)."""
        self._application_failed = False
        self._driver: DriverView | None = None

    def start(self, driver: DriverView) -> None:
        """Subscribe; rounds run every `spark.kubernetes.executor.eventProcessingInterval`."""
        self._driver = driver
        self._store.add_subscriber(self._settings.event_processing_interval, self.on_new_snapshots)

    def executors_killed(self, executor_ids: Collection[int]) -> None:
        """The driver asked for these executors to go: their ends are reported as its doing."""
        now = self._clock.time()
        with self._killed_lock:
            for executor_id in executor_ids:
                self._killed.setdefault(executor_id, now)

    def _was_killed(self, executor_id: int) -> bool:
        with self._killed_lock:
            return executor_id in self._killed

    def _killed_before(self, executor_id: int, listed_at: float) -> float | None:
        """When the driver killed this executor, if before a list taken at `listed_at`: the
        list then lacks its pod because it is gone, not because it was not made yet."""
        with self._killed_lock:
            killed_at = self._killed.get(executor_id)
        return killed_at if killed_at is not None and killed_at < listed_at else None

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        driver = self._driver
        if driver is None:
            raise RuntimeError("the lifecycle manager was not started")
        self._observe_round(snapshots)
        work = _Round()
        for snapshot in snapshots:
            work.deciding_on = snapshot.serial
            for executor_id in self._ids_to_visit(snapshot, work):
                observed = snapshot.executor_pods.get(executor_id)
                if observed is None:
                    continue
                if self._labels.is_inactive(observed.pod.labels):
                    continue  # done with: reported, and labelled so that the sources leave it
                if observed.is_final:
                    self._on_final_state(driver, executor_id, observed, work)
            self._last_seen = snapshot
            work.visited = True
        if snapshots:
            latest = snapshots[-1]
            self._clean_up(work, latest)
            self._remove_missing(driver, latest, work)
        self._check_failures()

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
            observed = snapshot.executor_pods.get(executor_id)
            if observed is not None and observed.is_final:
                self._final_ids.add(executor_id)
            else:
                self._final_ids.discard(executor_id)
        # The first snapshot of a round revisits every final executor (clean-ups are retried
        # each round while the pod exists); later ones only what they changed.
        return sorted(changed) if work.visited else sorted(self._final_ids)

    def _on_final_state(
        self, driver: DriverView, executor_id: int, observed: ObservedPod, work: _Round
    ) -> None:
        if observed.state is not ExecutorState.DELETED:
            work.finished[executor_id] = observed
        if executor_id in work.removed or executor_id in self._removed:
            return
        killed = self._was_killed(executor_id)
        if (
            observed.state is ExecutorState.SUCCEEDED
            and not killed
            and self._is_active(driver, executor_id)
        ):
            logger.info(
                "Executor %d succeeded although the application did not ask for it to exit.",
                executor_id,
            )
        disruption = None if killed else disruption_of(observed.pod)
        # Whether it ever ran or not: a pod that fails at start (a bad image, a crash on
        # start-up) is exactly what the limit is for. A disruption (an eviction, a
        # preemption) is the cluster's doing: not counted unless countDisruptions (the first
        # failure rule); the configured rules say the rest.
        ruled = None
        if observed.state is ExecutorState.FAILED and not killed:
            ruled = self._judge(executor_id, observed)
        reason = self._reasons.take(executor_id) or exit_reason(
            observed, executor_id, killed_by_driver=killed, disruption=disruption
        )
        if ruled is not None and ruled.rule is not None and ruled.rule is not DISRUPTIONS_IGNORED:
            reason = _ruled(reason, ruled)
        self._report(driver, executor_id, reason, work)

    def _judge(self, executor_id: int, observed: ObservedPod) -> FailureDecision:
        """What the failure rules make of a failed executor: count it, ignore it, or fail the
        application now. A configured rule's decision is told as a notice."""
        decision = self._rules.decide(observed.pod)
        code = observed.exit_code()
        what = f"Executor {executor_id} failed" + ("" if code is None else f" (exit code {code})")
        if decision.action is FailureAction.FAIL_APPLICATION:
            message = (
                f"{what} and failure rule {decision.explain()} fails the application at once. "
                "Executor allocation stopped; the application should fail."
            )
            self.failures.fail(message)
        elif decision.counted:
            self.failures.register_failure()
        if decision.rule is None or decision.rule is DISRUPTIONS_IGNORED:
            return decision
        told = {
            FailureAction.FAIL_APPLICATION: "fails the application",
            FailureAction.IGNORE: "is not counted toward spark.executor.maxNumFailures",
            FailureAction.COUNT: "counts toward spark.executor.maxNumFailures",
        }[decision.action]
        message = f"{what}: failure rule {decision.explain()}: it {told}."
        logger.info(message)
        if self._notify is not None and decision.action is not FailureAction.COUNT:
            try:
                self._notify(
                    AllocatorNotice(
                        kind=NoticeKind.FAILURE_RULE,
                        message=message,
                        resource_profile_id=profile_id_of(observed.pod, self._labels),
                    )
                )
            except Exception:
                logger.exception("A failure rule's notice could not be told")
        return decision

    def _is_active(self, driver: DriverView, executor_id: int) -> bool:
        try:
            return driver.is_executor_active(executor_id)
        except Exception:
            logger.exception("The driver could not say whether executor %d is active", executor_id)
            return False

    def _clean_up(self, work: _Round, latest: ExecutorPodsSnapshot) -> None:
        """Delete (or label inactive) each finished pod once, unless it is already going."""
        for executor_id, observed in sorted(work.finished.items()):
            now = latest.executor_pods.get(executor_id)
            if now is None or now.pod.deletion_timestamp is not None:
                continue  # gone, or already being deleted (SPARK-47797)
            if self._labels.is_inactive(now.pod.labels):
                continue
            name = observed.pod.name
            if self._settings.delete_on_termination:
                self._delete_pod(executor_id, name, observed.state)
            elif executor_id not in self._inactivated:
                self._inactivate_pod(executor_id, name)

    def _delete_pod(self, executor_id: int, name: str, state: ExecutorState) -> None:
        # Best effort: if it fails, a later round sees the pod again and retries.
        try:
            self._pods.delete(name)
        except PodOperationError as error:
            logger.warning(
                "Could not delete the pod %s of executor %d: %s", name, executor_id, error
            )
            return
        logger.info("Deleted the pod %s of executor %d, which %s.", name, executor_id, state.value)

    def _inactivate_pod(self, executor_id: int, name: str) -> None:
        try:
            self._pods.patch_labels(name, {self._labels.inactive: "true"})
        except PodOperationError as error:
            logger.warning(
                "Could not label the pod %s of executor %d inactive: %s", name, executor_id, error
            )
            return
        self._inactivated.add(executor_id)
        logger.info(
            "Labelled the pod %s of executor %d %s=true: it is kept "
            "(spark.kubernetes.executor.deleteOnTermination=false) and no longer followed.",
            name,
            executor_id,
            self._labels.inactive,
        )

    def _report(
        self, driver: DriverView, executor_id: int, reason: ExecutorExited, work: _Round
    ) -> None:
        self._removed.add(executor_id)
        work.removed.add(executor_id)
        with self._killed_lock:
            self._killed.pop(executor_id, None)
        logger.info(
            "Removing executor %d (exit code %d, %s): %s",
            executor_id,
            reason.exit_code,
            "killed by the driver"
            if reason.killed_by_driver
            else "caused by the app"
            if reason.exit_caused_by_app
            else "not caused by the app",
            reason.message.strip().splitlines()[0],
            # Fields for structured logs (the sidecar's --log-format json).
            extra={"executor_id": executor_id, "reason": reason.message},
        )
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
        """Report registered executors that a new full list lacks (SPARK-33711)."""
        listed_at = latest.full_snapshot_ts
        if listed_at == self._last_full_snapshot_ts:
            return  # no full list since the last check: a missing pod may just not be seen yet
        self._last_full_snapshot_ts = listed_at
        try:
            registered = dict(driver.registration_times())
        except Exception:
            logger.exception("The driver could not list its executors")
            return
        delta = self._settings.missing_pod_detect_delta
        pods = latest.executor_pods
        for executor_id, registered_at in sorted(registered.items()):
            if executor_id in pods or executor_id in work.removed or executor_id in self._removed:
                continue
            killed_at = self._killed_before(executor_id, listed_at)
            if listed_at - registered_at <= delta and killed_at is None:
                continue
            reason = missing_executor_reason(
                executor_id,
                registered_at=registered_at,
                listed_at=listed_at,
                delta=delta,
                killed_by_driver=self._was_killed(executor_id),
                killed_at=killed_at if listed_at - registered_at <= delta else None,
            )
            self._report(driver, executor_id, reason, work)

    def _check_failures(self) -> None:
        if self._application_failed:
            return
        message = self.failures.application_failure
        if message is None:
            return
        self._application_failed = True
        logger.error("%s", message)
        if self._observer is None:
            return
        try:
            self._observer.application_failed(message)
        except Exception:
            logger.exception("The lifecycle observer failed on the application's failure")
