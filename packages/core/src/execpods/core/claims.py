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
from dataclasses import dataclass
from types import MappingProxyType

from execpods.core.allocation import ProfileState
from execpods.core.errors import PodOperationError
from execpods.core.features import Feature, FeatureParts, NewExecutor, RoundFacts
from execpods.core.ports import (
    NO_DECISIONS,
    Claim,
    ClaimOperations,
    NeededClaim,
    PodDecisions,
    PodOperations,
)
from execpods.core.settingkit import SettingsBase, parse_bool, setting

__all__ = ["ClaimSettings", "ExecutorClaims", "plug"]

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


def plug(settings: ClaimSettings, parts: FeatureParts) -> ExecutorClaims | None:
    """The feature when the adapter gave claim operations (it makes none without claims)."""
    if parts.claims is None:
        return None
    core = parts.settings
    return ExecutorClaims(
        settings=settings,
        operations=parts.claims,
        pod_operations=parts.pod_operations,
        app_id=parts.app_id,
        max_claims=(
            core.dynamic_allocation_max_executors
            if core.dynamic_allocation_enabled
            else core.initial_executors
        ),
        reuse_after=core.pod_creation_timeout,  # Spark's getReusablePVCs (M4)
        delete_on_stop=core.delete_on_termination,
    )


class ExecutorClaims(Feature):
    """The claims policy of one application: reuse decided per pod, claims made after it."""

    def __init__(
        self,
        *,
        settings: ClaimSettings,
        operations: ClaimOperations,
        pod_operations: PodOperations,
        app_id: str,
        max_claims: int,
        reuse_after: float,
        delete_on_stop: bool = True,
    ) -> None:
        self._settings = settings
        self._operations = operations
        self._pods = pod_operations
        self._app_id = app_id
        self._max_claims = max_claims
        self._reuse_after = reuse_after
        self._delete_on_stop = delete_on_stop
        self._started = False
        self._lock = threading.Lock()
        self._in_use: frozenset[str] = frozenset()
        self._reusable: list[Claim] | None = None
        self._now = 0.0
        self._per_executor: int | None = None
        """Claims an executor needs to make, once a pod was shaped (None: none yet)."""
        self._to_make: dict[int, list[NeededClaim]] = {}
        """Per executor being created this round: the claims to make once its pod exists."""
        self.made = 0
        """Claims this application made (Spark's PVC_COUNTER): a failed create is not counted."""
        self.reused = 0

    @property
    def owned_by_driver(self) -> bool:
        return self._settings.own and self._operations.has_driver_pod

    @property
    def reusing(self) -> bool:
        return self.owned_by_driver and self._settings.reuse

    @property
    def waiting_to_reuse(self) -> bool:
        return self.reusing and self._settings.wait_to_reuse

    # The allocator's round.

    def observe(self, facts: RoundFacts) -> None:
        """A round starts: claims its pods name are in use, and the reusable claims are listed
        again when first needed."""
        names: set[str] = set()
        if self.reusing:  # only a reuse asks which claims are in use
            names.update(
                name
                for state in facts.snapshot.executor_pods.values()
                if not state.pod.gone  # a pod the API deleted no longer holds its claims
                for name in state.pod.claim_names
            )
        with self._lock:
            self._started = True
            self._in_use = frozenset(names)
            self._reusable = None
            self._now = facts.now
            self._to_make.clear()  # the last round's creates are all done

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

    def cap(self, state: ProfileState, wanted: int) -> int:
        """All of `wanted`, unless waiting to reuse and the application already has its most
        claims."""
        if wanted <= 0 or not self.waiting_to_reuse or self._per_executor == 0:
            return wanted
        if self._per_executor is None:
            return 1  # one executor first, to learn how many claims each one makes
        with self._lock:
            free = len(self._reusable_claims())
            room = max(0, self._max_claims - self.made)
            allowed = free + math.ceil(room / self._per_executor)
        if allowed < wanted:
            logger.info("Wait to reuse one of the existing %d PVCs.", self.made)
        return min(wanted, allowed)

    # One executor's create.

    def shape(self, executor: NewExecutor) -> PodDecisions:
        """Reuse a free claim for each claim the pod needs where one fits (same storage class
        and size); the others are made once the pod exists (`created`)."""
        needed = self._operations.claims_for(
            executor_id=executor.executor_id,
            app_id=executor.app_id,
            resource_profile_id=executor.resource_profile_id,
        )
        self._per_executor = len(needed)
        if not needed:
            return NO_DECISIONS
        reuse: dict[str, str] = {}
        to_make: list[NeededClaim] = []
        with self._lock:
            reusable = self._reusable_claims() if self.reusing else []
            for claim in needed:
                match = next(
                    (
                        c
                        for c in reusable
                        if c.storage_class == claim.storage_class and c.size == claim.size
                    ),
                    None,
                )
                if match is not None:
                    reusable.remove(match)
                    reuse[claim.name] = match.name
                    self.reused += 1
                    logger.info("Reuse PersistentVolumeClaim %s", match.name)
                else:
                    to_make.append(claim)
            self._to_make[executor.executor_id] = to_make
        return PodDecisions(claims=MappingProxyType(reuse)) if reuse else NO_DECISIONS

    def created(self, executor: NewExecutor, pod_name: str, decisions: PodDecisions) -> None:
        """Make the pod's remaining claims, owned by the driver pod (or else the executor's);
        a claim that cannot be made deletes the pod, and its error fails the create."""
        with self._lock:
            to_make = self._to_make.pop(executor.executor_id, [])
        owner = None if self.owned_by_driver else pod_name
        try:
            for claim in to_make:
                logger.info(
                    "Trying to create PersistentVolumeClaim %s with StorageClass %s",
                    claim.name,
                    claim.storage_class,
                )
                self._operations.create_claim(claim, owner_pod=owner)
                with self._lock:
                    self.made += 1
        except Exception:
            logger.warning("Deleting executor pod %s: its claims could not be created.", pod_name)
            try:
                self._pods.delete(pod_name)
            except PodOperationError as error:
                logger.warning("Could not delete executor pod %s: %s", pod_name, error)
            raise

    def close(self) -> None:
        """Delete the application's claims (with deleteOnTermination, once allocation ran, and
        only if it has OnDemand claims: declared, or seen in a pod it shaped); failures are
        logged."""
        uses_claims = self._operations.declares_on_demand or bool(self._per_executor)
        if not (self._delete_on_stop and self._started and uses_claims):
            return
        app_id = self._app_id
        try:
            deleted = self._operations.delete_claims(app_id)
        except PodOperationError as error:
            logger.warning("Could not delete the PersistentVolumeClaims of %s: %s", app_id, error)
            return
        if deleted:
            logger.info("Deleted %d PersistentVolumeClaims of %s.", deleted, app_id)
