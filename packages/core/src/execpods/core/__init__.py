"""execpods.core: the pure, typed heart of execpods.

Pod states, immutable snapshots, the snapshot store, the allocator and lifecycle reconcilers, and
the Protocols (pod operations, pod builder, driver view, clock, scheduler) they need. No I/O, no
client libraries, and no threads until a `ThreadScheduler` is given work.
"""

from execpods.core.allocation import ExecutorCounts, executors_to_request, split_slots
from execpods.core.allocator import AllocatorStats, ExecutorPodsAllocator
from execpods.core.backend import (
    AllocationCounts,
    ExecutorPodsBackend,
    LifecycleFanout,
    ShutdownReport,
)
from execpods.core.clock import Clock, ManualClock, SystemClock
from execpods.core.compose import SourcesFactory, compose_backend, no_sources
from execpods.core.creation import (
    AllocatorNotice,
    CreateRunner,
    NoticeKind,
    SerialRunner,
    ThreadPoolRunner,
)
from execpods.core.errors import (
    ApiThrottled,
    ApiUnavailable,
    ExecpodsError,
    PodAdmissionRejected,
    PodConflict,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    SettingsError,
)
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.idlists import INT64_MAX, clip, summarize_ids
from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.lifecycle import ExecutorPodsLifecycleManager, describe_exit_code, exit_reason
from execpods.core.pods import (
    EXECUTOR_CONTAINER_NAME,
    ContainerRunning,
    ContainerState,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPod,
    PodManifest,
)
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    UNKNOWN_EXIT_CODE,
    DriverView,
    ExecutorExited,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    ExecutorRemoval,
    LifecycleObserver,
    PodOperations,
    PodSelector,
    SnapshotSource,
    SnapshotsReader,
    SnapshotsWriter,
)
from execpods.core.profiles import ProfileConflict, ResourceProfile, ResourceProfiles
from execpods.core.scheduling import (
    Cancellable,
    DeterministicScheduler,
    Scheduler,
    ThreadScheduler,
)
from execpods.core.settingkit import SettingsBase, SettingSpec, parse_duration, unknown_keys
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import (
    DEFAULT_CLASSIFIER,
    ExecutorState,
    ObservedPod,
    PodClassifier,
    classify,
)
from execpods.core.store import (
    ScheduledSnapshotsStore,
    SnapshotsCallback,
    SnapshotsStore,
    Subscription,
)
from execpods.core.totals import TotalsRequest

__all__ = [
    "DEFAULT_CLASSIFIER",
    "ExecutorFailureTracker",
    "PodClassifier",
    "describe_exit_code",
    "AllocatorNotice",
    "AllocatorStats",
    "CreateRunner",
    "NoticeKind",
    "ProfileConflict",
    "ResourceProfile",
    "ResourceProfiles",
    "SerialRunner",
    "ThreadPoolRunner",
    "split_slots",
    "DEFAULT_RESOURCE_PROFILE_ID",
    "EXECUTOR_CONTAINER_NAME",
    "SPARK_LABELS",
    "UNKNOWN_EXIT_CODE",
    "AllocationCounts",
    "ApiThrottled",
    "ApiUnavailable",
    "Cancellable",
    "INT64_MAX",
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
    "ExecutorCounts",
    "ExecutorExited",
    "ExecutorLabels",
    "ExecutorPod",
    "ExecutorIdLedger",
    "ExecutorPodBuilder",
    "ObservedPod",
    "ExecutorPodsAllocator",
    "ExecutorPodsBackend",
    "ExecutorPodsLifecycleManager",
    "ExecutorPodsSnapshot",
    "ExecutorRemoval",
    "LifecycleFanout",
    "LifecycleObserver",
    "ManualClock",
    "PodAdmissionRejected",
    "PodConflict",
    "PodForbidden",
    "PodInvalid",
    "PodManifest",
    "PodNotFound",
    "PodOperationError",
    "PodOperations",
    "PodSelector",
    "ExecutorState",
    "Scheduler",
    "SettingSpec",
    "SettingsBase",
    "ShutdownReport",
    "SettingsError",
    "SnapshotSource",
    "SnapshotsCallback",
    "SnapshotsReader",
    "SnapshotsStore",
    "ScheduledSnapshotsStore",
    "SnapshotsWriter",
    "SourcesFactory",
    "Subscription",
    "TotalsRequest",
    "SystemClock",
    "ThreadScheduler",
    "classify",
    "clip",
    "compose_backend",
    "executors_to_request",
    "exit_reason",
    "no_sources",
    "parse_duration",
    "summarize_ids",
    "unknown_keys",
]
