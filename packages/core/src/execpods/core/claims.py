"""Executors' OnDemand PersistentVolumeClaims: made per executor, reused, cleaned up.

Spark 4.3's rules (`ExecutorPodsAllocator`, `MountVolumesFeatureStep`), kept here:

- a volume `spark.kubernetes.executor.volumes.persistentVolumeClaim.NAME.options.claimName=OnDemand`
  gives every executor a claim of its own, named after its pod (`<prefix>-exec-<id>-pvc-<i>`);
  the pod is created first, then its claims (a claim that cannot be made deletes the pod, and
  the round goes on);
- the claims are owned by the driver pod when there is one and
  `spark.kubernetes.driver.ownPersistentVolumeClaim` holds (default), else by the executor's pod;
- with `spark.kubernetes.driver.reusePersistentVolumeClaim` (default, needs ownership), a new
  executor takes over a claim of the application that no pod in the snapshot uses (a pod the API
  deleted no longer does; one Terminating still does), of the same storage class and size,
  created more than the pod creation timeout ago (max(5 x batch.delay,
  allocation.executor.timeout), 600 s by default: Spark's `ExecutorPodsAllocator.getReusablePVCs`;
  SPARK-35416, SPARK-41388): a claim made for a pod still unseen under watch lag is not handed to
  a second pod;
  listing the claims failing (no permission) means no reuse, not an error (SPARK-39688);
- with `spark.kubernetes.driver.waitToReusePersistentVolumeClaim` as well, once the application
  has made as many claims as it may have executors, a new executor waits for a claim to be freed
  instead of making one (SPARK-41410); a claim that failed to be made is not counted.

Beyond Spark: on stop (with `deleteOnTermination`) the application's claims are deleted too, so
none is left whoever owns them.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from execpods.core.errors import PodOperationError
from execpods.core.pods import ExecutorPod, PodManifest
from execpods.core.ports import PodOperations, PodSelector
from execpods.core.settingkit import SettingsBase, parse_bool, setting
from execpods.core.snapshot import ExecutorPodsSnapshot

__all__ = [
    "Claim",
    "ClaimOperations",
    "ClaimSettings",
    "ClaimTemplates",
    "ClaimingPodOperations",
    "ExecutorClaims",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimSettings(SettingsBase):
    """OnDemand PersistentVolumeClaims of the executors (Spark's driver.*PersistentVolumeClaim)."""

    own: bool = setting(
        "spark.kubernetes.driver.ownPersistentVolumeClaim",
        True,
        "The driver pod (when there is one) owns the executors' OnDemand claims instead of "
        "their executor pods, so they outlive an executor and can be reused.",
        parse=parse_bool,
    )
    reuse: bool = setting(
        "spark.kubernetes.driver.reusePersistentVolumeClaim",
        True,
        "A new executor takes over an unused OnDemand claim of the application (same storage "
        "class and size) instead of making one; needs ownPersistentVolumeClaim.",
        parse=parse_bool,
    )
    legacy_read_write_once: bool = setting(
        "spark.kubernetes.legacy.useReadWriteOnceAccessMode",
        False,
        "OnDemand claims ask for ReadWriteOnce instead of ReadWriteOncePod (Spark's legacy mode).",
        parse=parse_bool,
    )
    wait_to_reuse: bool = setting(
        "spark.kubernetes.driver.waitToReusePersistentVolumeClaim",
        False,
        "Once the application has as many claims as it may have executors, a new executor "
        "waits for a claim to be freed instead of making one; needs ownPersistentVolumeClaim "
        "and reusePersistentVolumeClaim.",
        parse=parse_bool,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """A claim of the application, as listed."""

    name: str
    storage_class: str | None = None
    size: str | None = None
    created_at: float | None = None
    """Wall-clock seconds of its creation timestamp."""


class ClaimOperations(Protocol):
    """The claims the API holds for an application. Failures raise `PodOperationError`s."""

    def list_claims(self, app_id: str) -> list[Claim]:
        """The application's claims (labelled with its id)."""

    def create_claim(self, manifest: PodManifest) -> None:
        """Create one claim."""

    def delete_claims(self, app_id: str) -> int:
        """Delete every claim of the application; returns how many."""


class ClaimTemplates(Protocol):
    """What an executor's pod needs made: the claims of its OnDemand volumes."""

    def claims_for(self, pod: PodManifest) -> list[PodManifest]:
        """The claim manifests `pod` (as built) names and needs created, each named as its
        volume's `claimName` and labelled with the application id; none when it has no
        OnDemand volume."""

    @property
    def driver_owner(self) -> Mapping[str, object] | None:
        """An owner reference to the driver pod, or None when there is no driver pod."""


def _size(manifest: PodManifest) -> str | None:
    requests = ((manifest.get("spec") or {}).get("resources") or {}).get("requests") or {}
    size = requests.get("storage")
    return None if size is None else str(size)


def _storage_class(manifest: PodManifest) -> str | None:
    value = (manifest.get("spec") or {}).get("storageClassName")
    return None if value is None else str(value)


class ExecutorClaims:
    """The claims policy of one application, shared by the allocator's rounds and its creates."""

    def __init__(
        self,
        *,
        settings: ClaimSettings,
        templates: ClaimTemplates,
        operations: ClaimOperations,
        max_claims: int,
        reuse_after: float,
        delete_on_stop: bool = True,
        declared: bool = True,
    ) -> None:
        self._settings = settings
        self._templates = templates
        self._operations = operations
        self._max_claims = max_claims
        self._reuse_after = reuse_after
        self._delete_on_stop = delete_on_stop
        self._declared = declared
        """The settings declare OnDemand volumes (claims may exist from before a restart)."""
        self._started = False
        self._lock = threading.Lock()
        self._in_use: frozenset[str] = frozenset()
        self._reusable: list[Claim] | None = None
        self._now = 0.0
        self._app_id = ""
        self._per_executor: int | None = None
        """Claims an executor needs to make, once a pod was built (None: none built yet)."""
        self.created = 0
        """Claims this application made (Spark's PVC_COUNTER): a failed create is not counted."""
        self.reused = 0

    @property
    def owned_by_driver(self) -> bool:
        return self._settings.own and self._templates.driver_owner is not None

    @property
    def reusing(self) -> bool:
        return self.owned_by_driver and self._settings.reuse

    @property
    def waiting_to_reuse(self) -> bool:
        return self.reusing and self._settings.wait_to_reuse

    # The allocator's round.

    def begin_round(
        self,
        snapshot: ExecutorPodsSnapshot,
        *,
        app_id: str,
        now: float,
        batch: Sequence[ExecutorPodsSnapshot] = (),
    ) -> None:
        """A round of `app_id` starts on `snapshot` (at wall-clock `now`): claims its pods name
        are in use, and the reusable claims are listed again when first needed."""
        names: set[str] = set()
        if self.reusing:  # only a reuse asks which claims are in use
            names.update(
                name
                for state in snapshot.executor_pods.values()
                if not state.pod.gone  # a pod the API deleted no longer holds its claims
                for name in state.pod.claim_names
            )
        with self._lock:
            self._started = True
            self._in_use = frozenset(names)
            self._reusable = None
            self._now = now
            self._app_id = app_id

    def _reusable_claims(self) -> list[Claim]:
        # Caller holds the lock.
        if self._reusable is None:
            self._reusable = self._list_reusable() if self.reusing else []
        return self._reusable

    def _list_reusable(self) -> list[Claim]:
        try:
            claims = self._operations.list_claims(self._app_id)
        except PodOperationError as error:
            logger.info("Cannot list PersistentVolumeClaims (no permission?): %s", error)
            return []
        reusable = [
            c
            for c in claims
            if c.name not in self._in_use
            and c.created_at is not None
            and self._now - c.created_at > self._reuse_after
        ]
        logger.info("Found %d reusable PVCs from %d PVCs", len(reusable), len(claims))
        return reusable

    def creatable(self, wanted: int) -> int:
        """How many of `wanted` new executors may be created this round: all of them, unless
        waiting to reuse and the application already has its most claims."""
        if wanted <= 0 or not self.waiting_to_reuse or self._per_executor == 0:
            return wanted
        if self._per_executor is None:
            return 1  # one executor first, to learn how many claims each one makes
        with self._lock:
            free = len(self._reusable_claims())
            room = max(0, self._max_claims - self.created)
            allowed = free + math.ceil(room / self._per_executor)
        if allowed < wanted:
            logger.info("Wait to reuse one of the existing %d PVCs.", self.created)
        return min(wanted, allowed)

    # One executor's create.

    def prepare(self, pod: PodManifest) -> list[PodManifest]:
        """Point `pod`'s OnDemand volumes at reusable claims where one fits (in place), and
        return the claims still to make for it."""
        needed = self._templates.claims_for(pod)
        self._per_executor = len(needed)
        if not needed:
            return []
        to_make = []
        with self._lock:
            reusable = self._reusable_claims() if self.reusing else []
            for manifest in needed:
                match = next(
                    (
                        c
                        for c in reusable
                        if c.storage_class == _storage_class(manifest) and c.size == _size(manifest)
                    ),
                    None,
                )
                if match is not None and _rename_claim(
                    pod, manifest["metadata"]["name"], match.name
                ):
                    reusable.remove(match)
                    self.reused += 1
                    logger.info("Reuse PersistentVolumeClaim %s", match.name)
                else:
                    to_make.append(manifest)
        return to_make

    def make(
        self, claims: list[PodManifest], *, executor_owner: Mapping[str, object] | None
    ) -> None:
        """Create the claims, owned by the driver pod (or else `executor_owner`); raises the
        first failure."""
        owner = self._templates.driver_owner if self._settings.own else None
        owner = owner if owner is not None else executor_owner
        for manifest in claims:
            if owner is not None:
                manifest.setdefault("metadata", {})["ownerReferences"] = [dict(owner)]
            logger.info(
                "Trying to create PersistentVolumeClaim %s with StorageClass %s",
                manifest["metadata"]["name"],
                _storage_class(manifest),
            )
            self._operations.create_claim(manifest)
            with self._lock:
                self.created += 1

    def stop(self, app_id: str) -> None:
        """Delete the application's claims (with deleteOnTermination, once allocation ran, and
        only if it has OnDemand claims: declared, or seen in a pod it built); failures are
        logged."""
        uses_claims = self._declared or bool(self._per_executor)
        if not (self._delete_on_stop and self._started and uses_claims):
            return
        try:
            deleted = self._operations.delete_claims(app_id)
        except PodOperationError as error:
            logger.warning("Could not delete the PersistentVolumeClaims of %s: %s", app_id, error)
            return
        if deleted:
            logger.info("Deleted %d PersistentVolumeClaims of %s.", deleted, app_id)


def _rename_claim(pod: PodManifest, old: str, new: str) -> bool:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(source, dict) and source.get("claimName") == old:
            source["claimName"] = new
            return True
    return False


class ClaimingPodOperations:
    """`PodOperations` whose create also makes the pod's OnDemand claims (the allocator's)."""

    def __init__(
        self, inner: PodOperations, claims: ExecutorClaims, *, executor_id_label: str
    ) -> None:
        self._inner = inner
        self._claims = claims
        self._executor_id_label = executor_id_label

    def create(self, manifest: PodManifest) -> None:
        to_make = self._claims.prepare(manifest)
        self._inner.create(manifest)
        if not to_make:
            return
        try:
            self._claims.make(to_make, executor_owner=self._executor_owner(manifest))
        except Exception:
            name = manifest["metadata"]["name"]
            logger.warning("Deleting executor pod %s: its claims could not be created.", name)
            try:
                self._inner.delete(name)
            except PodOperationError as error:
                logger.warning("Could not delete executor pod %s: %s", name, error)
            raise

    def _executor_owner(self, manifest: PodManifest) -> Mapping[str, object] | None:
        if self._claims.owned_by_driver:
            return None
        meta = manifest["metadata"]
        labels = meta.get("labels") or {}
        selector = PodSelector(
            labels={self._executor_id_label: labels.get(self._executor_id_label, "")}
        )
        found = [p for p in self._inner.list(selector) if p.name == meta["name"]]
        if not found or found[0].uid is None:
            return None
        return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": found[0].uid}

    def delete(self, name: str) -> None:
        self._inner.delete(name)

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        return self._inner.delete_by_selector(selector, grace_period_seconds=grace_period_seconds)

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self._inner.patch_labels(name, labels)

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        self._inner.patch_annotations(name, annotations)

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        return self._inner.list(selector)
