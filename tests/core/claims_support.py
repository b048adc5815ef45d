"""In-memory claims for the core's tests: the core's `ClaimOperations` over a claim registry."""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from execpods.core import (
    AllocatorNotice,
    Claim,
    ExecutorPod,
    ExecutorPodsBackend,
    FeatureSettings,
    NeededClaim,
    NoticeKind,
    PodManifest,
    PodOperationError,
)
from execpods.core.allocator import ExecutorPodsAllocator
from execpods.core.claims import ClaimSettings, ExecutorClaims
from execpods.core.clock import ManualClock
from execpods.core.labels import SPARK_LABELS
from execpods.core.settings import CoreSettings
from execpods.core.testing import (
    TEST_APP_ID,
    DeterministicSnapshotsStore,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
    compose_deterministic,
)

DRIVER_OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": "driver-uid"}
START = 1_767_225_600.0


class InMemoryClaims:
    """`ClaimOperations`: every executor pod gets one OnDemand claim of `storage_class` and
    `size`, named `<pod>-pvc-0` (as `VOLUMES` names its volume)."""

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
    def declares_on_demand(self) -> bool:
        return True

    @property
    def has_driver_pod(self) -> bool:
        return self._owner is not None

    def claims_for(
        self, *, executor_id: int, app_id: str, resource_profile_id: int
    ) -> list[NeededClaim]:
        name = f"{app_id}-exec-{executor_id}-pvc-0"
        return [
            NeededClaim(
                name=name,
                storage_class=self.storage_class,
                size=self.size,
                manifest=self.manifest(name),
            )
        ]

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

    def create_claim(self, claim: NeededClaim, *, owner_pod: str | None) -> None:
        if self.create_errors:
            raise self.create_errors.pop(0)
        stored: dict[str, Any] = copy.deepcopy(dict(claim.manifest))
        stored["metadata"]["created"] = self._clock.time()
        owner = self._owner if owner_pod is None else {"kind": "Pod", "name": owner_pod}
        if owner is not None:
            stored["metadata"]["ownerReferences"] = [dict(owner)]
        with self._lock:
            self.claims[claim.name] = stored
            self.created.append(claim.name)

    def delete_claims(self, app_id: str) -> int:
        with self._lock:
            self.deleted_for.append(app_id)
            count = len(self.claims)
            self.claims.clear()
            return count


VOLUMES = SimpleExecutorPodBuilder(claim_volumes=("{pod}-pvc-0",))
"""Simple executor pods with one OnDemand volume, named as Spark names it."""


@dataclass
class ClaimsRig:
    allocator: ExecutorPodsAllocator
    store: DeterministicSnapshotsStore
    pods: InMemoryPodOperations
    claims: InMemoryClaims
    policy: ExecutorClaims
    clock: ManualClock
    backend: ExecutorPodsBackend
    notices: list[AllocatorNotice]

    def told(self, kind: NoticeKind) -> int:
        """How many creates the notices of this kind stood for."""
        return sum(n.count for n in self.notices if n.kind is kind)

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
    """The claims feature as the composition root plugs it: from its settings slice and the
    claim operations; at most `max_claims` claims (Spark's: the executors it may have)."""
    settings = settings or CoreSettings(batch_size=5, adaptive_batches=False)
    settings = replace(settings, executor_instances=max_claims)
    clock = ManualClock(START)
    pods = InMemoryPodOperations()
    claims = InMemoryClaims(clock, driver_owner=driver_owner)
    composed = compose_deterministic(
        settings=settings,
        pod_operations=pods,
        pod_builder=VOLUMES,
        clock=clock,
        rng=random.Random(7),
        claims=claims,
        features=FeatureSettings(claims=claim_settings or ClaimSettings()),
    )
    notices: list[AllocatorNotice] = []
    composed.backend.add_notice_listener(notices.append)
    composed.allocator.start(TEST_APP_ID, RecordingDriver())
    policy = composed.feature(ExecutorClaims)
    return ClaimsRig(
        composed.allocator, composed.store, pods, claims, policy, clock, composed.backend, notices
    )
