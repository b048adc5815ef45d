"""The poll source: every `apiPollingInterval`, list the executor pods, replace the snapshot.

This is what makes the system level-triggered: whatever the watch missed, the next full list
repairs. It runs on a core `Scheduler`, so tests drive it with a `DeterministicScheduler` (as
SPARK-24248's `ExecutorPodsPollingSnapshotSourceSuite` does); by default it owns a one-thread
`ThreadScheduler` named after the app.

With `spark.kubernetes.executor.enablePollingWithResourceVersion` it lists with
`resourceVersion=0`, which the API server answers from its watch cache instead of a quorum read
from etcd: cheaper, but possibly stale, and a cache behind another API server can even be older
than the previous answer. A list older than the last one applied is therefore ignored (it would
move the snapshot back in time). Pods labelled `spark-exec-inactive=true` are left out, as Spark
does: they are finished and reported, and kept only for inspection. With `warnings`, each poll
also reads the pods' FailedMount warnings (`warnings.py`), which both sources attach to pods.
"""

from __future__ import annotations

import logging
import threading

from execpods.core import (
    Cancellable,
    CoreSettings,
    PodOperationError,
    PodSelector,
    Scheduler,
    SnapshotsWriter,
    ThreadScheduler,
)
from execpods.k8s.operations import KubernetesPodOperations
from execpods.k8s.warnings import PodWarnings

logger = logging.getLogger(__name__)


class PollSource:
    """The core's `SnapshotSource` that resynchronises from a full list on a fixed delay."""

    def __init__(
        self,
        store: SnapshotsWriter,
        operations: KubernetesPodOperations,
        *,
        core_settings: CoreSettings | None = None,
        scheduler: Scheduler | None = None,
        warnings: PodWarnings | None = None,
    ) -> None:
        self._store = store
        self._operations = operations
        self._warnings = warnings
        """The pods' FailedMount warnings, read again each poll (None: not read)."""
        core = core_settings if core_settings is not None else CoreSettings()
        self._enabled = core.enable_api_polling
        self._interval = core.api_polling_interval
        self._labels = core.labels
        self._from_cache = core.enable_polling_with_resource_version
        self._last_version: int | None = None
        self._scheduler = scheduler
        self._owns_scheduler = scheduler is None
        self._lock = threading.Lock()
        self._task: Cancellable | None = None
        self._started = False
        self.polls = 0
        self.failures = 0
        self.stale = 0

    def start(self, app_id: str) -> None:
        with self._lock:
            if self._started:
                raise RuntimeError("Cannot start polling more than once.")
            self._started = True
            if not self._enabled:
                logger.info("Executor pod polling is disabled (enableApiPolling=false).")
                return
            if self._scheduler is None:
                self._scheduler = ThreadScheduler(workers=1, name=f"execpods-poll-{app_id}")
            logger.debug("Starting to check for executor pod state every %.3fs.", self._interval)
            selector = PodSelector.active_executors_of(self._labels, app_id).label_selector()
            self._task = self._scheduler.schedule_with_fixed_delay(
                self._interval, self._interval, lambda: self.poll_once(selector)
            )

    def poll_once(self, selector: str) -> None:
        """One resynchronisation; a failure is logged with its cause and the next poll retries."""
        logger.debug("Resynchronizing full executor pod state from Kubernetes.")
        try:
            pods, version = self._operations.list_with_version(
                selector, resource_version="0" if self._from_cache else None
            )
        except PodOperationError as error:
            self.failures += 1
            logger.warning("Polling executor pods failed (%s); retrying next interval.", error)
            return
        except Exception:
            self.failures += 1
            logger.exception("Polling executor pods failed; retrying next interval.")
            return
        self.polls += 1
        if self._is_stale(version):
            self.stale += 1
            logger.info(
                "Ignored a list of executor pods at resourceVersion %s, older than the last one "
                "applied (%s).",
                version,
                self._last_version,
            )
            return
        if self._warnings is not None:
            self._warnings.refresh(self._operations.gateway.list_events)
            pods = self._warnings.annotate_all(pods)
        self._store.replace_snapshot(pods)

    def _is_stale(self, version: str | None) -> bool:
        """True for a list older than the last one applied; remembers a newer one's version."""
        try:
            number = int(version) if version else None
        except ValueError:
            return False  # an opaque version: nothing to compare, as the API allows
        if number is None:
            return False
        if self._last_version is not None and number < self._last_version:
            return True
        self._last_version = number
        return False

    def stop(self) -> None:
        with self._lock:
            task, self._task = self._task, None
            scheduler = self._scheduler
        if task is not None:
            task.cancel()
        if self._owns_scheduler and scheduler is not None:
            scheduler.shutdown()
