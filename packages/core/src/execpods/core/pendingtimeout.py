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

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC

from execpods.core.labels import ExecutorLabels
from execpods.core.notices import AllocatorNotice, NoticeKind
from execpods.core.profiles import profile_id_of
from execpods.core.settingkit import SettingsBase, duration_setting, non_negative, setting
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState
from execpods.core.waiting import pod_waiting_for

__all__ = [
    "PENDING_TIMEOUT_ACTIONS",
    "PendingTimeout",
    "PendingTimeoutDecision",
    "PendingTimeoutSettings",
]

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
            f"{self._settings.timeout:.0f}s (up to {longest:.0f} s): {why}. "
            f"execpods.executor.pendingTimeoutAction={action}: {what}."
        )
        return AllocatorNotice(
            kind=NoticeKind.PENDING_TIMEOUT,
            message=message,
            resource_profile_id=profile_id,
            count=len(executors),
        )
