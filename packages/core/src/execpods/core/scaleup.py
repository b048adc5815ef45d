"""Scale-up: what each profile misses asked for, as the features allow, and the pods created.

Spark's rules decide how many (`allocation.request_counts`: the batch size, the pending caps,
profiles held back by refusals or `waitForPendingPods`); then each profile, in ascending id, is
capped by the features in composition order (the id ledger first: only reserved ids are issued),
its pods are created in adaptive steps (`creator.PodCreator`), and every create that was sent goes
into the book of outstanding requests (`book.py`).
"""

from __future__ import annotations

import logging

from execpods.core.allocation import Limits, ProfileState, request_counts
from execpods.core.book import RequestBook
from execpods.core.creator import PodCreator
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import FeatureSet
from execpods.core.ids import ExecutorIds
from execpods.core.settings import CoreSettings

__all__ = ["ScaleUp"]

logger = logging.getLogger(__name__)


class ScaleUp:
    """One round's creates; the allocator's thread only."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        creator: PodCreator,
        features: FeatureSet,
        ids: ExecutorIds,
        book: RequestBook,
        failures: ExecutorFailureTracker | None,
    ) -> None:
        self._settings = settings
        self._creator = creator
        self._features = features
        self._ids = ids
        self._book = book
        self._failures = failures

    def run(self, app_id: str, states: list[ProfileState]) -> dict[int, int]:
        """Ask for what each profile misses, as the features allow; the creates sent."""
        if self._failures is not None and self._failures.application_failure is not None:
            return {}  # too many executors failed (spark.executor.maxNumFailures): stopped for good
        settings = self._settings
        held = {s.profile_id for s in states if self._creator.held(s.profile_id)}
        if settings.wait_for_pending_pods:
            held.update(s.profile_id for s in states if s.pending_unknown or s.pending_known)
        for state in states:
            if state.unseen and state.running < state.target:
                logger.debug(
                    "Still waiting for %d executors of resource profile %d requested but not yet "
                    "seen before requesting more (%d pending in the cluster).",
                    len(state.unseen),
                    state.profile_id,
                    len(state.pending_unknown) + state.pending_known,
                )
        counts = request_counts(
            states,
            limits=Limits(
                max_pending=settings.max_pending_pods,
                max_pending_per_rp=settings.max_pending_pods_per_rp,
            ),
            batch_sizes={s.profile_id: self._creator.round_cap(s.profile_id) for s in states},
            held=held,
        )
        by_profile = {s.profile_id: s for s in states}
        created: dict[int, int] = {}
        for profile_id, count in counts.items():
            allowed = self._features.cap(by_profile[profile_id], count)  # the id ledger first
            if allowed <= 0:
                continue
            state = by_profile[profile_id]
            logger.info(
                "Going to request %d executors from Kubernetes for resource profile %d "
                "(target %d, %d running, %d not running).",
                allowed,
                profile_id,
                state.target,
                state.running,
                state.not_running,
            )
            requested = self._creator.create(
                app_id=app_id, profile_id=profile_id, count=allowed, ids=self._ids
            )
            self._book.add_requested(requested)
            created[profile_id] = len(requested)
        return created
