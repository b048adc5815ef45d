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

import random
from collections.abc import Mapping
from dataclasses import dataclass

from execpods.core.errors import QuotaExceeded
from execpods.core.notices import AllocatorNotice, NoticeKind
from execpods.core.settingkit import SettingsBase, duration_setting, positive

__all__ = ["QuotaCap", "QuotaGate", "QuotaSettings", "describe_refusal"]


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
