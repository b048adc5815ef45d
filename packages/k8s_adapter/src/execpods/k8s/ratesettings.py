"""How fast the sidecar may call the Kubernetes API: the rate policy's settings.

Only the adapter paces API calls (`ratelimit.TokenBucket`, `congestion.AdaptiveRateLimiter`), so
these settings are the adapter's; core hears one number from them, the most calls a second the
policy may ever allow (`peak_qps`), which sizes an allocation round. The property names are the
ones `CoreSettings` used to hold, so configurations and the CLI do not change.
"""

from __future__ import annotations

from dataclasses import dataclass

from execpods.core import SettingsError
from execpods.core.settingkit import (
    SettingsBase,
    parse_float,
    parse_int,
    rate,
    setting,
)

RATE_POLICIES = ("adaptive", "static")


def _rate_policy(value: str) -> str | None:
    return None if value in RATE_POLICIES else f"must be one of {', '.join(RATE_POLICIES)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRateSettings(SettingsBase):
    """The client-side rate of Kubernetes API calls: adaptive (congestion control) or static."""

    qps: int = setting(
        "execpods.kubernetes.api.qps",
        200,
        "Client-side rate limit on every Kubernetes API call the sidecar makes (calls/s): the "
        "static policy's rate, and where the adaptive policy starts.",
        parse=parse_int,
        rule=rate,
    )
    burst: int = setting(
        "execpods.kubernetes.api.burst",
        300,
        "Calls the static rate limit lets through at once after an idle spell (the token "
        "bucket's size).",
        parse=parse_int,
        rule=rate,
    )
    policy: str = setting(
        "execpods.kubernetes.api.ratePolicy",
        "adaptive",
        "adaptive: the API call rate grows while the API server answers promptly and falls on "
        "429, 5xx or rising latency, within minQps and maxQps (congestion control); static: a "
        "token bucket of qps and burst.",
        parse=str.strip,
        rule=_rate_policy,
    )
    min_qps: float = setting(
        "execpods.kubernetes.api.minQps",
        5.0,
        "The adaptive rate's floor (calls/s): client-go's default QPS, what every controller "
        "gets; however loaded the server, the sidecar keeps this much to make progress.",
        parse=parse_float,
        rule=rate,
    )
    max_qps: float = setting(
        "execpods.kubernetes.api.maxQps",
        2000.0,
        "The adaptive rate's ceiling (calls/s): a bound on a runaway, above what one sidecar "
        "sends to an idle server (its creates in flight are bounded by "
        "execpods.allocation.batch.concurrency); the server's 429s, not this, share a busy one.",
        parse=parse_float,
        rule=rate,
    )

    def __post_init__(self) -> None:
        SettingsBase.__post_init__(self)
        if self.min_qps > self.max_qps:
            raise SettingsError(
                f"execpods.kubernetes.api.minQps={self.min_qps} is invalid: it must not "
                f"exceed execpods.kubernetes.api.maxQps={self.max_qps}"
            )

    @property
    def peak_qps(self) -> float:
        """The most calls a second the policy may ever allow (what core sizes a round by)."""
        return self.max_qps if self.policy == "adaptive" else float(self.qps)


__all__ = ["RATE_POLICIES", "ApiRateSettings"]
