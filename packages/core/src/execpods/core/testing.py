"""Real, in-memory implementations of the core's ports, for tests of execpods and of your code.

These are not mocks: `InMemoryPodOperations` is a tiny pod registry that honours the same
`PodSelector` semantics as the API, `RecordingDriver` is a driver that remembers what it was told,
and `DeterministicSnapshotsStore` is SPARK-24248's test store, whose deliveries happen only when
the test calls `notify_subscribers()`. `compose_deterministic` assembles a backend over them
through the one composition root, and hands a test the parts it drives round by round.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TypeVar

from execpods.core.adaptive import API_RATE_CEILING
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.backend import ExecutorPodsBackend
from execpods.core.clock import ManualClock
from execpods.core.compose import FeatureSettings, Machinery, Ports, compose_backend
from execpods.core.creation import CreateRunner
from execpods.core.errors import LedgerMarkInvalid, PodConflict, PodOperationError
from execpods.core.features import FeatureSet
from execpods.core.freshness import WriteLog
from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.lifecycle import ExecutorPodsLifecycleManager
from execpods.core.pods import (
    EXECUTOR_CONTAINER_NAME,
    ContainerStatus,
    ContainerTerminated,
    ExecutorPod,
    PodManifest,
)
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    NO_DECISIONS,
    ClaimOperations,
    Clock,
    DriverView,
    ExecutorExited,
    ExecutorIdLedger,
    ExecutorPodBuilder,
    ExecutorRemoval,
    LifecycleObserver,
    ListMark,
    PodDecisions,
    PodOperations,
    PodSelector,
    ResizeOperations,
    Scheduler,
    SnapshotSource,
    SnapshotsStore,
    SnapshotsWriter,
)
from execpods.core.profiles import ResourceProfiles
from execpods.core.scheduling import DeterministicScheduler
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import DEFAULT_CLASSIFIER, PodClassifier
from execpods.core.store import SnapshotsCallback, Subscription

TEST_APP_ID = "spark-app-id"


class _Cancelled:
    def __init__(self, store: DeterministicSnapshotsStore, callback: SnapshotsCallback) -> None:
        self._store = store
        self._callback = callback

    def cancel(self) -> None:
        self._store._subscribers.remove(self._callback)


class DeterministicSnapshotsStore:
    """Spark's `DeterministicExecutorPodsSnapshotsStore` (SPARK-24248): one shared buffer,
    delivered on `notify_subscribers()`."""

    def __init__(
        self,
        *,
        labels: ExecutorLabels = SPARK_LABELS,
        clock_time: float = 0.0,
        classifier: PodClassifier = DEFAULT_CLASSIFIER,
        clock: Clock | None = None,
    ) -> None:
        self._labels = labels
        self._clock = clock
        self._classifier = classifier
        self._subscribers: list[SnapshotsCallback] = []
        self._buffer: list[ExecutorPodsSnapshot] = []
        self._current = ExecutorPodsSnapshot(labels=labels, classifier=classifier)
        self._writes = WriteLog()
        self.full_snapshot_time = clock_time
        self.stopped = False

    @property
    def current_snapshot(self) -> ExecutorPodsSnapshot:
        return self._current

    def add_subscriber(self, interval: float, callback: SnapshotsCallback) -> Subscription:
        self._subscribers.append(callback)
        return _Cancelled(self, callback)

    def update_pod(self, pod: ExecutorPod) -> None:
        updated = self._current.with_update(pod)
        if updated is not self._current:
            self._writes.updated(updated.changed_ids or ())
            self._current = updated
            self._buffer.append(updated)

    def begin_list(self) -> ListMark:
        return self._writes.mark()

    def replace_snapshot(
        self, pods: Iterable[ExecutorPod], *, since: ListMark | None = None
    ) -> None:
        listed = ExecutorPodsSnapshot.from_pods(
            pods,
            full_snapshot_ts=(
                self.full_snapshot_time if self._clock is None else self._clock.time()
            ),
            labels=self._labels,
            classifier=self._classifier,
        )
        snapshot = self._writes.full_list(listed, self._current, since)
        if snapshot is not None:
            self._current = snapshot
            self._buffer.append(snapshot)

    def notify_subscribers(self) -> None:
        batch, self._buffer = self._buffer, []
        for subscriber in list(self._subscribers):
            subscriber(batch)

    def stop(self) -> None:
        self.stopped = True


@dataclass(frozen=True, slots=True)
class DeleteCall:
    name: str | None = None
    selector: PodSelector | None = None
    grace_period_seconds: int | None = None


class InMemoryPodOperations:
    """A pod registry behind the `PodOperations` Protocol, recording every call.

    `fail_next_create` makes the next creates raise, to test how callers handle API refusals.
    """

    def __init__(self, *, namespace: str = "default") -> None:
        self.namespace = namespace
        self.pods: dict[str, ExecutorPod] = {}
        self.created: list[PodManifest] = []
        self.deletes: list[DeleteCall] = []
        self.patches: list[tuple[str, dict[str, str]]] = []
        self.annotation_patches: list[tuple[str, dict[str, str]]] = []
        self.create_errors: list[PodOperationError] = []
        self.delete_errors: list[PodOperationError] = []
        """Raised, first first, by the next deletes (by name or selector): a denied delete."""
        self._lock = threading.Lock()

    def fail_next_create(self, error: PodOperationError) -> None:
        self.create_errors.append(error)

    def create(self, manifest: PodManifest) -> None:
        with self._lock:
            if self.create_errors:
                raise self.create_errors.pop(0)
            metadata = manifest.get("metadata", {})
            name = str(metadata["name"])
            if name in self.pods:
                raise PodConflict(f'pods "{name}" already exists')
            self.created.append(manifest)
            self.pods[name] = ExecutorPod(
                name=name,
                namespace=str(metadata.get("namespace", self.namespace)),
                labels=dict(metadata.get("labels", {})),
                uid=f"uid-{name}",
                phase="Pending",
            )

    def fail_next_delete(self, error: PodOperationError) -> None:
        self.delete_errors.append(error)

    def delete(self, name: str) -> None:
        with self._lock:
            self.deletes.append(DeleteCall(name=name))
            if self.delete_errors:
                raise self.delete_errors.pop(0)
            self.pods.pop(name, None)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        with self._lock:
            self.deletes.append(
                DeleteCall(selector=selector, grace_period_seconds=grace_period_seconds)
            )
            if self.delete_errors:
                raise self.delete_errors.pop(0)
            doomed = [name for name, pod in self.pods.items() if selector.matches(pod)]
            for name in doomed:
                del self.pods[name]
            return len(doomed)

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        with self._lock:
            self.patches.append((name, dict(labels)))
            pod = self.pods.get(name)
            if pod is not None:
                self.pods[name] = replace(pod, labels={**pod.labels, **labels})

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        with self._lock:
            self.annotation_patches.append((name, dict(annotations)))

    def patches_of(self, name: str) -> int:
        return sum(1 for patched, _ in self.patches if patched == name)

    def deletes_of(self, name: str) -> int:
        return sum(1 for call in self.deletes if call.name == name)

    def created_executor_ids(self, labels: ExecutorLabels = SPARK_LABELS) -> list[int]:
        return [int(m["metadata"]["labels"][labels.executor_id]) for m in self.created]

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        with self._lock:
            return [pod for pod in self.pods.values() if selector.matches(pod)]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleExecutorPodBuilder:
    """A minimal executor pod: name, labels and one container; enough for the core's tests.

    It writes what the core decided as the adapter's builder does, in the fields tests read:
    `SPARK_EXECUTOR_CORES` (`cores`, else the decision's), the avoided nodes as a hostname
    `NotIn`, and one volume per claim named in `claim_volumes` (`{pod}` is the pod's name), with
    the reused claims swapped in."""

    labels: ExecutorLabels = SPARK_LABELS
    image: str = "spark:latest"
    namespace: str = "default"
    cores: int | None = None
    """`SPARK_EXECUTOR_CORES` of every pod (None: set only when a decision says so)."""
    claim_volumes: tuple[str, ...] = ()

    def build(
        self,
        *,
        executor_id: int,
        app_id: str,
        resource_profile_id: int = DEFAULT_RESOURCE_PROFILE_ID,
        decisions: PodDecisions = NO_DECISIONS,
    ) -> PodManifest:
        labels = self.labels.for_executor(app_id, executor_id)
        labels[self.labels.resource_profile_id] = str(resource_profile_id)
        name = f"{app_id}-exec-{executor_id}"
        container: dict[str, object] = {"name": "spark-kubernetes-executor", "image": self.image}
        cores = decisions.cores if decisions.cores is not None else self.cores
        if cores is not None:
            container["env"] = [{"name": "SPARK_EXECUTOR_CORES", "value": str(cores)}]
        spec: dict[str, object] = {"restartPolicy": "Never", "containers": [container]}
        if decisions.avoid_nodes:
            avoid = {
                "key": HOSTNAME_LABEL,
                "operator": "NotIn",
                "values": sorted(decisions.avoid_nodes),
            }
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [avoid]}]
                    }
                }
            }
        if self.claim_volumes:
            claims = [c.format(pod=name) for c in self.claim_volumes]
            spec["volumes"] = [
                {
                    "name": f"data-{i}",
                    "persistentVolumeClaim": {"claimName": decisions.claims.get(c, c)},
                }
                for i, c in enumerate(claims)
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "spec": spec,
        }


HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass
class RecordingDriver:
    """A driver that knows the executors it is given and records every removal notice."""

    known: set[int] = field(default_factory=set)
    active: set[int] = field(default_factory=set)
    removed: list[tuple[int, ExecutorExited]] = field(default_factory=list)
    registered_at: dict[int, float] = field(default_factory=dict)
    """Registration times of known executors; an executor not listed registered at time 0."""

    def executor_ids(self) -> Collection[int]:
        return set(self.known)

    def registration_times(self) -> Mapping[int, float]:
        return {i: self.registered_at.get(i, 0.0) for i in self.known}

    def remove_executor(self, executor_id: int, reason: ExecutorExited) -> None:
        self.removed.append((executor_id, reason))
        self.known.discard(executor_id)
        self.active.discard(executor_id)

    def is_executor_active(self, executor_id: int) -> bool:
        return executor_id in self.active

    def removals_of(self, executor_id: int) -> list[ExecutorExited]:
        return [reason for i, reason in self.removed if i == executor_id]


@dataclass
class RecordingObserver:
    """A `LifecycleObserver` that remembers every report, in order."""

    rounds: int = 0
    removals: list[ExecutorRemoval] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        self.rounds += 1

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        self.removals.append(removal)

    def application_failed(self, message: str) -> None:
        self.failures.append(message)


# Pod factories, as Spark's ExecutorLifecycleTestUtils (SPARK-24248).


def executor_pod(
    executor_id: int, *, app_id: str = TEST_APP_ID, labels: ExecutorLabels = SPARK_LABELS
) -> ExecutorPod:
    return ExecutorPod(
        name=f"spark-executor-{executor_id}",
        labels=labels.for_executor(app_id, executor_id),
    )


def _with(pod: ExecutorPod, **changes: object) -> ExecutorPod:
    fields = {name: getattr(pod, name) for name in pod.__dataclass_fields__}
    fields.update(changes)
    return ExecutorPod(**fields)


def pending_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="pending")


def running_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="running")


def succeeded_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="succeeded")


def unknown_executor(executor_id: int) -> ExecutorPod:
    return _with(executor_pod(executor_id), phase="unknown")


def deleted_executor(executor_id: int) -> ExecutorPod:
    """Being deleted and no longer running (a pod whose containers stopped): Deleted."""
    return _with(
        executor_pod(executor_id),
        phase="failed",
        deletion_timestamp=datetime(1986, 7, 28, tzinfo=UTC),
    )


def terminating_executor(executor_id: int) -> ExecutorPod:
    """Being deleted while it still runs: Terminating (SPARK-31125), not gone yet."""
    return _with(
        executor_pod(executor_id),
        phase="running",
        deletion_timestamp=datetime(1986, 7, 28, tzinfo=UTC),
    )


def failed_executor(executor_id: int, *, exit_code: int = 1) -> ExecutorPod:
    """A failed pod as Spark's fixture since SPARK-49804: a sidecar container listed first exited 2,
    the executor container exited `exit_code`, and only the latter speaks for the executor."""
    return _with(
        executor_pod(executor_id),
        phase="failed",
        message="Executor failed.",
        reason="Executor failed because of a thrown error.",
        container_statuses=(
            ContainerStatus(
                name="spark-executor-sidecar",
                image="k8s-spark-sidecar",
                state=ContainerTerminated(exit_code=2, message="Failed"),
            ),
            ContainerStatus(
                name=EXECUTOR_CONTAINER_NAME,
                image="k8s-spark",
                state=ContainerTerminated(exit_code=exit_code, message="Failed"),
            ),
        ),
    )


class InMemoryIdLedger:
    """`ExecutorIdLedger` in memory: one instance shared by two backends is a restart's cluster.

    `fail_writes` makes every reservation fail, as a denied write would in the cluster, and
    `fail_reads` every read. `lose()` and `tamper(raw)` are what hands outside the sidecar do to
    the cluster's ledger: delete it (a label clean-up, a restore from an old backup), or write
    any text into it (a typo, a value far beyond the maximum); the mark is then read as the
    adapter reads it (`LedgerMarkInvalid.parse`).
    """

    location = "the in-memory ledger"

    def __init__(self, highest: int = 0) -> None:
        self.highest = highest
        self.raw: str | None = None
        """Text written by hand instead of a mark (None: `highest` is what is stored)."""
        self.writes = 0
        self.fail_writes = False
        self.fail_reads = False

    def highest_reserved(self) -> int:
        if self.fail_reads:
            raise PodOperationError("cannot read the executor id ledger (403)", status=403)
        if self.raw is not None:
            return LedgerMarkInvalid.parse(self.raw, where=self.location)
        return self.highest

    def reserve_through(self, executor_id: int) -> None:
        if self.fail_writes:
            raise PodOperationError(f"cannot reserve executor ids through {executor_id}")
        try:
            stored = self.highest_reserved() if not self.fail_reads else self.highest
        except LedgerMarkInvalid:
            stored = 0  # no executor id: replaced
        if stored >= executor_id:
            return
        self.writes += 1
        self.raw = None
        self.highest = executor_id

    def lose(self) -> None:
        """The ledger is deleted: it reads as no mark."""
        self.raw = None
        self.highest = 0

    def tamper(self, raw: str) -> None:
        """Somebody writes `raw` into the ledger (a number at all only if it parses as one)."""
        if raw.isascii() and raw.isdigit() and len(raw) <= 10:
            value = int(raw)
            if value <= LedgerMarkInvalid.MAX_EXECUTOR_ID:
                self.raw, self.highest = None, value
                return
        self.raw = raw


class HandFed:
    """A sources factory that makes no source and keeps the store's write side, for a caller that
    feeds the store itself (a test, a benchmark): `compose_backend(sources=fed, ...)`, then
    `fed.writer.update_pod(...)`."""

    def __init__(self) -> None:
        self._writer: SnapshotsWriter | None = None

    def __call__(self, store: SnapshotsWriter) -> Sequence[SnapshotSource]:
        self._writer = store
        return ()

    @property
    def writer(self) -> SnapshotsWriter:
        if self._writer is None:
            raise RuntimeError("no backend was composed with these sources yet")
        return self._writer


F = TypeVar("F")


@dataclass(frozen=True, slots=True, kw_only=True)
class Composed:
    """A backend `compose_backend` built over a deterministic store, and the parts a test of one
    reconciler drives directly (start only the one under test: `allocator.start(...)`)."""

    backend: ExecutorPodsBackend
    store: DeterministicSnapshotsStore
    allocator: ExecutorPodsAllocator
    lifecycle: ExecutorPodsLifecycleManager
    features: FeatureSet

    def feature(self, kind: type[F]) -> F:
        """The plugged feature of this class (its settings turned it on)."""
        found = [f for f in self.features if isinstance(f, kind)]
        if len(found) != 1:
            raise LookupError(f"{len(found)} features of {kind.__name__} were plugged")
        return found[0]


def compose_deterministic(
    *,
    settings: CoreSettings | None = None,
    app_id: str = TEST_APP_ID,
    pod_operations: PodOperations | None = None,
    pod_builder: ExecutorPodBuilder | None = None,
    driver: DriverView | None = None,
    clock: Clock | None = None,
    observers: Sequence[LifecycleObserver] = (),
    profiles: ResourceProfiles | None = None,
    runner: CreateRunner | None = None,
    rng: random.Random | None = None,
    request_scheduler: Scheduler | None = None,
    id_ledger: ExecutorIdLedger | None = None,
    features: FeatureSettings | None = None,
    claims: ClaimOperations | None = None,
    resize: ResizeOperations | None = None,
    api_rate_ceiling: float = API_RATE_CEILING,
) -> Composed:
    """`compose_backend` over a `DeterministicSnapshotsStore` (deliveries on
    `notify_subscribers()`), in-memory ports by default and a deterministic request scheduler,
    which also runs the features' periodic work: the same assembly as production, with every part
    a test needs in reach."""
    clock = clock if clock is not None else ManualClock()
    manual = clock if isinstance(clock, ManualClock) else None
    scheduler = (
        request_scheduler if request_scheduler is not None else DeterministicScheduler(manual)
    )
    stores: list[DeterministicSnapshotsStore] = []

    def store(
        *, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock
    ) -> DeterministicSnapshotsStore:
        made = DeterministicSnapshotsStore(labels=labels, classifier=classifier, clock=clock)
        stores.append(made)
        return made

    backend = compose_backend(
        app_id=app_id,
        settings=settings if settings is not None else CoreSettings(),
        ports=Ports(
            pod_operations=(
                pod_operations if pod_operations is not None else InMemoryPodOperations()
            ),
            pod_builder=pod_builder if pod_builder is not None else SimpleExecutorPodBuilder(),
            driver=driver if driver is not None else RecordingDriver(),
            id_ledger=id_ledger,
            profiles=profiles,
            claims=claims,
            resize=resize,
            api_rate_ceiling=api_rate_ceiling,
        ),
        features=features,
        machinery=Machinery(
            observers=observers,
            clock=clock,
            store=store,
            request_scheduler=scheduler,
            feature_scheduler=scheduler,
            runner=runner,
            rng=rng,
        ),
    )
    # Core's own testing module may look past the facade; nothing else does.
    return Composed(
        backend=backend,
        store=stores[0],
        allocator=backend._allocator,
        lifecycle=backend._lifecycle,
        features=backend._allocator._features,
    )


Store = TypeVar("Store", bound=SnapshotsStore)


def composed_store(make: Callable[..., Store], *, settings: CoreSettings | None = None) -> Store:
    """The store `make` (a `StoreFactory`) makes when `compose_backend` assembles a backend around
    it over in-memory ports (the backend is not started): for tests and benchmarks of what feeds a
    store, such as the watch, with the store made as every store is."""
    made: list[Store] = []

    def store(*, labels: ExecutorLabels, classifier: PodClassifier, clock: Clock) -> Store:
        made.append(make(labels=labels, classifier=classifier, clock=clock))
        return made[-1]

    compose_backend(
        app_id=TEST_APP_ID,
        settings=settings if settings is not None else CoreSettings(),
        ports=Ports(
            pod_operations=InMemoryPodOperations(),
            pod_builder=SimpleExecutorPodBuilder(),
            driver=RecordingDriver(),
        ),
        machinery=Machinery(store=store, request_scheduler=DeterministicScheduler()),
    )
    return made[0]
