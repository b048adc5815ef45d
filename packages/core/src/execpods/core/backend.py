"""The backend: wires the store, reconcilers and sources together and runs them in order.

It is Spark's `KubernetesClusterSchedulerBackend` without the Spark: it starts in the seed's
order (target = initial executors, lifecycle manager, allocator, watch, poll) so that the
reconcilers are subscribed before the first events arrive, and stops in the seed's order (store,
watch, poll, delete the application's executor pods, close the client), each step tolerant of
the others failing so that a broken watch cannot leave pods behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import TypeVar

from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.kills import GracefulKiller
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.ports import DriverView, PodOperations, PodSelector, SnapshotSource
from execpods.core.scheduling import Scheduler
from execpods.core.settings import CoreSettings
from execpods.core.store import SnapshotsStore

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ExecutorPodsBackend:
    def __init__(
        self,
        *,
        app_id: str,
        settings: CoreSettings,
        store: SnapshotsStore,
        allocator: ExecutorPodsAllocator,
        lifecycle: ExecutorPodsLifecycleManager,
        pod_operations: PodOperations,
        driver: DriverView,
        request_scheduler: Scheduler,
        watch_source: SnapshotSource | None = None,
        poll_source: SnapshotSource | None = None,
        close_client: Callable[[], None] | None = None,
    ) -> None:
        self.app_id = app_id
        self._settings = settings
        self._store = store
        self._allocator = allocator
        self._lifecycle = lifecycle
        self._pods = pod_operations
        self._driver = driver
        self._requests = request_scheduler
        self._watch = watch_source
        self._poll = poll_source
        self._close_client = close_client
        self._killer = GracefulKiller(
            settings=settings,
            pod_operations=pod_operations,
            scheduler=request_scheduler,
            on_killed=lifecycle.executors_killed,
        )

    def start(self, *, initial_executors: int | None = None) -> None:
        initial = (
            self._settings.initial_executors if initial_executors is None else initial_executors
        )
        self._allocator.set_total_expected_executors(initial)
        self._lifecycle.start(self._driver)
        self._allocator.start(self.app_id)
        if self._watch is not None:
            self._watch.start(self.app_id)
        if self._poll is not None:
            self._poll.start(self.app_id)
        logger.info("Started allocating executors for application %s.", self.app_id)

    def request_total_executors(self, total: int) -> Future[None]:
        """Set the target asynchronously (as Spark's doRequestTotalExecutors)."""
        if total < 0:
            raise ValueError(f"the total number of executors must not be negative, not {total}")
        return self._run_async(lambda: self._allocator.set_total_expected_executors(total))

    def kill_executors(self, executor_ids: Collection[int]) -> Future[int]:
        """Delete these executors' pods gracefully (`GracefulKiller`); the events drive the rest."""
        ids = frozenset(executor_ids)
        if not ids:
            done: Future[int] = Future()
            done.set_result(0)
            return done
        return self._run_async(lambda: self._killer.kill(self.app_id, ids))

    def _run_async(self, action: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(action())
            except BaseException as error:
                future.set_exception(error)

        self._requests.submit(run)
        return future

    def stop(self) -> None:
        steps: list[tuple[str, Callable[[], object]]] = [
            ("stop the snapshots store", self._store.stop)
        ]
        if self._watch is not None:
            steps.append(("stop the watch", self._watch.stop))
        if self._poll is not None:
            steps.append(("stop the poll", self._poll.stop))
        if self._settings.delete_on_termination:
            steps.append(("delete the executor pods", self._delete_all_executors))
        steps.append(("stop the request scheduler", self._requests.shutdown))
        if self._close_client is not None:
            steps.append(("close the Kubernetes client", self._close_client))
        for what, step in steps:
            try:
                step()
            except Exception:
                logger.exception("Failed to %s while stopping; going on with the rest.", what)
        logger.info("Stopped allocating executors for application %s.", self.app_id)

    def _delete_all_executors(self) -> None:
        deleted = self._pods.delete_by_selector(
            PodSelector.executors_of(self._settings.labels, self.app_id)
        )
        logger.info("Deleted %d executor pods of application %s.", deleted, self.app_id)
