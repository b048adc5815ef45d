"""OOM recovery mode (`spark.kubernetes.allocation.recoveryMode.enabled`), as Spark 4.2+.

Spark's backend, told an executor was lost with a message that mentions OOM, switches its
allocator into recovery mode (unless the property is explicitly false), and every executor pod it
builds from then on announces `max(1, ceil(spark.task.cpus))` cores in `SPARK_EXECUTOR_CORES`
instead of its profile's: each such executor runs a single task, so the resource-hungry tasks that
killed its predecessors survive the rest of the job. Set to true, the mode is on from the start;
set to false, never. The pod's CPU request stays the profile's: only what the executor announces
changes.

Here the lifecycle manager's removals play the part of Spark's loss reasons (`OomRecoveryMode` is
a `LifecycleObserver`), and `RecoveryModePodBuilder` wraps any `ExecutorPodBuilder`. A driver in
any language learns of the switch from an `AllocatorNotice` of kind `RECOVERY_MODE` on its stream
(`KIND_RECOVERY_MODE` over the contract), sent once, right after the removal that caused it.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from execpods.core.creation import AllocatorNotice, NoticeKind
from execpods.core.pods import PodManifest
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    ExecutorPodBuilder,
    ExecutorRemoval,
)
from execpods.core.snapshot import ExecutorPodsSnapshot

logger = logging.getLogger(__name__)

OOM_MARKER = "OOM"
"""Spark's test: a loss reason whose message contains this switches recovery mode on."""

OOM_EXIT_CODES = frozenset({52, 137})
"""Exit codes Spark's descriptions call OOM: 52 "(JVM OOM)", 137 "(SIGKILL, possible container
OOM)"; execpods' own descriptions word them differently, so they are named here."""


def lost_to_oom(removal: ExecutorRemoval) -> bool:
    """Spark's rule (`KubernetesClusterSchedulerBackend.doRemoveExecutor`: the loss reason's
    message contains "OOM") on execpods' removals. Spark's message for a failed pod describes its
    exit code (52 "JVM OOM", 137 "possible container OOM") and its containers (OOMKilled); for a
    deleted pod (`PodDeleted`) it is always "deleted by a user or the framework", whatever the
    exit code, so a pod deleted by a user or a node drain, even one SIGKILLed (137) at the end
    of its grace period, never counts. Nor does an executor the driver killed itself."""
    reason = removal.reason
    if reason.killed_by_driver or reason.pod_deleted:
        return False
    return reason.exit_code in OOM_EXIT_CODES or OOM_MARKER in reason.message


CORES_ENV = "SPARK_EXECUTOR_CORES"


class OomRecoveryMode:
    """Whether executors created now are recovery-mode executors, and the switch that turns it on.

    `enabled` is the property: None (unset) switches on at the first OOM loss, True is on from
    the start, False never. `notify` hears the one notice sent when an OOM switches it on.
    """

    def __init__(
        self,
        *,
        enabled: bool | None,
        cores: int,
        notify: Callable[[AllocatorNotice], None] | None = None,
    ) -> None:
        self._enabled = enabled
        self.cores = cores
        self._notify = notify
        self._active = enabled is True
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._active

    def set_notify(self, notify: Callable[[AllocatorNotice], None]) -> None:
        self._notify = notify

    # LifecycleObserver

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Nothing to do at a round's start."""

    def application_failed(self, message: str) -> None:
        """Nothing to do: allocation has stopped for good."""

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        if self._enabled is False or not lost_to_oom(removal):
            return
        with self._lock:
            if self._active:
                return
            self._active = True
        message = (
            f"Executor {removal.executor_id} was lost to OOM: recovery mode is on "
            "(spark.kubernetes.allocation.recoveryMode.enabled), executors created from now on "
            f"announce {self.cores} core(s) ({CORES_ENV}) so that each runs one task at a time."
        )
        logger.warning(message)
        if self._notify is not None:
            self._notify(
                AllocatorNotice(
                    kind=NoticeKind.RECOVERY_MODE,
                    message=message,
                    resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
                    count=0,
                )
            )


def _executor_container(pod: dict[str, Any], container_name: str) -> dict[str, Any] | None:
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        return None
    named = [c for c in containers if isinstance(c, dict) and c.get("name") == container_name]
    first = containers[0]
    if named:
        return named[0]
    return first if isinstance(first, dict) else None


def with_recovery_cores(manifest: PodManifest, *, container_name: str, cores: int) -> PodManifest:
    """The manifest with the executor container's `SPARK_EXECUTOR_CORES` set to `cores`."""
    pod: dict[str, Any] = copy.deepcopy(dict(manifest))
    container = _executor_container(pod, container_name)
    if container is None:
        return pod
    env = [e for e in container.get("env") or [] if isinstance(e, dict)]
    kept = [e for e in env if e.get("name") != CORES_ENV]
    container["env"] = [*kept, {"name": CORES_ENV, "value": str(cores)}]
    return pod


class RecoveryModePodBuilder:
    """An `ExecutorPodBuilder` that makes recovery-mode executors while the mode is on."""

    def __init__(
        self, inner: ExecutorPodBuilder, mode: OomRecoveryMode, *, container_name: str
    ) -> None:
        self._inner = inner
        self._mode = mode
        self._container_name = container_name

    def build(
        self,
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID,
    ) -> PodManifest:
        manifest = self._inner.build(
            executor_id=executor_id, app_id=app_id, resource_profile_id=resource_profile_id
        )
        if not self._mode.active:
            return manifest
        return with_recovery_cores(
            manifest, container_name=self._container_name, cores=self._mode.cores
        )
