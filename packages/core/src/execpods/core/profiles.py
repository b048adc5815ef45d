"""Resource profiles: the executor shapes a driver declares, and which profile a pod belongs to.

Spark's stage-level scheduling lets a driver ask for executors of several shapes at once (cores,
memory, memory overhead, accelerators). Each shape is a resource profile with an integer id; profile
0 is the default one that the settings describe. A driver declares a profile once and then asks for
a total per profile; the allocator reconciles every profile on its own, and the pod builder shapes
each pod by its profile (requests and limits, and optionally the profile's own pod template).

A profile is immutable once declared (as in Spark, where a `ResourceProfile` never changes): a
second declaration of the same id must be identical: a driver cannot reshape running executors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from execpods.core.labels import ExecutorLabels
from execpods.core.pods import ExecutorPod, PodManifest
from execpods.core.ports import DEFAULT_RESOURCE_PROFILE_ID

logger = logging.getLogger(__name__)

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceProfile:
    """One executor shape. Unset fields fall back to the settings (the default profile's shape).

    `extra_resources` maps a Kubernetes extended resource name to a quantity (for example
    `{"nvidia.com/gpu": "1"}`); it goes into both the requests and the limits of the executor
    container, as Kubernetes requires for extended resources. `pod_template` is a pod manifest,
    parsed once where the profile is made (the adapter's `parse_pod_template` reads JSON or YAML),
    used instead of the settings' template for this profile's pods.
    """

    id: int
    cores: int | None = None
    memory_mib: int | None = None
    memory_overhead_mib: int | None = None
    extra_resources: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    pod_template: PodManifest | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.extra_resources, MappingProxyType):
            frozen = MappingProxyType(dict(self.extra_resources))
            object.__setattr__(self, "extra_resources", frozen)
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """Why this profile is unusable, or None."""
        if self.id < 0:
            return f"resource profile id {self.id} is negative"
        for name, value in (
            ("cores", self.cores),
            ("memory_mib", self.memory_mib),
            ("memory_overhead_mib", self.memory_overhead_mib),
        ):
            if value is not None and value <= 0:
                return f"resource profile {self.id}: {name}={value} must be positive"
        for resource, quantity in self.extra_resources.items():
            if not resource or not quantity:
                return (
                    f"resource profile {self.id}: extra resource {resource!r}={quantity!r} "
                    "needs a name and a quantity"
                )
        return None

    @property
    def pod_memory_mib(self) -> int | None:
        """Memory plus overhead when both are set (the container's request and limit)."""
        if self.memory_mib is None:
            return None
        return self.memory_mib + (self.memory_overhead_mib or 0)


DEFAULT_PROFILE = ResourceProfile(id=DEFAULT_RESOURCE_PROFILE_ID)


class ProfileConflict(ValueError):
    """A profile id was declared again with a different shape."""


class ResourceProfiles:
    """The declared profiles, shared by the allocator, the pod builder and the servicer.

    Thread-safe: the servicer declares from its event loop's worker while the allocator and the
    builder read from a scheduler thread. Reads take a snapshot of an immutable mapping.
    """

    def __init__(self, profiles: Iterable[ResourceProfile] = ()) -> None:
        self._lock = threading.Lock()
        self._profiles: Mapping[int, ResourceProfile] = MappingProxyType(
            {DEFAULT_RESOURCE_PROFILE_ID: DEFAULT_PROFILE}
        )
        self.declare(profiles)

    def declare(self, profiles: Iterable[ResourceProfile]) -> None:
        """Add profiles; all or nothing: a conflicting one raises `ProfileConflict`."""
        incoming = list(profiles)
        with self._lock:
            merged = dict(self._profiles)
            _check_declarable(merged, incoming)
            merged.update((profile.id, profile) for profile in incoming)
            self._profiles = MappingProxyType(merged)
        for profile in incoming:
            logger.debug("Resource profile %d declared: %s", profile.id, profile)

    def check_declarable(self, profiles: Iterable[ResourceProfile]) -> None:
        """Raise `ProfileConflict` as `declare` would, declaring nothing."""
        _check_declarable(self._profiles, list(profiles))

    def get(self, profile_id: int) -> ResourceProfile | None:
        return self._profiles.get(profile_id)

    def __contains__(self, profile_id: object) -> bool:
        return profile_id in self._profiles

    def ids(self) -> list[int]:
        return sorted(self._profiles)


def _check_declarable(
    known: Mapping[int, ResourceProfile], incoming: list[ResourceProfile]
) -> None:
    for profile in incoming:
        before = known.get(profile.id)
        if before is not None and before != profile and not _is_default_alias(before, profile):
            raise ProfileConflict(
                f"resource profile {profile.id} is already declared with another shape "
                "(profiles are immutable once declared)"
            )


def _is_default_alias(known: ResourceProfile, profile: ResourceProfile) -> bool:
    """The built-in default profile may be declared once with an explicit shape."""
    return known is DEFAULT_PROFILE


def profile_id_of(pod: ExecutorPod, labels: ExecutorLabels) -> int:
    """The resource profile a pod was created for; the default one when the label is missing."""
    raw = pod.labels.get(labels.resource_profile_id)
    if raw is None:
        return DEFAULT_RESOURCE_PROFILE_ID
    if raw.isascii() and raw.isdigit():
        return int(raw)
    logger.warning(
        "Pod %s has resource profile label %s=%r, not an integer; counting it in profile %d.",
        pod.name,
        labels.resource_profile_id,
        raw,
        DEFAULT_RESOURCE_PROFILE_ID,
    )
    return DEFAULT_RESOURCE_PROFILE_ID
