"""One shape for an allocation feature: what the round tells it, what it caps, how it shapes a pod.

A feature is a policy beside Spark's allocation rules: bad-node avoidance, OOM recovery mode, the
executors' claims, the registration timeout, decommission marks, the id ledger; next quota,
scheduling reasons and failure rules. Each one is

- a value made by its module's `plug(settings, parts)`, from its settings slice (one field of
  `compose.FeatureSettings`) and the `FeatureParts` every feature gets (the clock, the notice hub,
  the backend's pod operations, the driver view...); `plug` returns None when the feature is off;
- handed to the backend by one line of `compose.compose_backend`, and nothing else: no setter,
  no `attach`, no store subscription of its own;
- seen by the allocation only through `Feature`, the Protocol below. Every method has a default
  that does nothing, so a feature writes only the hooks it needs.

The hooks, in the order of an allocation round (and the thread each runs on):

- `observe(facts)`: each allocation round, once the outstanding requests are up to date and
  before any decision (the allocator's thread);
- `cap(state, wanted)`: for each profile about to create (its `ProfileState`), at most how many;
  called in composition order, each on what the one before allowed (the allocator's thread);
- `shape(executor)`: just before one pod is built, what the core decides about it
  (`PodDecisions`, which the adapter's builder writes) (a create worker: concurrently);
- `created(executor, pod, decisions)`: the API accepted the pod; raising fails the create, after
  the feature undid what it made (a create worker);
- `refused(executor, error)`: the API refused the create; a feature that takes it as capacity (a
  quota) keeps it from counting as a failure or backing the profile off (a create worker);
- `finished(outcome)`: the round's decisions are made (the allocator's thread);
- `killing(selector)`: the driver's KillExecutors, before those pods are deleted (the request
  worker);
- `removed(removal)`: the lifecycle manager reported an executor gone (the lifecycle's thread);
- `close()`: the backend stops, after the executor pods were deleted (the stopping thread).

A feature speaks to the driver only through the `NoticeHub` in its parts, and touches the cluster
only through the parts' ports (`PodOperations`, the claim and resize calls: the composer's,
counted by whoever composed them). Work a feature does on its own schedule, not the round's (the
in-place resize, every minute), runs on the parts' `scheduler`, so a slow API call there never
holds an allocation round back.
A hook that raises is logged and the round goes on (a failing `cap` holds that profile back for
the round); `shape` and `created` raise into the create, which is then classified as any failed
create.

The shape follows controller-runtime's `Manager.Add(Runnable)` (one small interface, one place
that adds), stamina's hooks (a hook hears a value describing the event, never the machinery) and
temporal's worker plugins (a plugin configures what is being built, then takes part in the run),
and kopf's root tasks (the composition lists every one of them in one place).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from execpods.core.allocation import ProfileState
from execpods.core.errors import PodOperationError
from execpods.core.notices import NoticeHub
from execpods.core.ports import (
    NO_DECISIONS,
    ClaimOperations,
    Clock,
    DriverView,
    ExecutorExited,
    ExecutorRemoval,
    PodDecisions,
    PodOperations,
    PodSelector,
    ResizeOperations,
    Scheduler,
)
from execpods.core.progress import ProgressMonitor
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot

__all__ = [
    "ExpectRemoval",
    "Feature",
    "FeatureParts",
    "FeatureSet",
    "NewExecutor",
    "RoundFacts",
    "RoundOutcome",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundFacts:
    """What an allocation round starts from."""

    app_id: str
    snapshot: ExecutorPodsSnapshot
    """The round's latest snapshot."""
    batch: Sequence[ExecutorPodsSnapshot] = ()
    """Every snapshot since the last round (a pod may have passed through states the latest no
    longer shows)."""
    known: frozenset[int] = frozenset()
    """The executors the driver knows."""
    now: float = 0.0
    """Wall-clock seconds (the backend's clock)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewExecutor:
    """One executor about to be created."""

    app_id: str
    executor_id: int
    resource_profile_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundOutcome:
    """What an allocation round decided."""

    states: tuple[ProfileState, ...] = ()
    """Every profile with a target, as the round classified it (after scale-down)."""
    created: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    """Executors whose creates the round sent, by profile (accepted or answer lost)."""


ExpectRemoval = Callable[[int, ExecutorExited], None]
"""Tell the lifecycle manager the reason to report when an executor is next removed (a feature
that deletes a pod for a reason of its own)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureParts:
    """What `compose_backend` hands every feature's `plug`: the backend's own parts."""

    app_id: str
    settings: CoreSettings
    clock: Clock
    notices: NoticeHub
    """The backend's one notice hub: every stream, the metrics and tests hear what is told."""
    pod_operations: PodOperations
    """The backend's pod operations (the sidecar's are counted in its metrics)."""
    driver: DriverView
    expect_removal: ExpectRemoval
    progress: ProgressMonitor
    """The backend's one account of whether allocation can progress: a feature that finds it
    cannot says so here (`stall`/`resume`), and the driver and health hear it."""
    scheduler: Scheduler
    """Runs a feature's periodic work off the allocation's threads (a task of its own, as Spark's
    driver plugins have): schedule it from the first `observe` (the backend has started) and
    cancel it in `close`."""
    claims: ClaimOperations | None = None
    """The adapter's claim calls (None: the composer gave none, so no claims are made)."""
    resize: ResizeOperations | None = None
    """The adapter's in-place resize calls (the sidecar's are counted in its metrics; None: the
    composer gave none, so no executor is resized)."""


class Feature(Protocol):
    """An allocation feature, as the allocation sees it; every hook does nothing by default."""

    def observe(self, facts: RoundFacts) -> None:
        """An allocation round starts from `facts`."""
        return

    def cap(self, state: ProfileState, wanted: int) -> int:
        """At most how many of `wanted` new executors of `state`'s profile this round may create
        (`state`: its target, running, pending and requested-but-unseen executors, as the round
        classified them after scale-down)."""
        return wanted

    def shape(self, executor: NewExecutor) -> PodDecisions:
        """What the core decides about the pod of `executor` (thread-safe: creates run
        concurrently)."""
        return NO_DECISIONS

    def created(self, executor: NewExecutor, pod_name: str, decisions: PodDecisions) -> None:
        """The API accepted the pod `pod_name` of `executor`, built with `decisions`. Raising
        fails the create; the feature undoes what it made first."""
        return

    def refused(self, executor: NewExecutor, error: PodOperationError) -> bool:
        """The API refused the create of `executor` (403, 422: `error` says why). True takes the
        refusal as the cluster's capacity (a quota), not a failure: it is then neither counted
        toward `spark.executor.maxNumFailures` nor backed off, and this feature tells the
        driver."""
        return False

    def finished(self, outcome: RoundOutcome) -> None:
        """The allocation round's decisions are made."""
        return

    def killing(self, selector: PodSelector) -> None:
        """The driver asked for the executors of `selector` to go; their pods are deleted next."""
        return

    def removed(self, removal: ExecutorRemoval) -> None:
        """The lifecycle manager reported an executor gone, and why."""
        return

    def close(self) -> None:
        """The backend stops (its executor pods were deleted): release what the feature holds."""
        return


class FeatureSet:
    """The features of one backend, in composition order, called as one `Feature`.

    It is also the removal channel's observer (`LifecycleObserver`): each removal reaches every
    feature's `removed`.
    """

    def __init__(self, features: Iterable[Feature | None]) -> None:
        self._features = tuple(f for f in features if f is not None)

    def __iter__(self) -> Iterator[Feature]:
        return iter(self._features)

    def _each(self, hook: str, call: Callable[[Feature], object]) -> None:
        for feature in self._features:
            try:
                call(feature)
            except Exception:
                logger.exception("Feature %s failed in %s", type(feature).__name__, hook)

    def observe(self, facts: RoundFacts) -> None:
        self._each("observe", lambda f: f.observe(facts))

    def cap(self, state: ProfileState, wanted: int) -> int:
        allowed = wanted
        for feature in self._features:
            if allowed <= 0:
                return 0
            try:
                allowed = min(allowed, feature.cap(state, allowed))
            except Exception:
                logger.exception(
                    "Feature %s failed to cap resource profile %d: held back this round",
                    type(feature).__name__,
                    state.profile_id,
                )
                return 0
        return max(0, allowed)

    def shape(self, executor: NewExecutor) -> PodDecisions:
        decisions = NO_DECISIONS
        for feature in self._features:
            decisions = decisions.joined(feature.shape(executor))
        return decisions

    def created(self, executor: NewExecutor, pod_name: str, decisions: PodDecisions) -> None:
        for feature in self._features:
            feature.created(executor, pod_name, decisions)

    def refused(self, executor: NewExecutor, error: PodOperationError) -> bool:
        taken = False
        for feature in self._features:  # every feature hears it, whoever takes it
            try:
                taken = feature.refused(executor, error) or taken
            except Exception:
                logger.exception("Feature %s failed on a refused create", type(feature).__name__)
        return taken

    def finished(self, outcome: RoundOutcome) -> None:
        self._each("finished", lambda f: f.finished(outcome))

    def killing(self, selector: PodSelector) -> None:
        self._each("killing", lambda f: f.killing(selector))

    def removed(self, removal: ExecutorRemoval) -> None:
        self._each("removed", lambda f: f.removed(removal))

    def close(self) -> None:
        self._each("close", lambda f: f.close())

    # LifecycleObserver: the removal channel hands each removal to the features.

    def round_started(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """Nothing: features hear the allocation round (`observe`)."""

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        self.removed(removal)

    def application_failed(self, message: str) -> None:
        """Nothing: allocation has stopped for good."""
