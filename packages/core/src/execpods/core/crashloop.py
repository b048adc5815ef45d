"""The crash-loop brake: when executors fail at start faster than a rate, requests pause and resume.

A bad image tag that exists, a missing class, a config file the executor cannot read, an init
container that cannot fetch its dependencies: every executor fails within seconds of starting.
Spark (and execpods without the brake) requests a replacement for each at full speed, so the
failure budget (`spark.executor.maxNumFailures`) is spent in seconds and the API server takes a
create and a delete per failure. Flink's resource manager pauses instead: above
`resourcemanager.start-worker.max-failure-rate` (10 a minute) it postpones worker requests by
`resourcemanager.start-worker.retry-interval` (3 s). The brake does the same, and grows the pause:

- an executor *failed at start* when its pod failed before its executor container had run
  `execpods.crashLoop.startWindow` (60 s): the container never started (an init container or the
  kubelet failed the pod), or it exited that soon. A disruption the failure rules ignore (an
  eviction or preemption, `failurerules.py`) is none; a failure another rule ignores is one: it
  spares the failure budget, but costs a create and a delete like any other;
- when `execpods.crashLoop.maxFailureRate` (10) such failures fall within one minute, requests
  pause for `execpods.crashLoop.retryInterval` (3 s), doubling on each pause that follows up to
  `execpods.crashLoop.maxRetryInterval` (5 min), with a notice each time;
- after a pause requests resume on their own (a notice says so), but *probing*: at most
  `maxFailureRate` executors of a resource profile may be in their start window at once (pending,
  or running for less than `startWindow`), so a loop that goes on spends at most that many
  failures before the next, longer pause. A minute without a start
  failure ends the probing and forgets the pauses.

So after the first pause the failure budget drains at most `maxFailureRate` executors per pause,
with pauses 3 s, 6 s, 12 s... 5 min: a crash loop that lasts an hour spends about 10 failures
per 5 minutes instead of hundreds a minute, and a transient one (a dependency restarting) costs a
few seconds. `maxFailureRate=0` turns the brake off.

Pure and clock-free: the allocator's round tells it the failures it sees and asks how many
executors may be requested now.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from execpods.core.allocation import ProfileState
from execpods.core.failurerules import FailureRules, parse_rules
from execpods.core.features import Feature, FeatureParts, RoundFacts
from execpods.core.labels import ExecutorLabels
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.pods import ContainerRunning, ContainerTerminated
from execpods.core.ports import DEFAULT_RESOURCE_PROFILE_ID, Clock
from execpods.core.profiles import profile_id_of
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    non_negative,
    parse_float,
    positive,
    setting,
)
from execpods.core.states import ExecutorState, ObservedPod, disruption_of

__all__ = ["CrashLoopBrake", "CrashLoopFeature", "CrashLoopSettings", "failed_at_start", "plug"]

logger = logging.getLogger(__name__)

RATE_WINDOW = 60.0
"""The rate is per minute, as Flink's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashLoopSettings(SettingsBase):
    """The crash-loop brake (Flink's start-worker failure rate): pause requests on a crash loop."""

    max_failure_rate: float = setting(
        "execpods.crashLoop.maxFailureRate",
        10.0,
        "Executors failing at start per minute that pause requests (Flink's "
        "resourcemanager.start-worker.max-failure-rate); after a pause at most this many start "
        "at once until a minute passes without a start failure. 0 turns the brake off.",
        parse=parse_float,
        rule=non_negative,
        default_text="10",
    )
    retry_interval: float = duration_setting(
        "execpods.crashLoop.retryInterval",
        "3s",
        "The first pause (Flink's resourcemanager.start-worker.retry-interval); each pause that "
        "follows without a quiet minute doubles it.",
        rule=positive,
    )
    max_retry_interval: float = duration_setting(
        "execpods.crashLoop.maxRetryInterval",
        "5min",
        "The longest pause.",
        rule=positive,
    )
    start_window: float = duration_setting(
        "execpods.crashLoop.startWindow",
        "60s",
        "An executor whose pod fails before its executor container ran this long failed at start "
        "(a pod that fails without it ever running, too).",
        rule=positive,
    )

    @property
    def enabled(self) -> bool:
        return self.max_failure_rate > 0


def failed_at_start(observed: ObservedPod, start_window: float) -> bool:
    """Whether this failed executor failed at start: its executor container never ran, or ran
    less than `start_window` seconds (a container whose run times are unknown did not)."""
    if observed.state is not ExecutorState.FAILED:
        return False
    container = observed.executor_container()
    state = None if container is None else container.state
    if not isinstance(state, ContainerTerminated):
        return True  # it never ran: an init container or the kubelet failed the pod
    if state.started_at is None or state.finished_at is None:
        return False
    return (state.finished_at - state.started_at).total_seconds() < start_window


class CrashLoopBrake:
    """Start failures in the last minute, the pause in force, and the probing after it."""

    def __init__(self, settings: CrashLoopSettings) -> None:
        self._settings = settings
        self._failures: deque[float] = deque()
        self._counted: set[int] = set()
        self._paused_until: float | None = None
        self._probing_since: float | None = None
        self._pauses = 0
        """Pauses since the last quiet minute: the next pause is retryInterval x 2^pauses."""
        self._last: str = ""
        self.trips = 0
        """Pauses since start (for the metrics)."""

    @property
    def probe_limit(self) -> int:
        """Executors that may be starting at once while probing."""
        return max(1, math.ceil(self._settings.max_failure_rate))

    @property
    def paused(self) -> bool:
        return self._paused_until is not None

    @property
    def probing(self) -> bool:
        return self._probing_since is not None

    def pause_left(self, now: float) -> float:
        return 0.0 if self._paused_until is None else max(0.0, self._paused_until - now)

    def start_failures(self, now: float) -> int:
        """Start failures within the last minute."""
        self._forget_old(now)
        return len(self._failures)

    def _forget_old(self, now: float) -> None:
        while self._failures and self._failures[0] <= now - RATE_WINDOW:
            self._failures.popleft()

    def failed(self, executor_id: int, detail: str, now: float) -> AllocatorNotice | None:
        """One executor failed at start (`detail` says how); returns the notice of a pause it
        causes. The same executor is counted once, however many snapshots show it."""
        if not self._settings.enabled or executor_id in self._counted:
            return None
        self._counted.add(executor_id)
        self._failures.append(now)
        self._last = detail
        self._forget_old(now)
        if self._paused_until is not None or len(self._failures) < self._settings.max_failure_rate:
            return None
        pause = min(
            self._settings.max_retry_interval,
            self._settings.retry_interval * 2.0 ** min(self._pauses, 30),
        )
        self._pauses += 1
        self.trips += 1
        self._paused_until = now + pause
        self._probing_since = None
        message = (
            f"{len(self._failures)} executors failed at start within the last minute (more than "
            f"execpods.crashLoop.maxFailureRate={self._settings.max_failure_rate:g} a minute): "
            f"new executors are not requested for {pause:.0f} s (pause {self._pauses}; each "
            f"pause while this goes on is twice as long, up to "
            f"{self._settings.max_retry_interval:.0f} s). Last: {detail}"
        )
        logger.warning(message)
        return AllocatorNotice(
            kind=NoticeKind.CRASH_LOOP_PAUSED,
            message=message,
            resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
            count=len(self._failures),
            retry_in=pause,
        )

    def tick(self, now: float) -> AllocatorNotice | None:
        """Time passed: a pause that is over resumes (probing; the notice says so), and a quiet
        minute of probing ends it and forgets the pauses."""
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._probing_since = now
            message = (
                f"The crash-loop pause is over: executors are requested again, at most "
                f"{self.probe_limit} starting at once until a minute passes without a start "
                "failure."
            )
            logger.info(message)
            return AllocatorNotice(
                kind=NoticeKind.CRASH_LOOP_RESUMED,
                message=message,
                resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
                count=0,
            )
        if self._probing_since is not None:
            last = self._failures[-1] if self._failures else self._probing_since
            if now - max(last, self._probing_since) >= RATE_WINDOW:
                self._probing_since = None
                self._pauses = 0
                logger.info(
                    "No executor failed at start for a minute: the crash-loop brake is off."
                )
        return None

    def allowed(self, *, starting: int, wanted: int) -> int:
        """How many of `wanted` executors may be requested now, with `starting` requested ones not
        running yet (over every profile)."""
        if self._paused_until is not None:
            return 0
        if self._probing_since is not None:
            return max(0, min(wanted, self.probe_limit - starting))
        return wanted

    def observe(
        self, observed: Iterable[tuple[int, ObservedPod, str]], now: float
    ) -> list[AllocatorNotice]:
        """Count every (executor id, failed pod, detail) that failed at start; the notices of the
        pauses this causes."""
        notices = []
        for executor_id, pod, detail in observed:
            if failed_at_start(pod, self._settings.start_window):
                notice = self.failed(executor_id, detail, now)
                if notice is not None:
                    notices.append(notice)
        return notices


def plug(settings: CrashLoopSettings, parts: FeatureParts) -> CrashLoopFeature | None:
    """On unless `execpods.crashLoop.maxFailureRate=0`; the failure rules tell it which failures
    are disruptions they ignore (an ignored preemption is no start failure)."""
    if not settings.enabled:
        return None
    core = parts.settings
    rules = FailureRules(
        parse_rules(core.failure_rules),
        count_disruptions=core.count_disruptions,
        executor_container=core.executor_container_name,
    )
    return CrashLoopFeature(
        settings, rules=rules, labels=core.labels, notices=parts.notices, clock=parts.clock
    )


def _detail(executor_id: int, observed: ObservedPod) -> str:
    """How an executor failed at start, for the notice."""
    container = observed.executor_container()
    state = None if container is None else container.state
    pod = observed.pod
    if isinstance(state, ContainerTerminated):
        ran = (
            ""
            if state.started_at is None or state.finished_at is None
            else f" after {(state.finished_at - state.started_at).total_seconds():.0f} s"
        )
        why = f", {state.reason}" if state.reason else ""
        return f"executor {executor_id} exited with code {state.exit_code}{why}{ran}"
    reason = pod.reason or "its pod failed"
    message = f": {pod.message}" if pod.message else ""
    return f"executor {executor_id} never started ({reason}{message})"


class CrashLoopFeature(Feature):
    """The brake in the allocation: counts start failures each round, holds creates while paused,
    and allows only a probe's worth of starting executors after a pause."""

    def __init__(
        self,
        settings: CrashLoopSettings,
        *,
        rules: FailureRules,
        labels: ExecutorLabels,
        notices: NoticeHub,
        clock: Clock,
    ) -> None:
        self.brake = CrashLoopBrake(settings)
        self._settings = settings
        self._labels = labels
        self._starting: dict[int, int] = {}
        """While probing: each profile's executors in their start window."""
        self._rules = rules
        self._notices = notices
        self._clock = clock

    def observe(self, facts: RoundFacts) -> None:
        now = self._clock.monotonic()
        failed: list[tuple[int, ObservedPod, str]] = []
        for snapshot in facts.batch or (facts.snapshot,):
            if snapshot.count(ExecutorState.FAILED) == 0:
                continue  # no failed executor in it (a count the snapshot keeps)
            pods = snapshot.executor_pods
            ids = pods.keys() if snapshot.changed_ids is None else snapshot.changed_ids
            for executor_id in ids:
                observed = pods.get(executor_id)
                if observed is None or observed.state is not ExecutorState.FAILED:
                    continue
                if self._start_failure(observed):
                    failed.append((executor_id, observed, _detail(executor_id, observed)))
        notices = self.brake.observe(failed, now)
        resumed = self.brake.tick(now)
        self._starting = self._count_starting(facts) if self.brake.probing else {}
        for notice in [*notices, *([resumed] if resumed is not None else [])]:
            self._notices.notify(notice)

    def _start_failure(self, observed: ObservedPod) -> bool:
        """A failure the rules count, or one they ignore that is no disruption: an `Ignore` rule
        on an exit code spares the failure budget, not the API (each such executor still costs a
        create and a delete), while an ignored eviction or preemption is the cluster's doing."""
        if self._rules.decide(observed.pod).counted:
            return True
        return disruption_of(observed.pod) is None

    def _count_starting(self, facts: RoundFacts) -> dict[int, int]:
        """Each profile's executors still in their start window: pending, or running for less
        than `startWindow` (or for a time the pod does not say)."""
        window = self._settings.start_window
        starting: dict[int, int] = {}
        for observed in facts.snapshot.executor_pods.values():
            if observed.state is ExecutorState.RUNNING:
                container = observed.executor_container()
                state = None if container is None else container.state
                started = state.started_at if isinstance(state, ContainerRunning) else None
                if started is not None and facts.now - started.timestamp() >= window:
                    continue
            elif observed.state is not ExecutorState.PENDING:
                continue
            profile_id = profile_id_of(observed.pod, self._labels)
            starting[profile_id] = starting.get(profile_id, 0) + 1
        return starting

    def cap(self, state: ProfileState, wanted: int) -> int:
        starting = self._starting.get(state.profile_id, 0) + len(state.unseen) + state.unseen_known
        return self.brake.allowed(starting=starting, wanted=wanted)
