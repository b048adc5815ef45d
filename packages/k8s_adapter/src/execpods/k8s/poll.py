"""The poll source: every `apiPollingInterval`, list the executor pods, replace the snapshot.

This is what makes the system level-triggered: whatever the watch missed, the next full list
repairs. It runs on a core `Scheduler`, so tests drive it with a `DeterministicScheduler` (as
SPARK-24248's `ExecutorPodsPollingSnapshotSourceSuite` does); by default it owns a one-thread
`ThreadScheduler` named after the app.

With `spark.kubernetes.executor.enablePollingWithResourceVersion` it lists with
`resourceVersion=0`, which the API server answers from its watch cache instead of a quorum read
from etcd: cheaper, but possibly stale, and a cache behind another API server can even be older
than the previous answer. A cached list older than the newest version the sidecar has seen (the
last list applied, or the watch's) is therefore not applied (it would move the snapshot back in
time): the poll lists again at once without the cache, a quorum read, which is never stale.

A quorum list older than that newest version means the API server itself went back in time (its
state restored from a backup, etcd replaced): it is applied, and the watch is told to list again
(`on_went_back`) instead of waiting, silent, for the server's versions to pass the old ones.

The watch runs on its own thread and may apply events newer than a list while the list is in
flight (the ADDED of a pod created just after the server read the list). The poll therefore takes
the store's mark before each list and hands it back with the list: pods the watch wrote after the
mark keep the watch's state, the list supplies the rest, and a list overtaken by the watch's own
re-list is dropped (core `freshness`). Applied whole, the list would hide those pods, and the
allocator would create them again.
Pods labelled `spark-exec-inactive=true` are left out, as Spark does: they are finished and
reported, and kept only for inspection. With `warnings`, each poll also reads the pods'
FailedMount warnings (`warnings.py`), which both sources attach to pods.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from execpods.core import (
    Cancellable,
    CoreSettings,
    ExecutorPod,
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
        newest_version: Callable[[], str | None] | None = None,
        on_went_back: Callable[[], None] | None = None,
        warnings: PodWarnings | None = None,
    ) -> None:
        """`newest_version` is the newest resourceVersion another source saw (the watch's);
        `on_went_back` is told when a quorum list is older than it (the watch's `relist`)."""
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
        self._newest_version = newest_version
        self._on_went_back = on_went_back
        self._scheduler = scheduler
        self._owns_scheduler = scheduler is None
        self._lock = threading.Lock()
        self._task: Cancellable | None = None
        self._started = False
        self.polls = 0
        self.failures = 0
        self.stale = 0
        self.went_back = 0
        """Quorum lists older than the newest version seen: the server's state went back."""

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
        if self._warnings is not None:
            # Before the list, never between it and the store: a list applied late is older
            # than what the watch has told since, and would hide the pods created meanwhile.
            self._warnings.refresh(self._operations.gateway.list_events)
        # Before the list: a quorum list taken after it is at least this new, unless the
        # server went back (the watch may pass the list's version meanwhile, legitimately).
        newest = self._newest()
        # Before the list too: the store's updates after this mark may be newer than the list.
        mark = self._store.begin_list()
        listed = self._list(selector, from_cache=self._from_cache)
        if listed is None:
            return
        pods, version = listed
        if _older(version, newest) and self._from_cache:
            self.stale += 1
            logger.info(
                "A cached list of executor pods is at resourceVersion %s, older than %s seen "
                "already; listing again without the cache.",
                version,
                newest,
            )
            mark = self._store.begin_list()
            listed = self._list(selector, from_cache=False)
            if listed is None:
                return
            pods, version = listed
        if _older(version, newest):
            self.went_back += 1
            logger.warning(
                "The API server's executor pods are at resourceVersion %s, older than %s seen "
                "before: its state went back (restored from a backup?). Taking this list as the "
                "truth and watching again from it.",
                version,
                newest,
            )
            if self._on_went_back is not None:
                self._on_went_back()
        self._last_version = _number(version)
        if self._warnings is not None:
            pods = self._warnings.annotate_all(pods)
        # The watch may have applied newer events while this list was in flight: the store
        # keeps those pods' watched states rather than this list's (see core `freshness`).
        self._store.replace_snapshot(pods, since=mark)

    def _list(
        self, selector: str, *, from_cache: bool
    ) -> tuple[list[ExecutorPod], str | None] | None:
        try:
            pods, version = self._operations.list_with_version(
                selector, resource_version="0" if from_cache else None
            )
        except PodOperationError as error:
            self.failures += 1
            logger.warning("Polling executor pods failed (%s); retrying next interval.", error)
            return None
        except Exception:
            self.failures += 1
            logger.exception("Polling executor pods failed; retrying next interval.")
            return None
        self.polls += 1
        return pods, version

    def _newest(self) -> int | None:
        """The newest resourceVersion seen: the last list applied, or the watch's."""
        other = _number(self._newest_version()) if self._newest_version is not None else None
        known = [v for v in (self._last_version, other) if v is not None]
        return max(known) if known else None

    def stop(self) -> None:
        with self._lock:
            task, self._task = self._task, None
            scheduler = self._scheduler
        if task is not None:
            task.cancel()
        if self._owns_scheduler and scheduler is not None:
            scheduler.shutdown()


def _number(version: str | None) -> int | None:
    """A resourceVersion as a number (None when absent or opaque: the API allows either)."""
    try:
        return int(version) if version else None
    except ValueError:
        return None


def _older(version: str | None, newest: int | None) -> bool:
    number = _number(version)
    return number is not None and newest is not None and number < newest
