"""The driver as the lifecycle manager sees it, for a driver that lives on the other end of gRPC.

Spark's lifecycle manager asks its scheduler backend which executors exist and which are active,
and tells it when one is gone. Here the driver is remote, so the sidecar keeps that view itself:

- **Known executors.** By default an executor is known once the lifecycle manager has seen it
  *running* in a snapshot, until it is reported removed (an executor that never ran was never
  registered with a driver, so its vanishing pod is not news to the driver). The driver may add
  executors it registered with `UpdateDriverExecutors.registered`; with `explicit = true` the
  sidecar stops inferring, and the known executors are exactly those registered and not removed.
  Explicit mode is sticky: a later update without it does not switch inference back on.
- **Active executors.** Known executors the driver has not released
  (`UpdateDriverExecutors.released`): a released executor's exit is expected.
- **Removals.** Every removal the lifecycle manager decides is remembered forever (ids are never
  reused, so this is small), so a late snapshot cannot make a removed executor known again and have
  it reported twice; and it is handed to every listener (the open streams).

The view is fed the very batches the lifecycle manager works on, just before it works on them
(`ObservingLifecycleManager`), so "seen running" never runs ahead of the snapshot the manager
compares the known executors with: an executor cannot be reported missing because the view saw it
in a snapshot the manager had not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from execpods.core import (
    Clock,
    CoreSettings,
    ExecutorExited,
    ExecutorPodsLifecycleManager,
    ExecutorPodsSnapshot,
    PodOperations,
    PodState,
    SnapshotsStore,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Removal:
    """One removal decision of the lifecycle manager."""

    executor_id: int
    reason: ExecutorExited
    seen_serial: int = 0
    """Serial of the newest snapshot the lifecycle manager had seen when it decided this: a
    stream sends the removal only once it has that snapshot (or a later one) to send with it."""


RemovalListener = Callable[[Removal], None]


class InferredDriverView:
    """A thread-safe `DriverView` that infers the driver's executors unless told them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen_running: set[int] = set()
        self._registered: set[int] = set()
        self._released: set[int] = set()
        self._removed: set[int] = set()
        self._explicit = False
        self._listeners: list[RemovalListener] = []
        self._last: ExecutorPodsSnapshot | None = None

    # The lifecycle manager's side (DriverView).

    def executor_ids(self) -> Collection[int]:
        with self._lock:
            return self._known_locked()

    def is_executor_active(self, executor_id: int) -> bool:
        with self._lock:
            if executor_id in self._removed or executor_id in self._released:
                return False
            inferred = not self._explicit and executor_id in self._seen_running
            return inferred or executor_id in self._registered

    def remove_executor(self, executor_id: int, reason: ExecutorExited) -> None:
        with self._lock:
            self._removed.add(executor_id)
            self._seen_running.discard(executor_id)
            self._registered.discard(executor_id)
            self._released.discard(executor_id)
            listeners = list(self._listeners)
        logger.info(
            "Executor %d removed (exit code %d, caused by the app: %s).",
            executor_id,
            reason.exit_code,
            reason.exit_caused_by_app,
            extra={"executor_id": executor_id, "reason": reason.message},
        )
        last = self._last  # observe() and remove_executor() run on the lifecycle manager's thread
        removal = Removal(executor_id, reason, 0 if last is None else last.serial)
        for listener in listeners:
            try:
                listener(removal)
            except Exception:
                logger.exception("A removal listener failed on executor %d", executor_id)

    # The driver's side (UpdateDriverExecutors).

    def update(
        self, *, registered: Iterable[int], released: Iterable[int], explicit: bool
    ) -> list[int]:
        """Apply one update from the driver; returns the executors now known, sorted."""
        with self._lock:
            if explicit:
                self._explicit = True
            self._registered.update(i for i in registered if i not in self._removed)
            self._released.update(i for i in released if i not in self._removed)
            return sorted(self._known_locked())

    # Observation (the lifecycle manager's batches) and listeners (the streams).

    def observe(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Note the executors seen running, walking only what changed between snapshots."""
        newly_running: set[int] = set()
        for snapshot in snapshots:
            pods = snapshot.executor_pods
            changed = snapshot.changes_since(self._last)
            newly_running.update(
                i
                for i in (pods.keys() if changed is None else changed)
                if (state := pods.get(i)) is not None and state.state is PodState.RUNNING
            )
            self._last = snapshot
        if newly_running:
            with self._lock:
                self._seen_running.update(newly_running - self._removed)

    def add_listener(self, listener: RemovalListener) -> Callable[[], None]:
        """Call `listener` with every later removal; returns a function that unregisters it."""
        with self._lock:
            self._listeners = [*self._listeners, listener]

        def unregister() -> None:
            with self._lock:
                self._listeners = [x for x in self._listeners if x is not listener]

        return unregister

    @property
    def listener_count(self) -> int:
        """How many removal listeners (open streams) are registered."""
        with self._lock:
            return len(self._listeners)

    def _known_locked(self) -> set[int]:
        known = set(self._registered)
        if not self._explicit:
            known |= self._seen_running
        return known - self._removed


class ObservingLifecycleManager(ExecutorPodsLifecycleManager):
    """The core lifecycle manager, feeding each batch to the driver view before handling it."""

    def __init__(
        self,
        *,
        view: InferredDriverView,
        settings: CoreSettings,
        pod_operations: PodOperations,
        store: SnapshotsStore,
        clock: Clock,
    ) -> None:
        super().__init__(settings=settings, pod_operations=pod_operations, store=store, clock=clock)
        self._view = view

    def on_new_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        self._view.observe(snapshots)
        super().on_new_snapshots(snapshots)
