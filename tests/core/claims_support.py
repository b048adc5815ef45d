"""In-memory claims for the core's tests: a claim registry and OnDemand templates in one."""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from execpods.core import ExecutorPod, PodManifest, PodOperationError
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.claims import Claim, ClaimingPodOperations, ClaimSettings, ExecutorClaims
from execpods.core.clock import ManualClock
from execpods.core.labels import SPARK_LABELS
from execpods.core.settings import CoreSettings
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
)

DRIVER_OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": "driver-uid"}
START = 1_767_225_600.0


class InMemoryClaims:
    """`ClaimOperations` and `ClaimTemplates`: every executor pod gets one OnDemand claim of
    `storage_class` and `size`, named `<pod>-pvc-0`."""

    def __init__(
        self,
        clock: ManualClock,
        *,
        driver_owner: Mapping[str, object] | None = DRIVER_OWNER,
        storage_class: str = "gp2",
        size: str = "200Gi",
    ) -> None:
        self._clock = clock
        self._owner = driver_owner
        self.storage_class = storage_class
        self.size = size
        self.claims: dict[str, PodManifest] = {}
        self.created: list[str] = []
        self.list_error: PodOperationError | None = None
        self.create_errors: list[PodOperationError] = []
        self.deleted_for: list[str] = []
        self._lock = threading.Lock()

    @property
    def driver_owner(self) -> Mapping[str, object] | None:
        return self._owner

    def claims_for(self, pod: PodManifest) -> list[PodManifest]:
        name = f"{pod['metadata']['name']}-pvc-0"
        return [self.manifest(name)]

    def manifest(self, name: str, *, storage_class: str | None = None) -> PodManifest:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {SPARK_LABELS.app_id: TEST_APP_ID}},
            "spec": {
                "storageClassName": storage_class or self.storage_class,
                "accessModes": ["ReadWriteOncePod"],
                "resources": {"requests": {"storage": self.size}},
            },
        }

    def add_existing(self, name: str, *, age: float, storage_class: str | None = None) -> None:
        """A claim the application made `age` seconds ago."""
        manifest = self.manifest(name, storage_class=storage_class)
        manifest["metadata"]["created"] = self._clock.time() - age
        self.claims[name] = manifest

    def list_claims(self, app_id: str) -> list[Claim]:
        if self.list_error is not None:
            raise self.list_error
        with self._lock:
            return [
                Claim(
                    name=name,
                    storage_class=m["spec"]["storageClassName"],
                    size=m["spec"]["resources"]["requests"]["storage"],
                    created_at=m["metadata"]["created"],
                )
                for name, m in sorted(self.claims.items())
            ]

    def create_claim(self, manifest: PodManifest) -> None:
        if self.create_errors:
            raise self.create_errors.pop(0)
        stored = copy.deepcopy(manifest)
        stored["metadata"]["created"] = self._clock.time()
        with self._lock:
            self.claims[manifest["metadata"]["name"]] = stored
            self.created.append(manifest["metadata"]["name"])

    def delete_claims(self, app_id: str) -> int:
        with self._lock:
            self.deleted_for.append(app_id)
            count = len(self.claims)
            self.claims.clear()
            return count


@dataclass(frozen=True, slots=True, kw_only=True)
class VolumeBuilder:
    """Simple executor pods with one OnDemand volume, named as Spark names it."""

    inner: SimpleExecutorPodBuilder = field(default_factory=SimpleExecutorPodBuilder)

    def build(self, *, executor_id: int, app_id: str, resource_profile_id: int = 0) -> PodManifest:
        pod = self.inner.build(
            executor_id=executor_id, app_id=app_id, resource_profile_id=resource_profile_id
        )
        claim = f"{pod['metadata']['name']}-pvc-0"
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        return pod


@dataclass
class ClaimsRig:
    allocator: ExecutorPodsAllocator
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    claims: InMemoryClaims
    policy: ExecutorClaims
    clock: ManualClock

    def claim_of(self, executor_id: int) -> str:
        """The claim executor `executor_id`'s pod was created with."""
        for manifest in self.pods.created:
            if manifest["metadata"]["labels"][SPARK_LABELS.executor_id] == str(executor_id):
                volume: Any = manifest["spec"]["volumes"][0]
                return str(volume["persistentVolumeClaim"]["claimName"])
        raise AssertionError(f"executor {executor_id} was never created")

    def pod(self, executor_id: int, phase: str) -> ExecutorPod:
        """Executor `executor_id`'s pod in `phase`, naming the claim it was created with."""
        labels = SPARK_LABELS.for_executor(TEST_APP_ID, executor_id)
        labels[SPARK_LABELS.resource_profile_id] = "0"
        return ExecutorPod(
            name=f"{TEST_APP_ID}-exec-{executor_id}",
            labels=labels,
            phase=phase,
            claim_names=(self.claim_of(executor_id),),
            creation_timestamp=datetime.fromtimestamp(self.clock.time(), UTC),
        )


def claims_rig(
    claim_settings: ClaimSettings | None = None,
    *,
    settings: CoreSettings | None = None,
    max_claims: int = 10,
    driver_owner: Mapping[str, object] | None = DRIVER_OWNER,
) -> ClaimsRig:
    settings = settings or CoreSettings(batch_size=5, adaptive_batches=False)
    clock = ManualClock(START)
    store = DeterministicSnapshotsStore()
    pods = InMemoryPodOperations()
    claims = InMemoryClaims(clock, driver_owner=driver_owner)
    policy = ExecutorClaims(
        settings=claim_settings or ClaimSettings(),
        templates=claims,
        operations=claims,
        max_claims=max_claims,
        reuse_after=settings.pod_creation_timeout,
    )
    allocator = ExecutorPodsAllocator(
        settings=settings,
        pod_builder=VolumeBuilder(),
        pod_operations=ClaimingPodOperations(
            pods, policy, executor_id_label=SPARK_LABELS.executor_id
        ),
        store=store,
        clock=clock,
        rng=random.Random(7),
        claims=policy,
    )
    allocator.start(TEST_APP_ID, RecordingDriver())
    return ClaimsRig(allocator, store, pods, claims, policy, clock)
