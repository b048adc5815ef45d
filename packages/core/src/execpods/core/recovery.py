"""Restart safety and lost answers: what the allocator learns by reading the cluster back.

A sidecar restarted beside a running driver (same application id) finds the executor pods its
previous life created. Before its first create it lists them all, the inactive ones included
(`spark-exec-inactive=true`, kept by `deleteOnTermination=false`): new ids continue above the
highest found and the id ledger's mark (`ids.py`), so no id is used twice, and the live pods
count as requested until the snapshots show them, so none is duplicated and none is left without
an owner. Pods whose ids this application never issued are not adopted (`adoption_of`).
Finished pods are left to the lifecycle manager, which reports each once when the snapshots show
it. KubeRay and Flink adopt their pods the same way; Spark's allocator lives and dies with its
driver and never needs to.

A create whose answer was lost (a 5xx, a broken connection) may or may not have made its pod.
Spark waits for the pod creation timeout to find out; one list of those executors tells at once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from execpods.core.errors import PodConflict, PodOperationError
from execpods.core.labels import ExecutorLabels
from execpods.core.pods import ExecutorPod
from execpods.core.ports import PodOperations, PodSelector
from execpods.core.profiles import profile_id_of

logger = logging.getLogger(__name__)

LIVE_PHASES = frozenset({None, "Pending", "Running"})

MAX_CONFLICT_SKIPS = 8
"""Ids skipped within one create when each is taken (409) before it counts as failed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Adoption:
    """What a restarted allocator found: the highest id in use, and the live pods' profiles."""

    highest_id: int = 0
    live: dict[int, int] = field(default_factory=dict)
    """Executor id -> resource profile id of each pod still Pending or Running."""
    found: int = 0
    above_mark: int = 0
    """The highest id of the application's pods above the ledger's mark that the pods' own
    rule would adopt (0: none): the mark is then below what the cluster shows, not to be
    believed (`recover` adopts them without it)."""


def adoption_of(
    pods: Iterable[ExecutorPod],
    labels: ExecutorLabels,
    *,
    maximum: int | None = None,
    reserved_through: int | None = None,
) -> Adoption:
    """What the listed pods say. Not adopted (warned about), so that one hand-made pod cannot
    spend every id and stop allocation for good:
    - with an id ledger that holds a mark (`reserved_through` > 0), ids above it: this
      application never issued them, since every id is reserved before use;
    - otherwise (no ledger, or an empty one: lost, or written by no earlier life), ids at or
      above `maximum` - 1, which would leave no id below `spark.kubernetes.allocation.maximum`
      to issue (Spark issues none at or above it); the pods are then all there is to go by."""
    highest = 0
    found = 0
    above_mark = 0
    live: dict[int, int] = {}
    beyond: list[str] = []
    for pod in pods:
        executor_id = labels.executor_id_of_pod(pod)
        if executor_id is None:
            continue
        beyond_maximum = maximum is not None and executor_id >= maximum - 1
        if reserved_through and executor_id > reserved_through:
            if not beyond_maximum:
                above_mark = max(above_mark, executor_id)
            beyond.append(pod.name)
            continue
        if not reserved_through and beyond_maximum:
            beyond.append(pod.name)
            continue
        found += 1
        highest = max(highest, executor_id)
        if (
            pod.phase in LIVE_PHASES
            and pod.deletion_timestamp is None
            and not labels.is_inactive(pod.labels)  # kept after its end: the id is taken
        ):
            live[executor_id] = profile_id_of(pod, labels)
    if beyond and not above_mark:
        logger.warning(
            "Not adopting executor pods %s: their executor ids were never issued by this "
            "application (above the id ledger's mark %s, or leaving no id below "
            "spark.kubernetes.allocation.maximum=%s); made by hand or by another run, they are "
            "left alone and new ids do not continue above them.",
            ",".join(sorted(beyond)),
            reserved_through,
            maximum,
        )
    return Adoption(highest_id=highest, live=live, found=found, above_mark=above_mark)


def recover(
    pods: PodOperations,
    labels: ExecutorLabels,
    app_id: str,
    *,
    maximum: int | None = None,
    reserved_through: int | None = None,
) -> Adoption | None:
    """List every executor pod of the app (inactive ones included); None when the list fails."""
    try:
        listed = pods.list(PodSelector.executors_of(labels, app_id))
    except PodOperationError as error:
        logger.warning("Could not list existing executor pods (%s); retrying.", error)
        return None
    adoption = adoption_of(listed, labels, maximum=maximum, reserved_through=reserved_through)
    if adoption.above_mark:
        # The mark is below the application's own pods (a ledger restored from an older backup,
        # lowered by hand): the pods are the truth; the caller distrusts the mark and says so.
        again = adoption_of(listed, labels, maximum=maximum, reserved_through=None)
        adoption = dataclasses.replace(again, above_mark=adoption.above_mark)
    if adoption.found:
        logger.info(
            "Found %d executor pods of application %s; adopted %d live ones, new ids continue "
            "above %d.",
            adoption.found,
            app_id,
            len(adoption.live),
            adoption.highest_id,
        )
    return adoption


class LostCreates:
    """Creates whose answer was lost (a 5xx, a broken connection), until one list reads them
    back: instead of holding their slots for the pod creation timeout, as Spark does."""

    def __init__(self) -> None:
        self._waiting: set[int] = set()

    def add(self, executor_ids: Iterable[int]) -> None:
        self._waiting.update(executor_ids)

    def read_back(
        self, pods: PodOperations, labels: ExecutorLabels, app_id: str, unseen: Collection[int]
    ) -> list[int]:
        """Those still unseen whose pods do not exist: forget and replace them. A pod that does
        exist will show in the snapshots; a failed read-back is asked again next round."""
        waiting = sorted(i for i in self._waiting if i in unseen)
        self._waiting.intersection_update(waiting)
        if not waiting:
            return []
        selector = PodSelector.executors_of(labels, app_id, waiting)
        try:
            found = {labels.executor_id_of_pod(pod) for pod in pods.list(selector)}
        except PodOperationError as error:
            logger.debug("Could not read back executors %s yet (%s).", waiting, error)
            return []
        self._waiting.clear()
        missing = [i for i in waiting if i not in found]
        if missing:
            logger.warning(
                "The creates of executors %s failed without an answer and their pods do not "
                "exist: requesting replacements.",
                ",".join(map(str, missing)),
            )
        return missing


def create_skipping_taken_ids(
    create: Callable[[int], None],
    executor_id: int,
    fresh_id: Callable[[], int],
) -> int:
    """Create the pod of `executor_id` (`create` builds and sends it); the id whose pod was
    created.

    409 AlreadyExists means a pod holds this id (one the adoption could not see: a race with
    another sidecar, a pod made by hand): skip past it at once with a fresh id rather than lose a
    round on it. Any other failure, or too many taken ids, raises.
    """
    for attempt in range(MAX_CONFLICT_SKIPS + 1):
        try:
            create(executor_id)
            return executor_id
        except PodConflict:
            if attempt == MAX_CONFLICT_SKIPS:
                raise
            taken, executor_id = executor_id, fresh_id()
            logger.warning(
                "A pod already holds executor id %d; using id %d instead.", taken, executor_id
            )
    raise AssertionError("unreachable")
