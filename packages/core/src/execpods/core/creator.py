"""Making a round's creates: adaptive steps, concurrency, outcomes, backoff and notices.

The allocator decides how many executors each profile gets (`allocation.py`); a `PodCreator`
makes them: in steps sized by the profile's `AdaptiveBatch`, each step's creates run together on
the `CreateRunner` (at most `execpods.allocation.batch.concurrency` in flight), and every
outcome is booked: created and unknown-outcome creates are handed back for the allocator to track,
refusals and throttling back off (`CreateBackoff`) and shrink the batch, and every failure is
counted and told to the notice listeners. Nothing here raises out of a round (SPARK-55075).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from execpods.core.adaptive import API_RATE_CEILING, AdaptiveBatch, StartTracker, round_ceiling
from execpods.core.creation import (
    CreateBackoff,
    CreateResult,
    CreateRunner,
    SerialRunner,
    classify_create_error,
)
from execpods.core.errors import ApiThrottled, PodOperationError
from execpods.core.failures import ExecutorFailureTracker
from execpods.core.features import Feature, FeatureSet, NewExecutor
from execpods.core.ids import ExecutorIds, IdsUnavailable
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import Clock, ExecutorPodBuilder, PodOperations
from execpods.core.recovery import create_skipping_taken_ids
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Outcome:
    executor_id: int
    result: CreateResult
    error: Exception | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Requested:
    """An executor whose pod was (or may have been) created, to track until a snapshot shows it."""

    executor_id: int
    resource_profile_id: int
    at: float
    """Monotonic time of the step that created it."""
    answer_lost: bool = False
    """The create failed without an answer: the pod may or may not exist."""


class PodCreator:
    """The allocator's hands: creates one profile's pods at a time, and learns from how it went."""

    def __init__(
        self,
        *,
        settings: CoreSettings,
        pod_builder: ExecutorPodBuilder,
        pod_operations: PodOperations,
        clock: Clock,
        notices: NoticeHub,
        features: Feature | None = None,
        runner: CreateRunner | None = None,
        rng: random.Random | None = None,
        failure_tracker: ExecutorFailureTracker | None = None,
        api_rate_ceiling: float = API_RATE_CEILING,
    ) -> None:
        """`api_rate_ceiling`: the most API calls a second the client's rate policy may ever
        allow (the adapter's settings say it), which sizes a round."""
        self._settings = settings
        self._failures = failure_tracker
        self._builder = pod_builder
        self._pods = pod_operations
        self._clock = clock
        self._notices = notices
        self._features: Feature = features if features is not None else FeatureSet(())
        self._runner: CreateRunner = runner if runner is not None else SerialRunner()
        self._backoff = CreateBackoff(base=settings.batch_delay, rng=rng)
        self._batches: dict[int, AdaptiveBatch] = {}
        self._ceiling = round_ceiling(
            batch_size=settings.batch_size,
            api_qps=api_rate_ceiling,
            batch_delay=settings.batch_delay,
        )
        self.starts = StartTracker()
        self._lock = threading.Lock()

    # What the allocator's decision needs.

    def held(self, profile_id: int) -> bool:
        """Whether this profile is backing off (refusals) or every create is paused (throttling)."""
        return self._backoff.wait_for(profile_id, self._clock.monotonic()) > 0

    def round_cap(self, profile_id: int) -> int:
        """The most creates the profile's next round may make."""
        return self._batch(profile_id).round_cap

    def observe_starts(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Note executors that failed to start since the last round: every profile slows down.

        Every snapshot of the batch is seen: an executor that ran and then failed within one
        batch delay started (its failure is the lifecycle manager's), it did not fail to start."""
        failures = self.starts.observe_all(snapshots)
        if failures:
            logger.warning("%d executors failed to start; creating more slowly.", failures)
            for batch in self._batches.values():
                batch.trouble()

    # Creating.

    def create(
        self,
        *,
        app_id: str,
        profile_id: int,
        count: int,
        ids: ExecutorIds,
    ) -> list[Requested]:
        """Create up to `count` pods of `profile_id` in adaptive steps; returns what to track.

        Each create takes its id from `ids` just before it is sent (from any thread), so a create
        held back is no id spent; ids are spent on refused creates, as Spark; a throttled create
        made no pod and hands its id back; an id whose pod name is taken is skipped. The steps
        stop at the first that did not go cleanly, or when backing off.
        """
        batch = self._batch(profile_id)
        requested: list[Requested] = []
        for step in batch.steps(count):
            if self.held(profile_id):
                break
            started = self._clock.monotonic()
            outcomes = self._runner.run(
                [partial(self._create_one, app_id, profile_id, ids) for _ in range(step)],
                self._settings.batch_concurrency,
            )
            requested.extend(
                Requested(
                    executor_id=o.executor_id,
                    resource_profile_id=profile_id,
                    at=started,
                    answer_lost=o.result is CreateResult.UNKNOWN,
                )
                for o in outcomes
                if o.result in (CreateResult.CREATED, CreateResult.UNKNOWN)
            )
            if not self._settle(app_id, profile_id, outcomes):
                batch.trouble()
                break
            batch.clean_step(step)
        return requested

    def _batch(self, profile_id: int) -> AdaptiveBatch:
        batch = self._batches.get(profile_id)
        if batch is None:
            batch = AdaptiveBatch(
                batch_size=self._settings.batch_size,
                ceiling=self._ceiling,
                enabled=self._settings.adaptive_batches,
            )
            self._batches[profile_id] = batch
        return batch

    def _create_one(self, app_id: str, profile_id: int, ids: ExecutorIds) -> _Outcome:
        """One create (on a runner thread): never raises, the outcome says what happened."""
        if self.held(profile_id):  # an earlier create of the step was throttled: do not send
            return _Outcome(0, CreateResult.NOT_SENT)
        try:
            used = [ids.next()]
        except IdsUnavailable:
            return _Outcome(0, CreateResult.NOT_SENT)

        def fresh_id() -> int:  # after a 409: the id is taken, skip past it at once
            used.append(ids.next())
            return used[-1]

        def create(executor_id: int) -> None:
            """Decide, build, create, and let the features follow up (their claims)."""
            executor = NewExecutor(
                app_id=app_id, executor_id=executor_id, resource_profile_id=profile_id
            )
            decisions = self._features.shape(executor)
            manifest = self._builder.build(
                executor_id=executor_id,
                app_id=app_id,
                resource_profile_id=profile_id,
                decisions=decisions,
            )
            self._pods.create(manifest)
            self._features.created(executor, str(manifest["metadata"]["name"]), decisions)

        try:
            executor_id = create_skipping_taken_ids(create, used[0], fresh_id)
        except IdsUnavailable:
            return _Outcome(0, CreateResult.NOT_SENT)
        except ApiThrottled as error:
            ids.give_back(used[-1])  # refused before it was applied: no pod holds the id
            with self._lock:  # the step's later creates see the pause at once and stay unsent
                self._backoff.throttled(error.retry_after, self._clock.monotonic())
            return _Outcome(used[-1], CreateResult.THROTTLED, error)
        except PodOperationError as error:
            result = CreateResult.UNKNOWN if error.outcome_unknown else None
            return _Outcome(used[-1], result or classify_create_error(error), error)
        except Exception as error:  # a builder bug or a client surprise must not end the round
            logger.exception("Creating the pod of executor %d failed unexpectedly", used[-1])
            return _Outcome(used[-1], CreateResult.FAILED, error)
        return _Outcome(executor_id, CreateResult.CREATED)

    def _settle(self, app_id: str, profile_id: int, outcomes: list[_Outcome]) -> bool:
        """Book a step's outcomes; report failures; returns whether every create went through."""
        created = [o.executor_id for o in outcomes if o.result is CreateResult.CREATED]
        self.starts.created(created)
        if created:
            self._backoff.succeeded(profile_id)
        failed = [
            o
            for o in outcomes
            if o.result is not CreateResult.CREATED
            and o.result is not CreateResult.NOT_SENT
            and not self._taken(app_id, profile_id, o)
        ]
        if not failed:
            return len(created) == len(outcomes)  # a create held back unsent is no clean step
        now = self._clock.monotonic()
        by_kind: dict[CreateResult, list[_Outcome]] = {}
        for outcome in failed:
            # A lost answer is tracked like a create, and paused for like a throttle.
            kind = CreateResult.THROTTLED if outcome.result is CreateResult.UNKNOWN else None
            by_kind.setdefault(kind or outcome.result, []).append(outcome)
        for result, group in by_kind.items():
            self._report(profile_id, result, group, now)
        return False

    def _taken(self, app_id: str, profile_id: int, outcome: _Outcome) -> bool:
        """Whether a feature takes this refusal as the cluster's capacity (a quota): then it is
        neither a failure nor a reason to back off, and the feature tells the driver."""
        if outcome.result is not CreateResult.REFUSED or not isinstance(
            outcome.error, PodOperationError
        ):
            return False
        executor = NewExecutor(
            app_id=app_id, executor_id=outcome.executor_id, resource_profile_id=profile_id
        )
        return self._features.refused(executor, outcome.error)

    def _report(
        self, profile_id: int, result: CreateResult, group: list[_Outcome], now: float
    ) -> None:
        first = group[0].error
        detail = f"{type(first).__name__}: {first}" if first is not None else "unknown error"
        if result is CreateResult.REFUSED:
            wait = self._backoff.refused(profile_id, now)
            kind = NoticeKind.CREATE_REFUSED
            what = f"refused (admission or an invalid pod); retrying in {wait:.1f} s"
        elif result is CreateResult.POLICY:
            wait = self._backoff.refused(profile_id, now)
            kind = NoticeKind.ADMISSION_POLICY_REFUSED
            policy = getattr(first, "policy", "admission policy")
            what = (
                f"refused by the namespace's {policy} (not counted as executor failures: fix the "
                f"executors' requests and limits); retrying in {wait:.1f} s"
            )
        elif result is CreateResult.THROTTLED:
            wait = self._backoff.throttled(getattr(first, "retry_after", None), now)
            kind = NoticeKind.CREATE_THROTTLED
            what = f"throttled or unavailable; pausing creates for {wait:.1f} s"
        else:
            wait = 0.0
            kind = NoticeKind.CREATE_FAILED
            what = "failed; retrying next round"
        if self._failures is not None and result in (CreateResult.REFUSED, CreateResult.FAILED):
            # Refused or failed creates are executors that will not serve the application;
            # throttling only paces us, and namespace policy is no executor's failure.
            self._failures.register_failures(len(group))
        ids = ",".join(str(o.executor_id) for o in group)
        message = f"{len(group)} executor pod creates of resource profile {profile_id} {what} "
        message += f"(executors {ids}; first error {detail})"
        logger.warning(message)
        self._notices.notify(
            AllocatorNotice(
                kind=kind,
                message=message,
                resource_profile_id=profile_id,
                count=len(group),
                retry_in=wait,
            )
        )
