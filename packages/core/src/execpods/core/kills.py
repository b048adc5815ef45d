"""Graceful kills: what `KillExecutors` does, as Spark's `KubernetesClusterSchedulerBackend`.

The executors' pods are deleted with their own grace period, so each executor gets SIGTERM and
time to finish (its pod shows as Terminating meanwhile): decommission, block migration and the
preStop hook get the whole `terminationGracePeriodSeconds`. After
`spark.kubernetes.dynamicAllocation.deleteGracePeriod`, as Spark's `doKillExecutors` does, those
still Running are deleted again, plainly: a pod whose delete was lost goes then, and one already
Terminating keeps its own grace (Spark never force-deletes; the kubelet kills at the grace's
end). Spark deletes nothing before that period (its driver has told the executor to stop); a
driver in any language has no other way to stop its executor, so the first delete is at once.
The lifecycle manager is told
first which executors the driver killed, so that it reports each of their ends to the driver once,
as the driver's doing rather than a failure. Before they are deleted, the pods get Spark's
decommission label and deletion-cost annotation when those are set: the features hear each chunk
(`Feature.killing`, `decommission.py`) before its pods are deleted.

A kill names at most `KILL_CHUNK` ids a request (a label selector's `in (...)` set must fit an API
server's request line: about 9,000 ids overflow one), and logs name a few ids and count the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from execpods.core.errors import PodOperationError
from execpods.core.idlists import summarize_ids
from execpods.core.ports import PodOperations, PodSelector
from execpods.core.scheduling import Scheduler
from execpods.core.settings import CoreSettings

logger = logging.getLogger(__name__)

KILL_CHUNK = 500
"""Most executor ids one delete request names."""


class GracefulKiller:
    """Deletes executors' pods gracefully, then again, plainly, those still running later."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        pod_operations: PodOperations,
        scheduler: Scheduler,
        on_killed: Callable[[Collection[int]], None],
        before_delete: Callable[[PodSelector], None] = lambda _selector: None,
    ) -> None:
        self._settings = settings
        self._pods = pod_operations
        self._scheduler = scheduler
        self._on_killed = on_killed
        self._before_delete = before_delete
        """Hears each chunk before its pods are deleted (the features' `killing`)."""

    def kill(self, app_id: str, executor_ids: Collection[int]) -> int:
        """Delete these executors' pods; returns how many the API deleted."""
        ids = sorted(set(executor_ids))
        if not ids:
            return 0
        self._on_killed(ids)
        deleted = 0
        for start in range(0, len(ids), KILL_CHUNK):
            chunk = ids[start : start + KILL_CHUNK]
            selector = PodSelector.executors_of(self._settings.labels, app_id, chunk)
            self._before_delete(selector)  # decommission label, deletion cost: before they go
            try:
                deleted += self._pods.delete_by_selector(selector)
            except PodOperationError:
                if start:
                    logger.warning(
                        "Killing executors of application %s failed after %d of %d ids (%d pods "
                        "deleted); executors %s were not deleted.",
                        app_id,
                        start,
                        len(ids),
                        deleted,
                        summarize_ids(ids[start:]),
                    )
                raise
            self._schedule_follow_up(selector.running(), len(chunk))
        # The sidecar logs the kill itself at INFO (one line per decision); this adds the plan.
        logger.debug(
            "Deleted %d pods of executors %s killed by the driver; those still running and not "
            "being deleted in %gs will be deleted again.",
            deleted,
            summarize_ids(ids),
            self._settings.delete_grace_period,
        )
        return deleted

    def _schedule_follow_up(self, running: PodSelector, killed: int) -> None:
        self._scheduler.schedule(
            self._settings.delete_grace_period, lambda: self._follow_up(running, killed)
        )

    def _follow_up(self, running: PodSelector, killed: int) -> None:
        """Spark's `KubernetesClusterSchedulerBackend.doKillExecutors` follow-up: a plain delete
        of the killed executors' pods still Running, each with its own grace period."""
        try:
            still = [pod for pod in self._pods.list(running) if pod.deletion_timestamp is None]
            if not still:
                return  # gone, or Terminating within their own grace: nothing to cut short
            self._pods.delete_by_selector(running)
        except PodOperationError as error:
            logger.warning("Could not delete killed executors' pods again: %s", error)
            return
        logger.info(
            "Deleted again %d pods (of %d killed) still running, not being deleted, after "
            "spark.kubernetes.dynamicAllocation.deleteGracePeriod (%gs): %s",
            len(still),
            killed,
            self._settings.delete_grace_period,
            summarize_ids(sorted(pod.name for pod in still)),
        )
