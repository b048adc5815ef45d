"""Warnings the pods' status cannot show, read from their events: FailedMount.

A pod whose volume cannot be mounted (a Secret that does not exist, a claim that does not attach)
stays Pending with its containers waiting in ContainerCreating: its status looks like any pod
starting. Only the kubelet's Warning event says why (`FailedMount`, `MountVolume.SetUp failed for
volume "conf" : secret "spark-conf" not found`). So each poll (every
`spark.kubernetes.executor.apiPollingInterval`) also lists the namespace's FailedMount warnings
(one call, selected by the API server: `involvedObject.kind=Pod,reason=FailedMount,type=Warning`),
and both sources hand the core each pod with its newest warning (`ExecutorPod.warning`); the core
decides whether it still applies (the pod's volumes are not mounted yet, `waiting.py`).

Reading events needs `list` on `events` in the namespace. Without it (403) the warnings are left
out, once logged: every other reason still reaches the driver.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from execpods.core import ExecutorPod, PodForbidden, PodOperationError, PodWarning

__all__ = ["WARNING_SELECTOR", "PodWarnings", "newest_warnings"]

logger = logging.getLogger(__name__)

WARNING_SELECTOR = "involvedObject.kind=Pod,reason=FailedMount,type=Warning"
"""The events the poll reads (fields every API server indexes for events)."""
_TIMES = ("lastTimestamp", "eventTime", "firstTimestamp")


def _when(event: Mapping[str, Any]) -> str:
    """The event's newest time as RFC 3339 text (they sort as time does; "" when none)."""
    series = event.get("series")
    if isinstance(series, dict) and isinstance(series.get("lastObservedTime"), str):
        return str(series["lastObservedTime"])
    for key in _TIMES:
        value = event.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def newest_warnings(events: Iterable[object]) -> dict[str, PodWarning]:
    """Each pod's newest warning, by pod name, from the items of an event list (odd items are
    skipped: an event is advice, never worth failing a poll)."""
    newest: dict[str, tuple[str, PodWarning]] = {}
    for event in events:
        if not isinstance(event, dict):
            continue
        involved = event.get("involvedObject")
        reason, message = event.get("reason"), event.get("message")
        if not isinstance(involved, dict) or involved.get("kind") != "Pod":
            continue
        name = involved.get("name")
        if not isinstance(name, str) or not isinstance(reason, str):
            continue
        when = _when(event)
        if name in newest and newest[name][0] >= when:
            continue
        text = message if isinstance(message, str) else ""
        newest[name] = (when, PodWarning(reason=reason, message=text))
    return {name: warning for name, (_, warning) in newest.items()}


class PodWarnings:
    """The namespace's newest FailedMount warning per pod: refreshed by the poll, read by both
    sources as they convert pods (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_pod: dict[str, PodWarning] = {}
        self._enabled = True
        self.refreshes = 0

    def refresh(self, list_events: Any) -> None:
        """Read the warnings again with `list_events(field_selector)` (the event list's JSON)."""
        if not self._enabled:
            return
        try:
            answer = list_events(WARNING_SELECTOR)
        except PodForbidden as error:
            self._enabled = False
            logger.warning(
                "Cannot list events (%s): why executors wait on a volume (FailedMount) will not "
                "be reported. Grant list on events in the namespace to see it.",
                error,
            )
            return
        except PodOperationError as error:
            logger.info("Could not list pod warnings (%s); keeping the last ones.", error)
            return
        items = answer.get("items") if isinstance(answer, dict) else None
        warnings = newest_warnings(items if isinstance(items, list) else [])
        with self._lock:
            self._by_pod = warnings
        self.refreshes += 1

    def annotate(self, pod: ExecutorPod) -> ExecutorPod:
        """The pod with its newest warning (the pod itself when it has none)."""
        warning = self._by_pod.get(pod.name)
        if warning is None or warning == pod.warning:
            return pod
        return dataclasses.replace(pod, warning=warning)

    def annotate_all(self, pods: Iterable[ExecutorPod]) -> list[ExecutorPod]:
        return [self.annotate(pod) for pod in pods]
