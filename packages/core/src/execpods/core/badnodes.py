"""Bad-node avoidance: executors keep away from a node on which they keep failing.

Flink's blocklist, for executor pods: every executor that fails on a node (its pod Failed, or
its container unable to start: an image that cannot be pulled, a container that cannot be made)
counts against that node; once a node has `execpods.badNodes.maxFailures` failures within
`execpods.badNodes.failureWindow`, it is blocked for `execpods.badNodes.coolDown`: new executor
pods avoid every blocked node (`PodDecisions.avoid_nodes`, which the adapter's builder writes as a
required node anti-affinity on the hostname).
Executors already running there are left alone. Blocking and lifting are `AllocatorNotice`s
(NODE_BLOCKED, NODE_UNBLOCKED) on every stream, and counted in the metrics. A block that leaves
no node the application's executors ran on unblocked says so (its notice's reason is
`EveryNodeBlocked`, and a WARNING): new executors may then stay Pending until a cool-down ends.

Off by default: most executor failures are the application's (an OOM, an exception), not the
node's, and on a small cluster keeping executors off a few nodes can leave them Pending with room
nowhere else; Spark's excludeOnFailure is off by default for the same reasons. A failure the
driver caused (it killed the executor), a pod deleted from outside, a preemption or an API
eviction (a drain) does not count; a kubelet's eviction under node pressure does.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from dataclasses import dataclass

from execpods.core.adaptive import start_failed
from execpods.core.features import Feature, FeatureParts, NewExecutor, RoundFacts
from execpods.core.notices import AllocatorNotice, NoticeHub, NoticeKind
from execpods.core.ports import DEFAULT_RESOURCE_PROFILE_ID, NO_DECISIONS, PodDecisions
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    parse_bool,
    parse_int,
    positive,
    setting,
)

__all__ = ["EVERY_NODE_BLOCKED", "NodeBlocklist", "NodeBlocklistSettings", "plug"]

EVERY_NODE_BLOCKED = "EveryNodeBlocked"
"""The reason of a NODE_BLOCKED notice after which no node executors ran on is left."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeBlocklistSettings(SettingsBase):
    """Bad-node avoidance (Flink's blocklist): keep new executors off failing nodes."""

    enabled: bool = setting(
        "execpods.badNodes.enabled",
        False,
        "Keep new executors off nodes on which executors keep failing (off by default: most "
        "failures are the application's, and a small cluster may have nowhere else).",
        parse=parse_bool,
    )
    max_failures: int = setting(
        "execpods.badNodes.maxFailures",
        3,
        "Executor failures on one node, within the failure window, that block the node.",
        parse=parse_int,
        rule=positive,
    )
    failure_window: float = duration_setting(
        "execpods.badNodes.failureWindow",
        "10min",
        "How far back failures on a node count.",
        rule=positive,
    )
    cool_down: float = duration_setting(
        "execpods.badNodes.coolDown",
        "1h",
        "How long a blocked node stays blocked (new executors get node anti-affinity for it).",
        rule=positive,
    )


_NOT_THE_NODE = frozenset({"PreemptionByScheduler", "EvictionByEvictionAPI"})
"""Disruptions that say nothing of the node: a preemption (the scheduler made room for a pod of
higher priority) and an API eviction (a drain, a descheduler). A kubelet's own termination (node
pressure) or a taint's eviction (`DeletionByTaintManager`) does count against the node."""


def _node_to_blame(disruption: str | None) -> bool:
    return disruption not in _NOT_THE_NODE


def plug(settings: NodeBlocklistSettings, parts: FeatureParts) -> NodeBlocklist | None:
    """The feature when `execpods.badNodes.enabled`."""
    return NodeBlocklist(settings=settings, notices=parts.notices) if settings.enabled else None


class NodeBlocklist(Feature):
    """Failures per node and the nodes blocked now; fed by the allocator's rounds."""

    def __init__(self, *, settings: NodeBlocklistSettings, notices: NoticeHub) -> None:
        self._settings = settings
        self._notices = notices
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}
        self._counted: set[int] = set()
        self._blocked: dict[str, float] = {}
        """Node -> wall-clock time its block ends."""
        self._nodes: set[str] = set()
        """Every node an executor of the application was seen on (bounded by the cluster)."""
        self.blocks = 0
        """Times a node was blocked since start."""

    def observe(self, facts: RoundFacts) -> None:
        """Count executors that failed on a node since the last round (in any snapshot of the
        batch: a failed pod may be deleted before the round); block and lift nodes."""
        now = facts.now
        notices: list[AllocatorNotice] = []
        with self._lock:
            for seen in facts.batch or (facts.snapshot,):
                pods = seen.executor_pods
                ids = pods.keys() if seen.changed_ids is None else seen.changed_ids
                for executor_id in ids:
                    state = pods.get(executor_id)
                    if state is None or executor_id in self._counted:
                        continue
                    node = state.pod.node_name
                    if node:
                        self._nodes.add(node)
                    if node and start_failed(state) and _node_to_blame(state.pod.disruption):
                        self._counted.add(executor_id)
                        self._failures.setdefault(node, deque()).append(now)
            horizon = now - self._settings.failure_window
            for node, times in list(self._failures.items()):
                while times and times[0] < horizon:
                    times.popleft()
                if not times:
                    del self._failures[node]
                elif len(times) >= self._settings.max_failures and node not in self._blocked:
                    self._blocked[node] = now + self._settings.cool_down
                    self.blocks += 1
                    times.clear()
                    notice = self._notice(NoticeKind.NODE_BLOCKED, node)
                    if self._nodes <= set(self._blocked):
                        notice = dataclasses.replace(
                            notice,
                            reason=EVERY_NODE_BLOCKED,
                            message=f"{notice.message} Every node this application's executors "
                            f"ran on ({len(self._nodes)}) is blocked now: new executors may stay "
                            "Pending until a cool-down ends or other nodes join.",
                        )
                    notices.append(notice)
            for node, until in list(self._blocked.items()):
                if now >= until:
                    del self._blocked[node]
                    notices.append(self._notice(NoticeKind.NODE_UNBLOCKED, node))
        for notice in notices:
            logger.warning(notice.message)
            self._notices.notify(notice)

    def shape(self, executor: NewExecutor) -> PodDecisions:
        """New executors keep off every node blocked now."""
        with self._lock:
            blocked = frozenset(self._blocked)
        return PodDecisions(avoid_nodes=blocked) if blocked else NO_DECISIONS

    def _notice(self, kind: NoticeKind, node: str) -> AllocatorNotice:
        settings = self._settings
        if kind is NoticeKind.NODE_BLOCKED:
            message = (
                f"Node {node} is blocked for {settings.cool_down:.0f} s: {settings.max_failures} "
                f"executors failed on it within {settings.failure_window:.0f} s "
                "(execpods.badNodes.*); new executors get node anti-affinity for it."
            )
            retry = settings.cool_down
        else:
            message = f"Node {node} is no longer blocked: its cool-down ended."
            retry = 0.0
        return AllocatorNotice(
            kind=kind,
            message=message,
            resource_profile_id=DEFAULT_RESOURCE_PROFILE_ID,
            count=1,
            retry_in=retry,
        )

    def blocked(self) -> list[str]:
        """The nodes blocked now, sorted."""
        with self._lock:
            return sorted(self._blocked)
