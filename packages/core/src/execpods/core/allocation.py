"""The allocation decision as pure functions: what a profile has, what to ask for, what to drop.

Newest Spark's `ExecutorPodsAllocator.onNewSnapshots` (4.2) decides per resource profile, in
ascending id, from four kinds of not-yet-running executors: pending pods the driver does not know,
pending pods it does know, requested-but-unseen executors it does not know, and requested-but-unseen
ones it does know (an executor can register before its pod shows in any snapshot). Everything here
is a function of those counts, so the rules can be tested, and proved with hypothesis, without a
store, a clock or an API.

The rules, as Spark:
- A profile gets a new batch only when none of its requested executors is still unseen (no stall on
  pending pods, SPARK-33262: pending pods count towards the target but do not block).
- The free pending slots (`maxPendingPods` minus every not-running executor) are split fairly
  among the profiles that want pods (`split_slots`); each profile is also held to
  `maxPendingPodsPerRp` minus its own not-running executors, and to the batch size.
- On scale-down the excess goes: unseen requests older than the idle timeout first, then Pending
  pods older than the idle timeout that the driver does not know. A running executor, or one the
  driver knows, is never picked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from execpods.core.labels import ExecutorLabels
from execpods.core.profiles import profile_id_of
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.states import ExecutorState

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorCounts:
    """What the latest snapshot says, per state, for one allocation decision."""

    running: int
    pending: int

    @classmethod
    def of(cls, snapshot: ExecutorPodsSnapshot) -> ExecutorCounts:
        return cls(
            running=snapshot.count(ExecutorState.RUNNING),
            pending=snapshot.count(ExecutorState.PENDING),
        )


def split_slots(consumers: Sequence[T], slots: int) -> list[tuple[T, int]]:
    """Share `slots` among `consumers` as evenly as integers allow; the first ones get the rest.

    Spark's `splitSlots` (SPARK-36052): 4 slots over (a, b, c) are (a, 2), (b, 1), (c, 1).
    """
    if not consumers:
        return []
    share, rest = divmod(max(slots, 0), len(consumers))
    return [(c, share + (1 if index < rest else 0)) for index, c in enumerate(consumers)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileState:
    """One profile's executors in one round, as the allocator classified them."""

    profile_id: int
    target: int
    running: int
    pending_unknown: tuple[int, ...] = ()
    """Ids of Pending pods the driver does not know, oldest id first."""
    pending_known: int = 0
    unseen: tuple[int, ...] = ()
    """Ids requested but in no snapshot yet, that the driver does not know, oldest first."""
    unseen_known: int = 0

    @property
    def not_running(self) -> int:
        return len(self.pending_unknown) + self.pending_known + len(self.unseen) + self.unseen_known

    @property
    def pod_count(self) -> int:
        return self.running + self.not_running

    @property
    def wants_more(self) -> bool:
        """Spark's gate: below target and nothing of this profile requested-but-unseen."""
        return not self.unseen and self.pod_count < self.target


class Outstanding(Protocol):
    """The book of outstanding requests as the decision reads it (`book.RequestBook`)."""

    def unseen_of(self, profile_id: int) -> Sequence[int]:
        """Requests of the profile no snapshot showed, the driver does not know, oldest first."""

    def known_count(self, profile_id: int) -> int:
        """Requests of the profile no snapshot showed that the driver knows."""


def classify(
    snapshot: ExecutorPodsSnapshot,
    *,
    targets: Mapping[int, int],
    labels: ExecutorLabels,
    known: Collection[int],
    deleted: Collection[int],
    book: Outstanding,
) -> list[ProfileState]:
    """Every profile with a target, classified from the snapshot, in ascending id.

    A pod scale-down deleted (`deleted`) counts for nothing; a Running pod being deleted counts
    as running until it is gone (Spark 4.3's toState makes it PodRunning: no replacement while
    it shuts down). `book` holds the outstanding requests (`book.RequestBook`)."""
    running: dict[int, int] = dict.fromkeys(targets, 0)
    pending_unknown: dict[int, list[int]] = {p: [] for p in targets}
    pending_known: dict[int, int] = dict.fromkeys(targets, 0)
    for executor_id, observed in snapshot.executor_pods.items():
        kind = observed.state
        if kind is ExecutorState.TERMINATING and (observed.pod.phase or "").lower() == "running":
            kind = ExecutorState.RUNNING
        if (kind is not ExecutorState.RUNNING and kind is not ExecutorState.PENDING) or (
            executor_id in deleted
        ):
            continue
        profile_id = profile_id_of(observed.pod, labels)
        if profile_id not in targets:
            continue
        if kind is ExecutorState.RUNNING:
            running[profile_id] += 1
        elif executor_id in known:
            pending_known[profile_id] += 1
        else:
            pending_unknown[profile_id].append(executor_id)
    return [
        ProfileState(
            profile_id=profile_id,
            target=targets[profile_id],
            running=running[profile_id],
            pending_unknown=tuple(sorted(pending_unknown[profile_id])),
            pending_known=pending_known[profile_id],
            unseen=tuple(book.unseen_of(profile_id)),
            unseen_known=book.known_count(profile_id),
        )
        for profile_id in sorted(targets)
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class Excess:
    """What scale-down deletes for one profile."""

    unseen: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(sorted((*self.unseen, *self.pending)))

    def __bool__(self) -> bool:
        return bool(self.unseen or self.pending)


def excess_to_delete(
    state: ProfileState,
    *,
    request_ages: Mapping[int, float],
    pending_ages: Mapping[int, float | None],
    idle_timeout: float,
) -> Excess:
    """The requests and Pending pods to drop when a profile has more pods than its target.

    Only candidates older than `idle_timeout` go (so a target that flickers does not churn pods),
    unseen requests first, then Pending pods. Ages are in seconds; a Pending pod of unknown age
    is old enough (as Spark: it cannot be shown to be young). Both kinds are only those the
    driver does not know; running executors are never candidates.
    """
    excess = state.pod_count - state.target
    if excess <= 0:
        return Excess()
    unseen = [i for i in state.unseen if request_ages.get(i, 0.0) > idle_timeout][:excess]
    room = excess - len(unseen)
    pending = [i for i in state.pending_unknown if _older(pending_ages.get(i), idle_timeout)]
    return Excess(unseen=tuple(unseen), pending=tuple(pending[: max(room, 0)]))


def _older(age: float | None, idle_timeout: float) -> bool:
    return age is None or age > idle_timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The caps one round works within."""

    max_pending: int
    max_pending_per_rp: int


def request_counts(
    states: Iterable[ProfileState],
    *,
    limits: Limits,
    batch_sizes: Mapping[int, int],
    held: Collection[int] = (),
) -> dict[int, int]:
    """How many executors each profile may request this round (those that want none are left out).

    `states` are after scale-down. Per wanting profile: min(missing, its batch size, its fair share
    of the free global pending slots, its own free pending slots). Profiles in `held` (backing off,
    or waiting for pending pods under the 2018 rule) count towards the caps but request nothing.
    """
    ordered = sorted(states, key=lambda s: s.profile_id)
    total_not_running = sum(s.not_running for s in ordered)
    wanting = [s for s in ordered if s.wants_more and s.profile_id not in held]
    free = limits.max_pending - total_not_running
    if free <= 0 or not wanting:
        return {}
    counts: dict[int, int] = {}
    for state, shared in split_slots(wanting, free):
        own_free = limits.max_pending_per_rp - state.not_running
        count = min(
            state.target - state.pod_count,
            batch_sizes.get(state.profile_id, 0),
            shared,
            own_free,
        )
        if count > 0:
            counts[state.profile_id] = count
    return counts
