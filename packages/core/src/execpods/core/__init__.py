"""execpods.core: the pure, typed heart of execpods.

What a user of the core needs, and no more: the composition root (`compose_backend` and its
hooks) and the facade it returns (`ExecutorPodsBackend`, with `TotalsRequest` and `StreamHandle`);
the Protocols the world implements (pod operations, pod builder, sources, driver view, observers,
clock, scheduler) and the values that cross them (pods, snapshots, states, removals, positions,
profiles, notices, errors); the settings (their kit is `execpods.core.settingkit`); clocks and
schedulers. The parts only the composition root builds (the store, the allocator, the lifecycle
manager, the removal channel, the create runners) stay in their modules. No I/O, no client
libraries, and no threads until a `ThreadScheduler` is given work. `execpods.core.testing` has
in-memory implementations of the ports for tests.
"""

from execpods.core.backend import (
    AllocationCounts,
    ExecutorPodsBackend,
    ShutdownReport,
    StreamHandle,
)
from execpods.core.clock import Clock, ManualClock, SystemClock
from execpods.core.compose import (
    FeatureSettings,
    Machinery,
    Ports,
    RoundHook,
    SourcesFactory,
    StoreFactory,
    compose_backend,
    no_sources,
    scheduled_store,
)
from execpods.core.errors import (
    AdmissionPolicyRefused,
    ApiThrottled,
    ApiUnavailable,
    ExecpodsError,
    LedgerMarkInvalid,
    PodAdmissionRejected,
    PodConflict,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    QuotaExceeded,
    SettingsError,
)
from execpods.core.idlists import INT64_MAX, summarize_ids
from execpods.core.labels import SPARK_LABELS, ExecutorLabels, parse_executor_id
from execpods.core.notices import AllocatorNotice, NoticeKind
from execpods.core.pods import (
    EXECUTOR_CONTAINER_NAME,
    ContainerRunning,
    ContainerState,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPod,
    PodCondition,
    PodManifest,
    PodWarning,
)
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    UNKNOWN_EXIT_CODE,
    Cancellable,
    Claim,
    ClaimOperations,
    DriverView,
    ExecutorExited,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    ExecutorRemoval,
    LifecycleObserver,
    MemoryUse,
    NeededClaim,
    PodDecisions,
    PodOperations,
    PodSelector,
    ResizeOperations,
    RoundObserver,
    Scheduler,
    SnapshotsCallback,
    SnapshotSource,
    SnapshotsReader,
    SnapshotsStore,
    SnapshotsWriter,
    Subscription,
)
from execpods.core.profiles import ProfileConflict, ResourceProfile, ResourceProfiles
from execpods.core.progress import (
    CREDENTIALS_REFUSED,
    ProgressChange,
    ProgressMonitor,
    watch_threads,
)
from execpods.core.readiness import wait_for_driver_ready
from execpods.core.removals import InvalidPosition, NumberedRemoval, Position
from execpods.core.scheduling import DeterministicScheduler, ThreadScheduler
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState, ObservedPod, PodClassifier
from execpods.core.totals import TotalsRequest
from execpods.core.waiting import PendingReason, waiting_for

__all__ = [
    "CREDENTIALS_REFUSED",
    "DEFAULT_RESOURCE_PROFILE_ID",
    "INT64_MAX",
    "EXECUTOR_CONTAINER_NAME",
    "SPARK_LABELS",
    "UNKNOWN_EXIT_CODE",
    "AdmissionPolicyRefused",
    "AllocationCounts",
    "AllocatorNotice",
    "ApiThrottled",
    "ApiUnavailable",
    "Cancellable",
    "Claim",
    "ClaimOperations",
    "Clock",
    "ContainerRunning",
    "ContainerState",
    "ContainerStatus",
    "ContainerTerminated",
    "ContainerWaiting",
    "CoreSettings",
    "DeterministicScheduler",
    "DriverView",
    "ExecpodsError",
    "ExecutorExited",
    "ExecutorLabels",
    "ExecutorPod",
    "ExecutorIdLedger",
    "ExecutorPodBuilder",
    "ExecutorPodsBackend",
    "ExecutorPodsSnapshot",
    "ExecutorRemoval",
    "ExecutorState",
    "FeatureSettings",
    "InvalidPosition",
    "LifecycleObserver",
    "MemoryUse",
    "Machinery",
    "ManualClock",
    "NeededClaim",
    "NoticeKind",
    "NumberedRemoval",
    "ObservedPod",
    "PodAdmissionRejected",
    "PodClassifier",
    "PodCondition",
    "PodConflict",
    "PendingReason",
    "PodDecisions",
    "PodForbidden",
    "PodInvalid",
    "PodManifest",
    "PodNotFound",
    "LedgerMarkInvalid",
    "PodOperationError",
    "PodOperations",
    "PodSelector",
    "Ports",
    "PodWarning",
    "Position",
    "ProfileConflict",
    "QuotaExceeded",
    "ProgressChange",
    "ProgressMonitor",
    "ResizeOperations",
    "ResourceProfile",
    "ResourceProfiles",
    "RoundHook",
    "RoundObserver",
    "Scheduler",
    "SettingsError",
    "ShutdownReport",
    "SnapshotSource",
    "SnapshotsCallback",
    "SnapshotsReader",
    "SnapshotsStore",
    "SnapshotsWriter",
    "SourcesFactory",
    "StoreFactory",
    "StreamHandle",
    "Subscription",
    "SystemClock",
    "ThreadScheduler",
    "TotalsRequest",
    "compose_backend",
    "no_sources",
    "parse_executor_id",
    "scheduled_store",
    "summarize_ids",
    "wait_for_driver_ready",
    "waiting_for",
    "watch_threads",
]
