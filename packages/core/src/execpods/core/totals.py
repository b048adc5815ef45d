"""What a driver asks for at once: resource profiles to declare and a total per profile.

Spark's `doRequestTotalExecutors` hands its backend a map of resource profile to total, after the
profiles were registered. Here both arrive in one request (a remote driver declares the shapes it
asks for in the same call), and the request is judged whole before any of it applies: each rule
below has one wording, and a request that breaks any of them changes nothing (no profile declared,
no target set):

- a profile is declared at most once in a request;
- a profile already declared may be declared again only identically (profiles are immutable);
- every total is non-negative and at most `execpods.allocation.maxTotal`;
- every total names a profile that is declared, or declared by the same request.

`ExecutorPodsBackend.request` is the one call that applies a request; the sidecar's servicer only
maps the contract's message onto a `TotalsRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from execpods.core.ports import DEFAULT_RESOURCE_PROFILE_ID
from execpods.core.profiles import ResourceProfile, ResourceProfiles


@dataclass(frozen=True, slots=True, kw_only=True)
class TotalsRequest:
    """Profiles to declare and the totals to set, by resource profile id."""

    totals: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    profiles: tuple[ResourceProfile, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "totals", MappingProxyType(dict(self.totals)))
        object.__setattr__(self, "profiles", tuple(self.profiles))

    @classmethod
    def of(
        cls, total: int, *, resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID
    ) -> TotalsRequest:
        """One profile's total (the default profile's unless named)."""
        return cls(totals={resource_profile_id: total})

    def check(self, *, declared: ResourceProfiles, max_total: int) -> None:
        """Raise `ValueError` naming the first broken rule (see the module); return if none is.

        Conflicting re-declarations raise `ProfileConflict`, a `ValueError`."""
        seen: set[int] = set()
        for profile in self.profiles:
            if profile.id in seen:
                raise ValueError(f"resource profile {profile.id} is declared twice in one request")
            seen.add(profile.id)
        declared.check_declarable(self.profiles)
        for profile_id, total in sorted(self.totals.items()):
            where = f"resource profile {profile_id}: total={total} is invalid"
            if total < 0:
                raise ValueError(f"{where}: it must not be negative")
            if total > max_total:
                raise ValueError(f"{where}: it is above execpods.allocation.maxTotal={max_total}")
            if profile_id not in declared and profile_id not in seen:
                raise ValueError(
                    f"resource profile {profile_id} was never declared: declare it (in the same "
                    "request or an earlier one) before asking for executors of it"
                )
