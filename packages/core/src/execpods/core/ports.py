"""The Protocols the core needs from the world, and the small values that cross them.

The adapter implements `PodOperations` and `ExecutorPodBuilder` over a real API server; tests use
`execpods.core.testing`'s in-memory implementations of the same Protocols; the sidecar implements
`DriverView` for a remote driver.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from execpods.core.labels import ExecutorLabels
from execpods.core.pods import ExecutorPod, PodManifest

UNKNOWN_EXIT_CODE = -1
DEFAULT_RESOURCE_PROFILE_ID = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSelector:
    """Which pods an operation applies to: label equalities, `key in (...)` sets, and a phase.

    It renders to the API's label and field selector strings, and can match a pod in memory, so a
    fake and the real API agree on what a selector means.
    """

    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    label_in: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    label_not: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """`key!=value` clauses (a pod without the label matches, as in the API)."""
    phase: str | None = None

    @classmethod
    def executors_of(
        cls, labels: ExecutorLabels, app_id: str, executor_ids: Iterable[int] | None = None
    ) -> PodSelector:
        """The executor pods of `app_id`; only those with `executor_ids` when given."""
        if executor_ids is None:
            return cls(labels=labels.for_app(app_id))
        ids = frozenset(str(i) for i in executor_ids)
        return cls(labels=labels.for_app(app_id), label_in={labels.executor_id: ids})

    @classmethod
    def active_executors_of(cls, labels: ExecutorLabels, app_id: str) -> PodSelector:
        """The executor pods of `app_id` not labelled inactive: what the watch and poll follow."""
        return cls(labels=labels.for_app(app_id), label_not={labels.inactive: "true"})

    def running(self) -> PodSelector:
        """The same pods, only those in phase Running."""
        return PodSelector(
            labels=self.labels, label_in=self.label_in, label_not=self.label_not, phase="Running"
        )

    def label_selector(self) -> str:
        parts = [f"{key}={value}" for key, value in self.labels.items()]
        for key, values in self.label_in.items():
            parts.append(f"{key} in ({','.join(sorted(values))})")
        parts.extend(f"{key}!={value}" for key, value in self.label_not.items())
        return ",".join(parts)

    def field_selector(self) -> str | None:
        return None if self.phase is None else f"status.phase={self.phase}"

    def matches(self, pod: ExecutorPod) -> bool:
        if any(pod.labels.get(key) != value for key, value in self.labels.items()):
            return False
        if any(pod.labels.get(key) not in values for key, values in self.label_in.items()):
            return False
        if any(pod.labels.get(key) == value for key, value in self.label_not.items()):
            return False
        return self.phase is None or pod.phase == self.phase


class PodOperations(Protocol):
    """What the reconcilers ask of the API server. Failures raise `PodOperationError`s."""

    def create(self, manifest: PodManifest) -> None:
        """Create one pod."""

    def delete(self, name: str) -> None:
        """Delete one pod by name; a pod that is already gone is not an error."""

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        """Delete every matching pod; returns how many the API said it deleted.

        Without `grace_period_seconds` each pod gets its own grace period; 0 deletes at once.
        """

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        """Set labels on one pod (a merge: other labels stay)."""

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        """The matching pods (malformed ones are skipped with a warning)."""


class ExecutorPodBuilder(Protocol):
    """Makes the pod manifest for a new executor."""

    def build(
        self,
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID,
    ) -> PodManifest:
        """The manifest of executor `executor_id` of `app_id`, labelled as an executor."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorExited:
    """Why an executor is gone, as the driver is told (Spark's `ExecutorExited`)."""

    exit_code: int
    exit_caused_by_app: bool
    message: str
    killed_by_driver: bool = False
    """The driver asked for this executor to go (KillExecutors): expected, never a failure."""


class DriverView(Protocol):
    """What the lifecycle manager asks of the driver (Spark asks its scheduler backend)."""

    def executor_ids(self) -> Collection[int]:
        """The executors the driver currently believes it has."""

    def remove_executor(self, executor_id: int, reason: ExecutorExited) -> None:
        """Tell the driver an executor is gone, and why."""

    def is_executor_active(self, executor_id: int) -> bool:
        """Whether the driver still counts on this executor (it did not ask for it to go)."""

    def registration_times(self) -> Mapping[int, float]:
        """When each known executor registered with the driver (wall-clock seconds)."""

    def application_failed(self, message: str) -> None:
        """Too many executors failed: the application should fail (called once, with why)."""


class SnapshotSource(Protocol):
    """Something that feeds the store: the watch or the poll."""

    def start(self, app_id: str) -> None: ...

    def stop(self) -> None: ...
