"""OOM recovery mode (`spark.kubernetes.allocation.recoveryMode.enabled`), as Spark 4.2+.

Spark's backend, told an executor was lost with a message that mentions OOM, switches its
allocator into recovery mode (unless the property is explicitly false), and every executor pod it
builds from then on announces `max(1, ceil(spark.task.cpus))` cores in `SPARK_EXECUTOR_CORES`
instead of its profile's: each such executor runs a single task, so the resource-hungry tasks that
killed its predecessors survive the rest of the job. Set to true, the mode is on from the start;
set to false, never. The pod's CPU request stays the profile's: only what the executor announces
changes.

Here the lifecycle manager's removals play the part of Spark's loss reasons (the feature's
`removed` hook), and while the mode is on it decides each new pod's announced cores
(`PodDecisions.cores`, which the adapter's builder writes into the executor container's
environment). A driver in any language learns of the switch from an `AllocatorNotice` of kind
`RECOVERY_MODE` on its stream (`KIND_RECOVERY_MODE` over the contract), sent once, right after the
removal that caused it.
"""

from __future__ import annotations

import logging
import threading

from execpods.core.features import Feature, FeatureParts, NewExecutor
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    NO_DECISIONS,
    ExecutorRemoval,
    PodDecisions,
)

__all__ = ["OomRecoveryMode", "lost_to_oom", "plug"]

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


def plug(parts: FeatureParts) -> OomRecoveryMode | None:
    """The feature unless `spark.kubernetes.allocation.recoveryMode.enabled=false`."""
    settings = parts.settings
    if settings.recovery_mode_enabled is False:
        return None
    return OomRecoveryMode(
        enabled=settings.recovery_mode_enabled, cores=settings.recovery_cores, notices=parts.notices
    )


class OomRecoveryMode(Feature):
    """Whether executors created now are recovery-mode executors, and the switch that turns it on.

    `enabled` is the property: None (unset) switches on at the first OOM loss, True is on from
    the start, False never. `notices` hears the one notice sent when an OOM switches it on.
    """

    def __init__(self, *, enabled: bool | None, cores: int, notices: NoticeHub) -> None:
        self._enabled = enabled
        self.cores = cores
        self._notices = notices
        self._active = enabled is True
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self._active

    def shape(self, executor: NewExecutor) -> PodDecisions:
        """While the mode is on, the executor announces the recovery cores."""
        return PodDecisions(cores=self.cores) if self._active else NO_DECISIONS

    def removed(self, removal: ExecutorRemoval) -> None:
        if self._enabled is False or not lost_to_oom(removal):
            return
        with self._lock:
            if self._active:
                return
            self._active = True
        message = (
            f"Executor {removal.executor_id} was lost to OOM: recovery mode is on "
            "(spark.kubernetes.allocation.recoveryMode.enabled), executors created from now on "
            f"announce {self.cores} core(s) (SPARK_EXECUTOR_CORES) so that each runs one task "
            "at a time."
        )
        logger.warning(message)
        self._notices.notify(
            AllocatorNotice(
                kind=NoticeKind.RECOVERY_MODE,
                message=message,
                resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
                count=0,
            )
        )
