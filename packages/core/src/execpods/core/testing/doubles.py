"""In-memory implementations of the ports at the core's edges: the cluster's pods, the pod
builder, the driver, the lifecycle observer and the executor id ledger.

They are real implementations that remember what they were told, not mocks; they live apart
from the store (`store`) and the assembly (`rig`) because each stands in for one port alone,
and a test that needs only a pod registry or a driver reads this module and nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from execpods.core.errors import LedgerMarkInvalid, PodConflict, PodOperationError
from execpods.core.labels import SPARK_LABELS, ExecutorLabels
from execpods.core.pods import ExecutorPod, PodManifest
from execpods.core.ports import (
    DEFAULT_RESOURCE_PROFILE_ID,
    NO_DECISIONS,
    ExecutorExited,
    ExecutorRemoval,
    PodDecisions,
    PodSelector,
)
from execpods.core.snapshot import ExecutorPodsSnapshot


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
