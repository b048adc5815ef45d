"""Quota as capacity: a namespace that admits no more executors caps the target; it fails nothing.

When the API refuses a create because a ResourceQuota is exhausted (`QuotaExceeded`: "exceeded
quota: compute, requested: pods=1, used: pods=6, limited: pods=6"), the executor did not fail: the
namespace is full. Spark counts every refused create toward `spark.executor.maxNumFailures`, so a
quota of 6 under a target of 10 fails the application within seconds, and a quota raised later
cannot help. Kueue's answer is admission by quota; here the allocator treats the quota as the
capacity it is:

- the refusal is not an executor failure (nothing is counted);
- the profile's *effective target* is capped at what the namespace admitted: the profile's
  executors alive when the refusal came (running, pending and requested);
- while capped, creates go on only (a) when some of those executors go (their room is the
  profile's again: at once, no waiting) and (b) as a probe on a growing back-off (from
  `execpods.quota.retryInterval`, doubling with jitter, up to `execpods.quota.maxRetryInterval`),
  one create, then twice as many after each probe the API admits, as slow start does; a probe the
  API refuses caps again and backs off further, so refused creates stay at one per back-off;
- once the profile reaches its target the cap is lifted;
- each cap is a notice naming the quota and its figures, as is its lifting, and the gate's state
  is what the metrics show (capped target, executors kept out).

Per resource profile: a quota on cpu or memory admits a small profile after refusing a large one.
Pure and clock-free: the allocator passes `now` (monotonic seconds) and the counts.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from execpods.core.allocation import ProfileState
from execpods.core.errors import PodOperationError, QuotaExceeded
from execpods.core.features import Feature, FeatureParts, NewExecutor, RoundOutcome
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import Clock, PodDecisions
from execpods.core.settingkit import SettingsBase, duration_setting, positive

__all__ = ["QuotaCap", "QuotaFeature", "QuotaGate", "QuotaSettings", "describe_refusal", "plug"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaSettings(SettingsBase):
    """Quota as capacity: how a profile the namespace's quota refuses retries."""

    retry_interval: float = duration_setting(
        "execpods.quota.retryInterval",
        "1s",
        "After a create refused for an exceeded ResourceQuota, how long before one create tries "
        "again (it doubles, with jitter, on each refusal). Creates also resume at once as the "
        "profile's own executors go.",
        rule=positive,
    )
    max_retry_interval: float = duration_setting(
        "execpods.quota.maxRetryInterval",
        "30s",
        "The longest wait between two tries of a quota-capped profile: how soon a quota raised "
        "or freed by others is noticed, at one refused create per interval at most.",
        rule=positive,
    )


def describe_refusal(error: QuotaExceeded) -> str:
    """ "ResourceQuota compute: requested pods=1, used pods=6, limited pods=6"."""

    def listed(figures: Mapping[str, str]) -> str:
        return ",".join(f"{name}={value}" for name, value in sorted(figures.items()))

    return (
        f"ResourceQuota {error.quota}: requested {listed(error.requested)}, used "
        f"{listed(error.used)}, limited {listed(error.limited)}"
    )


@dataclass(slots=True, kw_only=True)
class QuotaCap:
    """A capped profile: what the namespace admitted, and when to try for more."""

    admitted: int
    """The profile's executors alive when the quota refused: its effective target."""
    target: int
    """The driver's target when it was capped (for the notices)."""
    quota: str
    figures: str
    refusals: int = 1
    """Refusals since the last create the API admitted (the back-off's exponent)."""
    probe_at: float = 0.0
    probe: int = 1
    """Creates the next probe may make (1, then doubling while the API admits them)."""


class QuotaGate:
    """The quota caps of every profile: what each may create now, and what to tell."""

    def __init__(self, settings: QuotaSettings, *, rng: random.Random | None = None) -> None:
        if settings.max_retry_interval < settings.retry_interval:
            settings = QuotaSettings(
                retry_interval=settings.retry_interval,
                max_retry_interval=settings.retry_interval,
            )
        self._settings = settings
        self._rng = rng if rng is not None else random.Random()
        self._caps: dict[int, QuotaCap] = {}
        self.refused_creates = 0
        """Creates the quota refused since start (for the metrics)."""

    def cap(self, profile_id: int) -> QuotaCap | None:
        return self._caps.get(profile_id)

    def capped(self) -> dict[int, int]:
        """Every capped profile's effective target."""
        return {p: cap.admitted for p, cap in self._caps.items()}

    def effective_target(self, profile_id: int, target: int) -> int:
        cap = self._caps.get(profile_id)
        return target if cap is None else min(target, cap.admitted)

    def allowed(self, profile_id: int, *, live: int, wanted: int, now: float) -> int:
        """How many of `wanted` creates the profile may make now, with `live` executors alive."""
        cap = self._caps.get(profile_id)
        if cap is None or wanted <= 0:
            return max(wanted, 0)
        room = cap.admitted - live
        if room > 0:  # some of its executors went: their room is the profile's again
            return min(wanted, room)
        if now >= cap.probe_at:
            return min(wanted, cap.probe)
        return 0

    def wait_for(self, profile_id: int, now: float) -> float:
        """Seconds until the capped profile's next probe (0: not capped, or due)."""
        cap = self._caps.get(profile_id)
        return 0.0 if cap is None else max(0.0, cap.probe_at - now)

    def refused(
        self,
        profile_id: int,
        error: QuotaExceeded,
        *,
        count: int,
        live: int,
        target: int,
        now: float,
    ) -> AllocatorNotice:
        """`count` creates were refused with `live` executors of the profile alive: cap it there
        and back off. Returns the notice to send."""
        self.refused_creates += count
        cap = self._caps.get(profile_id)
        figures = describe_refusal(error)
        if cap is None:
            cap = QuotaCap(admitted=live, target=target, quota=error.quota, figures=figures)
            self._caps[profile_id] = cap
        else:
            cap.refusals += 1
            cap.admitted, cap.target, cap.quota, cap.figures = live, target, error.quota, figures
        ceiling = min(
            self._settings.max_retry_interval,
            self._settings.retry_interval * 2.0 ** min(cap.refusals - 1, 30),
        )
        wait = ceiling / 2 + self._rng.uniform(0.0, ceiling / 2)
        cap.probe_at, cap.probe = now + wait, 1
        message = (
            f"The namespace's quota admits no more executors of resource profile {profile_id}: "
            f"{figures}. {live} of its {target} executors run or wait; its effective target is "
            f"capped at {live} (not counted as executor failures). Trying one create again in "
            f"{wait:.1f} s, and at once as its executors go."
        )
        return AllocatorNotice(
            kind=NoticeKind.QUOTA_EXCEEDED,
            message=message,
            resource_profile_id=profile_id,
            count=count,
            retry_in=wait,
        )

    def created(
        self, profile_id: int, *, count: int, live: int, target: int, now: float
    ) -> AllocatorNotice | None:
        """`count` creates went through, leaving `live` executors of the profile alive: the cap
        rises to them, the next probe is due at once and twice as large; at the target the cap is
        lifted (the returned notice says so)."""
        cap = self._caps.get(profile_id)
        if cap is None or count <= 0:
            return None
        if live < target:
            cap.admitted = max(cap.admitted, live)
            cap.refusals = 0
            cap.probe = min(cap.probe * 2, max(target - live, 1))
            cap.probe_at = now
            return None
        del self._caps[profile_id]
        return AllocatorNotice(
            kind=NoticeKind.QUOTA_CAP_LIFTED,
            message=(
                f"The quota ({cap.quota}) admits the target of resource profile {profile_id} "
                f"again: {live} executors run or wait; the cap is lifted."
            ),
            resource_profile_id=profile_id,
            count=0,
        )

    def target_changed(self, profile_id: int, target: int) -> AllocatorNotice | None:
        """The driver's target changed: a target at or below the cap needs no cap."""
        cap = self._caps.get(profile_id)
        if cap is None or target > cap.admitted:
            return None
        del self._caps[profile_id]
        return AllocatorNotice(
            kind=NoticeKind.QUOTA_CAP_LIFTED,
            message=(
                f"The target of resource profile {profile_id} ({target}) is within what the "
                f"quota ({cap.quota}) admitted ({cap.admitted}); the cap is lifted."
            ),
            resource_profile_id=profile_id,
            count=0,
        )

    def kept_out(self, targets: dict[int, int]) -> int:
        """Executors the quota keeps from being created, over every profile (the metrics'
        `quota` waiting reason)."""
        return sum(max(targets.get(p, 0) - cap.admitted, 0) for p, cap in self._caps.items())


def plug(settings: QuotaSettings, parts: FeatureParts) -> QuotaFeature:
    """Always on: a namespace without a quota never refuses for one, and costs nothing."""
    return QuotaFeature(settings, notices=parts.notices, clock=parts.clock)


class QuotaFeature(Feature):
    """The quota gate in the allocation: caps each profile's creates while the namespace is full,
    holds a refused profile, and tells the driver (`QUOTA_EXCEEDED`, `QUOTA_CAP_LIFTED`)."""

    def __init__(
        self,
        settings: QuotaSettings,
        *,
        notices: NoticeHub,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.gate = QuotaGate(settings, rng=rng)
        self._notices = notices
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[int, int] = {}
        """Each profile's executors alive as of its cap this round, plus the creates accepted
        since (the creates run on worker threads)."""
        self._accepted: dict[int, int] = {}
        self._refusals: dict[int, tuple[int, QuotaExceeded]] = {}
        """This round's refused creates by profile, and the last refusal (it names the quota)."""
        self._targets: dict[int, int] = {}

    def cap(self, state: ProfileState, wanted: int) -> int:
        profile_id = state.profile_id
        with self._lock:
            self._live[profile_id] = state.pod_count
            self._accepted[profile_id] = 0
            self._targets[profile_id] = state.target
            return self.gate.allowed(
                profile_id, live=state.pod_count, wanted=wanted, now=self._clock.monotonic()
            )

    def created(self, executor: NewExecutor, pod_name: str, decisions: PodDecisions) -> None:
        profile_id = executor.resource_profile_id
        with self._lock:
            self._live[profile_id] = self._live.get(profile_id, 0) + 1
            self._accepted[profile_id] = self._accepted.get(profile_id, 0) + 1

    def refused(self, executor: NewExecutor, error: PodOperationError) -> bool:
        """A create an exhausted quota refused is taken as capacity (not counted, not backed off
        by the creator); the round's refusals of a profile cap it once, at `finished`."""
        if not isinstance(error, QuotaExceeded):
            return False
        profile_id = executor.resource_profile_id
        with self._lock:
            count, _ = self._refusals.get(profile_id, (0, error))
            self._refusals[profile_id] = (count + 1, error)
        return True

    def finished(self, outcome: RoundOutcome) -> None:
        """The round's refusals cap their profiles (one notice each, naming the quota); creates
        the API admitted raise a cap (a probe went through); a new target within the cap, or the
        target reached, lifts it."""
        told: list[AllocatorNotice] = []
        now = self._clock.monotonic()
        with self._lock:
            refusals, self._refusals = self._refusals, {}
            for profile_id, (count, error) in sorted(refusals.items()):
                live = self._live.get(profile_id, 0)
                told.append(
                    self.gate.refused(
                        profile_id,
                        error,
                        count=count,
                        live=live,
                        target=self._targets.get(profile_id, live),
                        now=now,
                    )
                )
            for state in outcome.states:
                profile_id = state.profile_id
                accepted = self._accepted.pop(profile_id, 0)
                if accepted and profile_id not in refusals:
                    notice = self.gate.created(
                        profile_id,
                        count=accepted,
                        live=self._live.get(profile_id, state.pod_count),
                        target=state.target,
                        now=now,
                    )
                    if notice is not None:
                        told.append(notice)
                if self._targets.get(profile_id) != state.target:
                    self._targets[profile_id] = state.target
                    lifted = self.gate.target_changed(profile_id, state.target)
                    if lifted is not None:
                        told.append(lifted)
        for notice in told:
            if notice.kind is NoticeKind.QUOTA_EXCEEDED:
                logger.warning(notice.message)
            else:
                logger.info(notice.message)
            self._notices.notify(notice)

    def kept_out(self) -> int:
        """Executors the quota keeps from being created now, over every profile."""
        with self._lock:
            return self.gate.kept_out(dict(self._targets))

    def effective_targets(self) -> dict[int, int]:
        """Every capped profile's effective target."""
        with self._lock:
            return {p: min(self._targets.get(p, cap), cap) for p, cap in self.gate.capped().items()}
