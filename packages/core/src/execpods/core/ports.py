"""Every Protocol of the core (its ports), and the small values that cross them.

The adapter implements `PodOperations` and `ExecutorPodBuilder` over a real API server and feeds
a `SnapshotsWriter` from its `SnapshotSource`s; the reconcilers and the sidecar's streams read a
`SnapshotsReader`; the sidecar implements `DriverView` and `LifecycleObserver` for a remote
driver; `Clock` and `Scheduler` inject time and threads. Tests use `execpods.core.testing`'s
in-memory implementations of the same Protocols. The implementations live next to what uses
them (`clock`, `scheduling`, `store`); only the contracts live here, so a reader finds every
seam of the core in one module.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from execpods.core.idlists import summarize_ids
from execpods.core.labels import ExecutorLabels
from execpods.core.pods import ExecutorPod, PodManifest
from execpods.core.snapshot import ExecutorPodsSnapshot

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

    def describe(self) -> str:
        """The label selector with long `in (...)` sets summarised: for messages and logs."""
        parts = [f"{key}={value}" for key, value in self.labels.items()]
        for key, values in self.label_in.items():
            ordered = sorted(values, key=lambda v: (len(v), v))
            parts.append(f"{key} in ({summarize_ids(ordered)})")
        described = ",".join(parts)
        return described if self.phase is None else f"{described} with status.phase={self.phase}"

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

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        """Set annotations on one pod (a merge: other annotations stay)."""

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        """The matching pods (malformed ones are skipped with a warning)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodDecisions:
    """What the core decided about one new executor's pod, for the builder to write.

    The core never edits a manifest: only the adapter knows a pod's shape, so the features decide
    (`features.py`) and the `ExecutorPodBuilder` writes these fields as Kubernetes spells them.
    """

    cores: int | None = None
    """Cores the executor announces (`SPARK_EXECUTOR_CORES`) instead of its profile's: OOM
    recovery mode. Its CPU request stays the profile's."""
    avoid_nodes: frozenset[str] = frozenset()
    """Nodes the pod must not run on (bad-node avoidance): a required node anti-affinity on the
    hostname, joined to every node selector term the pod already has."""
    claims: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Claims to reuse: the name of a claim the pod would make -> an existing claim of the
    application its volume mounts instead."""

    def joined(self, other: PodDecisions) -> PodDecisions:
        """Both decisions: the nodes of both avoided, both claim maps, the later cores."""
        if other == NO_DECISIONS:
            return self
        return PodDecisions(
            cores=other.cores if other.cores is not None else self.cores,
            avoid_nodes=self.avoid_nodes | other.avoid_nodes,
            claims=MappingProxyType({**self.claims, **other.claims}),
        )


NO_DECISIONS = PodDecisions()


class ExecutorPodBuilder(Protocol):
    """Makes the pod manifest for a new executor, with what the core decided about it."""

    def build(
        self,
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID,
        decisions: PodDecisions = NO_DECISIONS,
    ) -> PodManifest:
        """The manifest of executor `executor_id` of `app_id`, labelled as an executor, with
        every field of `decisions` written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorExited:
    """Why an executor is gone, as the driver is told (Spark's `ExecutorExited`)."""

    exit_code: int
    exit_caused_by_app: bool
    message: str
    killed_by_driver: bool = False
    """The driver asked for this executor to go (KillExecutors): expected, never a failure."""
    pod_deleted: bool = False
    """The executor's pod was deleted (Spark's `PodDeleted`: by a user, a drain, the framework),
    whatever its exit code: a SIGKILL at the end of its grace period says nothing of memory."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorRemoval:
    """One removal the lifecycle manager decided: which executor, why, and on which snapshot."""

    executor_id: int
    reason: ExecutorExited
    snapshot_serial: int = 0
    """Serial of the snapshot the decision was made on (0: none). A stream sends the removal only
    once it has sent that snapshot or a later one, so a driver never hears that an executor is
    gone before it can see why."""


class RoundObserver(Protocol):
    """Hears each lifecycle round before its decisions (the sidecar's driver view infers the
    running executors from the very snapshots the manager works on)."""

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """A round begins on these snapshots, before any decision is made on them."""


class LifecycleObserver(Protocol):
    """What the lifecycle manager reports of its work, beyond what it tells the `DriverView`.

    Both calls come on the lifecycle manager's thread, in order; an observer that fails is logged
    and does not stop the round.
    """

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """A round begins on these snapshots, before any decision is made on them."""

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        """The manager decided this executor is gone and has told the driver."""

    def application_failed(self, message: str) -> None:
        """Too many executors failed (`ExecutorFailureTracker`): allocation stopped, and the
        application should fail; called once, with why."""


class ExecutorIdLedger(Protocol):
    """Where the highest executor id ever reserved for an application outlives the process.

    A restarted sidecar must never issue an id again, even when every pod that carried it is
    gone; the pods alone cannot tell. The allocator reserves ids in blocks through this port
    *before* it uses any of them, and reads the mark back at start-up. The adapter keeps it in the
    cluster; `execpods.core.testing.InMemoryIdLedger` is the same contract in memory.
    """

    @property
    def location(self) -> str:
        """Where the mark is kept, for messages and logs that name the object."""

    def highest_reserved(self) -> int:
        """The mark stored now (0 when there is none); raises `LedgerMarkInvalid` when it holds
        something that is no executor id, and `PodOperationError` when it cannot be read. Each
        read is the truth of the moment: the mark may have gone down (deleted, restored from an
        older backup) since the last write."""

    def reserve_through(self, executor_id: int) -> None:
        """Record that ids up to `executor_id` may be in use; it never lowers the mark, and a
        stored value that is no executor id is replaced. Raises `PodOperationError` when the
        mark cannot be written: no id above the old mark may then be issued."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A PersistentVolumeClaim of the application, as listed."""

    name: str
    storage_class: str | None = None
    size: str | None = None
    created_at: float | None = None
    """Wall-clock seconds of its creation timestamp."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NeededClaim:
    """A claim a new executor's pod names and that must be made for it (an OnDemand volume's).

    `manifest` is the adapter's, handed back to `ClaimOperations.create_claim` unread: the core
    decides on the name, storage class and size only."""

    name: str
    storage_class: str | None = None
    size: str | None = None
    manifest: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))


class ClaimOperations(Protocol):
    """The executors' claims over the API: what a new pod needs, and the claim calls.

    Failures raise `PodOperationError`s."""

    @property
    def declares_on_demand(self) -> bool:
        """The settings declare OnDemand volumes (claims may exist from before a restart)."""

    @property
    def has_driver_pod(self) -> bool:
        """A driver pod exists that can own the claims."""

    def claims_for(
        self, *, executor_id: int, app_id: str, resource_profile_id: int
    ) -> list[NeededClaim]:
        """The claims the pod of this executor names and needs made; none without OnDemand
        volumes."""

    def list_claims(self, app_id: str) -> list[Claim]:
        """The application's claims (labelled with its id)."""

    def create_claim(self, claim: NeededClaim, *, owner_pod: str | None) -> None:
        """Make one claim, owned by the pod named `owner_pod` (None: by the driver pod)."""

    def delete_claims(self, app_id: str) -> int:
        """Delete every claim of the application; returns how many."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryUse:
    """One executor container's memory limit and use (bytes), from the metrics API."""

    pod: str
    container: str
    limit_bytes: int
    usage_bytes: int


class ResizeOperations(Protocol):
    """In-place resize of executors' memory over the API (the adapter's `KubernetesResizer`).

    Failures raise `PodOperationError`s."""

    def memory_uses(self, app_id: str) -> list[MemoryUse]:
        """The executor containers (of pods not labelled inactive) with a memory limit and a
        reported use; raises `PodOperationError` when they cannot be read."""

    def resize_memory(self, pod: str, container: str, memory_bytes: int) -> None:
        """Set the container's memory limit and request through the `resize` subresource."""


# Time and threads.


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards: for timeouts and intervals."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch: for timestamps people and other processes read."""


Action = Callable[[], None]


class Cancellable(Protocol):
    def cancel(self) -> None:
        """Stop the task from running again; a run in progress finishes."""


class Scheduler(Protocol):
    def submit(self, action: Action) -> Cancellable:
        """Run `action` once, as soon as a worker is free."""

    def schedule(self, delay: float, action: Action) -> Cancellable:
        """Run `action` once, `delay` seconds from now."""

    def schedule_with_fixed_delay(
        self, initial_delay: float, delay: float, action: Action
    ) -> Cancellable:
        """Run `action` after `initial_delay`, then `delay` seconds after each run ends."""

    def shutdown(self) -> None:
        """Cancel everything not yet started and release the workers."""


# The snapshot store, split by who uses which side.

SnapshotsCallback = Callable[[Sequence[ExecutorPodsSnapshot]], None]


class Subscription(Protocol):
    def cancel(self) -> None:
        """Stop deliveries to this subscriber (a delivery in progress finishes)."""


@dataclass(frozen=True, slots=True)
class ListMark:
    """How many writes a store had applied when a source was about to ask for a full list.

    A list is answered as of some moment after it was asked for, and reaches the store later
    still: updates the store applied after the mark may be newer than the list. Counting the
    store's own writes tells which, for any API server; comparing resourceVersions would not,
    as the API makes them opaque strings.
    """

    writes: int


class SnapshotsWriter(Protocol):
    """The store as the sources (the watch, the poll) see it: they only push pods in."""

    def update_pod(self, pod: ExecutorPod) -> None:
        """Apply one observed pod state (a watch event) to the current snapshot: a delta."""

    def begin_list(self) -> ListMark:
        """The mark to take just before asking for a full list, for `replace_snapshot(since=)`."""

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        """Replace the current snapshot with a full list of the application's executor pods.

        `since` is the mark taken before the list was asked for, by a source whose list runs
        beside another source's updates (the poll beside the watch). The list may then be older
        than those updates, so each executor updated after the mark keeps its updated state (a
        pod the watch added stays, one it deleted stays deleted), and a list overtaken by another
        full list applied after the mark is not applied at all. Without `since` the list replaces
        everything: for a source that lists and updates in turn (the watch)."""


class SnapshotsReader(Protocol):
    """The store as the reconcilers and the streams see it: they subscribe and read."""

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        """Deliver the current snapshot, then every `interval` seconds the snapshots since."""

    def notify_subscribers(self) -> None:
        """Deliver to every subscriber now, without waiting for its interval."""

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot: ...


class SnapshotsStore(SnapshotsWriter, SnapshotsReader, Protocol):
    """Both sides, and the end of all deliveries: what the composition root owns."""

    def stop(self) -> None:
        """Stop all deliveries."""


class SnapshotSource(Protocol):
    """Something that feeds a `SnapshotsWriter`: the watch or the poll."""

    def start(self, app_id: str) -> None: ...

    def stop(self) -> None: ...
