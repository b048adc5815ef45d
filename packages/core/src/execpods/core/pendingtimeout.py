"""Pending timeout: what happens to executors that stay Pending too long.

An executor can wait for ever: no node fits, its image cannot be pulled, a volume never mounts.
Spark has no answer (its `allocation.executor.timeout` covers only requests no snapshot ever
showed); KubeRay's autoscaler v2 gives each request a timeout (10 minutes from requested to
allocated) and reports the ones it gives up on. Here a driver chooses, with
`execpods.executor.pendingTimeout` (10 min; 0: never) and
`execpods.executor.pendingTimeoutAction`:

- `wait` (the default): keep waiting; the driver is told, once per executor, how long it has
  waited and why (the pod's reason, `waiting.py`): nothing is taken from it;
- `replace`: delete the pod and request another in its place (a new pod may land elsewhere: a
  node that could not pull, a zone out of capacity); its removal is reported as not caused by the
  application and is not counted as a failure;
- `lowerTarget`: delete the pod and lower the profile's effective target by it, so the
  application goes on with what runs instead of waiting (the driver's next new target for the
  profile lifts the lowering).

Each time, one notice per profile says how many, why they waited and what was done. Pure: the
allocator's round hands it the latest snapshot and the wall-clock time, and carries out the
decision (deletes through the pod operations, the effective target through its caps).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC

from execpods.core.allocation import ProfileState
from execpods.core.errors import PodOperationError
from execpods.core.features import (
    ExpectRemoval,
    Feature,
    FeatureParts,
    RoundFacts,
    RoundOutcome,
)
from execpods.core.labels import ExecutorLabels
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import (
    UNKNOWN_EXIT_CODE,
    ExecutorExited,
    PodOperations,
    PodSelector,
)
from execpods.core.profiles import profile_id_of
from execpods.core.settingkit import SettingsBase, duration_setting, non_negative, setting
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState
from execpods.core.waiting import pod_waiting_for

__all__ = [
    "PENDING_TIMEOUT_ACTIONS",
    "PendingTimeout",
    "PendingTimeoutDecision",
    "PendingTimeoutFeature",
    "PendingTimeoutSettings",
    "plug",
]

logger = logging.getLogger(__name__)

PENDING_TIMEOUT_ACTIONS = ("wait", "replace", "lowerTarget")


def _action(value: str) -> str | None:
    return None if value in PENDING_TIMEOUT_ACTIONS else "must be wait, replace or lowerTarget"


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingTimeoutSettings(SettingsBase):
    """Pending timeout: what happens to executors pending too long (KubeRay's request timeout)."""

    timeout: float = duration_setting(
        "execpods.executor.pendingTimeout",
        "10min",
        "How long an executor may stay Pending (from its pod's creation) before "
        "execpods.executor.pendingTimeoutAction applies; 0 = never.",
        rule=non_negative,
    )
    action: str = setting(
        "execpods.executor.pendingTimeoutAction",
        "wait",
        "What happens to an executor pending longer than execpods.executor.pendingTimeout: wait "
        "(keep waiting, the driver is told why), replace (delete its pod and request another) or "
        "lowerTarget (delete its pod and lower the profile's effective target until the driver "
        "sets a new one). A notice each time.",
        parse=str.strip,
        rule=_action,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingTimeoutDecision:
    """What one round decided: pods to delete (executor ids), targets to lower, what to tell."""

    delete: tuple[int, ...] = ()
    lower: dict[int, int] = field(default_factory=dict)
    """Profile -> its new effective target (only with lowerTarget)."""
    notices: tuple[AllocatorNotice, ...] = ()


class PendingTimeout:
    """Finds executors pending longer than the timeout, once each, and decides what to do."""

    def __init__(self, settings: PendingTimeoutSettings, *, labels: ExecutorLabels) -> None:
        self._settings = settings
        self._labels = labels
        self._handled: set[int] = set()
        self._lowered: dict[int, int] = {}
        self.timed_out = 0
        """Executors that reached the timeout since start (for the metrics)."""

    @property
    def enabled(self) -> bool:
        return self._settings.timeout > 0

    def effective_target(self, profile_id: int, target: int) -> int:
        lowered = self._lowered.get(profile_id)
        return target if lowered is None else min(target, lowered)

    def target_changed(self, profile_id: int) -> None:
        """The driver set a new target for the profile: a lowering no longer applies."""
        self._lowered.pop(profile_id, None)

    def review(
        self, snapshot: ExecutorPodsSnapshot, *, now: float, live: dict[int, int]
    ) -> PendingTimeoutDecision:
        """One round: `now` is wall-clock seconds, `live` each profile's executors alive
        (running, pending and requested) for lowering its target."""
        if not self.enabled:
            return PendingTimeoutDecision()
        timeout = self._settings.timeout
        overdue: dict[int, list[tuple[int, float, str]]] = {}
        for executor_id, observed in snapshot.executor_pods.items():
            if observed.state is not ExecutorState.PENDING or executor_id in self._handled:
                continue
            created = observed.pod.creation_timestamp
            if created is None:
                continue
            waited = now - created.astimezone(UTC).timestamp()
            if waited < timeout:
                continue
            why = pod_waiting_for(observed.pod)
            reason = "no reason reported" if why is None else why.describe()
            profile_id = profile_id_of(observed.pod, self._labels)
            overdue.setdefault(profile_id, []).append((executor_id, waited, reason))
        if not overdue:
            return PendingTimeoutDecision()
        action = self._settings.action
        delete: list[int] = []
        lower: dict[int, int] = {}
        notices = []
        for profile_id, executors in sorted(overdue.items()):
            ids = sorted(e[0] for e in executors)
            self._handled.update(ids)
            self.timed_out += len(ids)
            if action != "wait":
                delete.extend(ids)
            if action == "lowerTarget":
                lowered = max(0, live.get(profile_id, 0) - len(ids))
                previous = self._lowered.get(profile_id)
                lower[profile_id] = lowered if previous is None else min(previous, lowered)
                self._lowered[profile_id] = lower[profile_id]
            notices.append(self._notice(profile_id, executors, lower.get(profile_id)))
        return PendingTimeoutDecision(delete=tuple(delete), lower=lower, notices=tuple(notices))

    def forget(self, executor_ids: set[int]) -> None:
        """These executors are gone: no need to remember them."""
        self._handled.difference_update(executor_ids)

    def _notice(
        self, profile_id: int, executors: list[tuple[int, float, str]], lowered: int | None
    ) -> AllocatorNotice:
        action = self._settings.action
        reasons = Counter(reason for _, _, reason in executors)
        why = "; ".join(
            f"{count} x {reason}" if count > 1 else reason
            for reason, count in reasons.most_common(3)
        )
        ids = ",".join(str(e[0]) for e in sorted(executors))
        longest = max(e[1] for e in executors)
        what = {
            "wait": "still waiting for them",
            "replace": "their pods are deleted and as many executors requested again",
            "lowerTarget": (
                f"their pods are deleted and the profile's effective target lowered to {lowered} "
                "until the driver sets a new target"
            ),
        }[action]
        message = (
            f"{len(executors)} executors of resource profile {profile_id} ({ids}) have been "
            f"pending longer than execpods.executor.pendingTimeout="
            f"{self._settings.timeout:.0f}s (up to {longest:.0f} s): {why}"
            # Kubernetes' words end in a full stop ("... for incoming pod."): one, not two.
            f"{'' if why.endswith('.') else '.'} "
            f"execpods.executor.pendingTimeoutAction={action}: {what}."
        )
        return AllocatorNotice(
            kind=NoticeKind.PENDING_TIMEOUT,
            message=message,
            resource_profile_id=profile_id,
            count=len(executors),
        )


def plug(settings: PendingTimeoutSettings, parts: FeatureParts) -> PendingTimeoutFeature | None:
    """On unless `execpods.executor.pendingTimeout=0`."""
    if settings.timeout <= 0:
        return None
    return PendingTimeoutFeature(
        PendingTimeout(settings, labels=parts.settings.labels),
        app_id=parts.app_id,
        labels=parts.settings.labels,
        notices=parts.notices,
        pod_operations=parts.pod_operations,
        expect_removal=parts.expect_removal,
    )


class PendingTimeoutFeature(Feature):
    """The pending timeout in the allocation: reviews the pending executors each round, deletes
    what the action says (through the backend's pod operations, each removal reported with its
    reason), and holds a lowered profile's creates."""

    def __init__(
        self,
        timeout: PendingTimeout,
        *,
        app_id: str,
        labels: ExecutorLabels,
        notices: NoticeHub,
        pod_operations: PodOperations,
        expect_removal: ExpectRemoval,
    ) -> None:
        self.timeout = timeout
        self._app_id = app_id
        self._labels = labels
        self._notices = notices
        self._pods = pod_operations
        self._expect = expect_removal
        self._lock = threading.Lock()
        self._targets: dict[int, int] = {}
        self._facts: RoundFacts | None = None

    def observe(self, facts: RoundFacts) -> None:
        self._facts = facts  # reviewed once the round has counted each profile's executors

    def _review(self, states: Sequence[ProfileState]) -> None:
        facts = self._facts
        if facts is None or facts.snapshot.count(ExecutorState.PENDING) == 0:
            return  # nothing pending: nothing to time out (and no pod to look at)
        live = {state.profile_id: state.pod_count for state in states}
        with self._lock:
            decision = self.timeout.review(facts.snapshot, now=facts.now, live=live)
        if decision.delete:
            self._delete(decision.delete)
        for notice in decision.notices:
            logger.warning(notice.message)
            self._notices.notify(notice)

    def _delete(self, ids: tuple[int, ...]) -> None:
        """Delete these executors' pods while they are still Pending (one that turned Running
        meanwhile is spared), each reported with the timeout as its reason."""
        for executor_id in ids:
            self._expect(
                executor_id,
                ExecutorExited(
                    exit_code=UNKNOWN_EXIT_CODE,
                    exit_caused_by_app=False,
                    message=(
                        f"The executor with id {executor_id} was pending longer than "
                        "execpods.executor.pendingTimeout; its pod was deleted "
                        "(execpods.executor.pendingTimeoutAction). Not caused by the "
                        "application."
                    ),
                ),
            )
        selector = PodSelector(
            labels=self._labels.for_app(self._app_id),
            label_in={self._labels.executor_id: frozenset(str(i) for i in ids)},
            phase="Pending",
        )
        try:
            self._pods.delete_by_selector(selector)
        except PodOperationError as error:
            logger.warning(
                "Could not delete the pods of executors pending too long (%s); they are not "
                "tried again (the timeout applies once per executor).",
                error,
            )

    def cap(self, state: ProfileState, wanted: int) -> int:
        with self._lock:
            effective = self.timeout.effective_target(state.profile_id, state.target)
        return max(0, min(wanted, effective - state.pod_count))

    def finished(self, outcome: RoundOutcome) -> None:
        """Review the pending executors with the round's counts (`lowerTarget` lowers a profile
        to its executors alive, requested ones included, minus those timed out); a new target
        from the driver lifts the profile's lowering."""
        with self._lock:
            for state in outcome.states:
                known = self._targets.get(state.profile_id)
                self._targets[state.profile_id] = state.target
                if known is not None and known != state.target:
                    self.timeout.target_changed(state.profile_id)
        self._review(outcome.states)

    def effective_targets(self) -> dict[int, int]:
        """Every lowered profile's effective target."""
        with self._lock:
            return {
                p: self.timeout.effective_target(p, target)
                for p, target in self._targets.items()
                if self.timeout.effective_target(p, target) < target
            }
