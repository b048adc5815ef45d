"""The client's own view of the contract's values: plain frozen dataclasses, no protobuf.

A driver should not have to know how the wire spells things (an optional field's presence, an
enum's integer, a delta that only makes sense against the previous message), so every message that
reaches the caller is converted into one of these first. They are immutable so that snapshots can be
shared between the rebuilder and every consumer without copying.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


class ExecutorState(enum.Enum):
    """An executor pod's state, as the sidecar classified it (`ExecutorState` on the wire too).

    `UNKNOWN` also stands for a state this client does not know (an unspecified or newer value), so
    that a newer server never breaks an older driver.
    """

    PENDING = "pending"
    RUNNING = "running"
    TERMINATING = "terminating"
    """Being deleted while it still runs: shutting down gracefully, not gone yet (SPARK-31125)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"
    UNKNOWN = "unknown"

    @property
    def is_final(self) -> bool:
        """Succeeded, failed and deleted pods never come back: their executor is gone."""
        return self in _FINAL


_FINAL = frozenset({ExecutorState.SUCCEEDED, ExecutorState.FAILED, ExecutorState.DELETED})


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorView:
    """One executor's pod as of one snapshot. Empty strings mean "the API did not say"."""

    state: ExecutorState
    pod_name: str = ""
    phase: str = ""
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    node_name: str = ""
    pod_ip: str = ""
    container_reason: str = ""
    pending_reason: str = ""
    """Why a pending executor waits, the contract's `PendingReason` without its prefix:
    "unschedulable", "scheduling_gated", "image_pull", "container_config", "crash_loop",
    "failed_mount"; empty when it is not waiting for anything Kubernetes reports."""
    pending_message: str = ""
    """Kubernetes' own words for it ("Unschedulable: 0/3 nodes are available: ...")."""


def _empty_executors() -> Mapping[int, ExecutorView]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Every executor of the application as of one moment: always complete, never a delta.

    `was_full` tells whether the wire carried this snapshot in full (the stream's first snapshot, or
    one made from a full list of the pods) or as a delta the rebuilder overlaid on its predecessor;
    the content is complete either way. `full_snapshot_ts_ms` is the wall-clock time (ms since the
    epoch) of the full list it descends from, 0 if none.
    """

    executors: Mapping[int, ExecutorView] = field(default_factory=_empty_executors)
    full_snapshot_ts_ms: int = 0
    was_full: bool = True

    def __post_init__(self) -> None:
        # A read-only copy: the caller's dict must not be able to change a shared snapshot later.
        object.__setattr__(self, "executors", MappingProxyType(dict(self.executors)))

    def count(self, state: ExecutorState) -> int:
        """How many executors are in `state`."""
        return sum(1 for view in self.executors.values() if view.state is state)

    def ids_in(self, state: ExecutorState) -> frozenset[int]:
        """The ids of the executors in `state`."""
        return frozenset(i for i, view in self.executors.items() if view.state is state)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorRemoval:
    """The lifecycle manager decided this executor is gone, and why.

    `exit_code` is -1 when unknown (a pod that vanished); `exit_caused_by_app` is false when a user
    or the framework deleted the executor, or it went missing.
    """

    executor_id: int
    exit_code: int
    exit_caused_by_app: bool
    message: str
    killed_by_driver: bool = False
    """The driver asked for it to go (`kill_executors`): expected, never a failure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamPosition:
    """Where a stream is in one sidecar process's removals: resume a stream from it.

    `incarnation` names the sidecar process; `sequence` is the number of the last removal sent.
    """

    incarnation: str
    sequence: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocatorNotice:
    """Something the allocator tells the driver: refused or throttled creates, the id cap, a
    bad node blocked or lifted, or allocation stalled and resumed.

    `kind` is the contract's `AllocatorNotice.Kind` without its prefix: "create_refused",
    "create_throttled", "create_failed", "allocation_maximum_reached", "node_blocked",
    "node_unblocked", "allocation_stalled" or "allocation_resumed" (`reason` says which stall:
    "IdLedgerUnreadable", "ThreadDied", "CredentialsRefused"...).
    """

    kind: str
    message: str
    resource_profile_id: int
    count: int
    retry_in_ms: int
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorProfile:
    """A resource profile to declare in `request_total` (the contract's `ResourceProfile`).

    Unset fields take the sidecar's settings; `pod_template` is a Pod manifest as JSON or YAML.
    """

    id: int
    cores: int = 0
    memory_mib: int = 0
    memory_overhead_mib: int = 0
    extra_resources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pod_template: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamUpdate:
    """One message of the snapshot stream, decoded: complete snapshots, oldest first, removals
    and allocator notices.

    `snapshots` may be empty when only removals or notices happened since the previous message.
    `position` is the stream's position after this message (None from a sidecar that does not
    send one); `resync` is true on the first message of a resumed stream that may have missed
    removals (the sidecar restarted, or the position fell out of its window): reconcile the
    executors you know with this update's full snapshot.
    """

    snapshots: tuple[Snapshot, ...] = ()
    removed: tuple[ExecutorRemoval, ...] = ()
    notices: tuple[AllocatorNotice, ...] = ()
    position: StreamPosition | None = None
    resync: bool = False
    application_failure: str = ""
    """Set once, when too many executors failed (`spark.executor.maxNumFailures`): the sidecar
    stopped allocating, and the application should fail; says why."""

    @property
    def latest(self) -> Snapshot | None:
        """The newest snapshot of this update, if it has any."""
        return self.snapshots[-1] if self.snapshots else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTotalResult:
    """The target now in force, and what the latest snapshot held when the request was taken."""

    total: int
    running: int
    pending: int
    profile_totals: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    """Every resource profile's target now in force, by profile id."""
