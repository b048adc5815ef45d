"""In-place resize of executors' memory (Spark 4.2+'s `ExecutorResizeDriverPlugin`), as a policy.

Spark's plugin, every `spark.kubernetes.executor.resizeInterval`, lists the application's executor
pods and their memory use (the metrics API, `kubectl top`), and for each executor container that
uses more than `spark.kubernetes.executor.resizeThreshold` of its memory limit raises its memory
limit and request, together, to limit x (1 + `spark.kubernetes.executor.resizeFactor`), through
the pods' `resize` subresource (the container keeps running). It refuses to start unless Spark's
own allocator is in use (`spark.kubernetes.allocation.pods.allocator=direct`), so it never runs
through the execpods plugin: the sidecar does its job instead, with the same settings, for any
driver, once `execpods.executor.resize.enabled` is set (the counterpart of putting the plugin in
`spark.plugins`). Here is the decision, over a port (`ResizeOperations`) the adapter implements;
the sidecar runs `ExecutorResizer.run_once` every interval.

Not here: `ExecutorPVCResizeDriverPlugin`, which grows claims from disk use the executors report to
the driver over Spark's plugin messages, which no sidecar sees (docs/configuration.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from execpods.core.errors import PodOperationError
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    parse_bool,
    parse_float,
    setting,
)

__all__ = [
    "ExecutorResizer",
    "MemoryResize",
    "MemoryUse",
    "ResizeOperations",
    "ResizeSettings",
    "memory_resizes",
]

logger = logging.getLogger(__name__)


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else "Interval should be non-negative"


def _open_unit(value: float) -> str | None:
    return None if 0 < value < 1 else "The threshold should be in (0, 1)"


def _half_open_unit(value: float) -> str | None:
    return None if 0 < value <= 1 else "The factor should be in (0, 1]"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeSettings(SettingsBase):
    """Spark's ExecutorResizePlugin settings, applied by the sidecar when enabled."""

    enabled: bool = setting(
        "execpods.executor.resize.enabled",
        False,
        "Resize executors' memory in place as Spark's ExecutorResizePlugin does (which cannot "
        "run through the execpods plugin): the sidecar's counterpart of adding it to "
        "spark.plugins.",
        parse=parse_bool,
    )
    interval: float = duration_setting(
        "spark.kubernetes.executor.resizeInterval",
        "1m",
        "Interval between executor resize operations (with execpods.executor.resize.enabled); "
        "0 disables them, as in Spark.",
        rule=_non_negative,
    )
    threshold: float = setting(
        "spark.kubernetes.executor.resizeThreshold",
        0.9,
        "An executor container using more than this share of its memory limit is resized "
        "(0 < threshold < 1).",
        parse=parse_float,
        rule=_open_unit,
    )
    factor: float = setting(
        "spark.kubernetes.executor.resizeFactor",
        0.1,
        "A resized container's memory limit and request become limit x (1 + factor) "
        "(0 < factor <= 1).",
        parse=parse_float,
        rule=_half_open_unit,
    )

    @property
    def active(self) -> bool:
        return self.enabled and self.interval > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryUse:
    """One executor container's memory limit and use (bytes), from the metrics API."""

    pod: str
    container: str
    limit_bytes: int
    usage_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryResize:
    pod: str
    container: str
    from_bytes: int
    to_bytes: int
    usage_bytes: int


def memory_resizes(
    uses: Sequence[MemoryUse], *, threshold: float, factor: float
) -> list[MemoryResize]:
    """Spark's rule (`ExecutorResizeDriverPlugin.checkAndIncreaseMemory`): a container using more
    than `threshold` x its limit gets limit x (1 + `factor`), truncated to whole bytes."""
    resizes = []
    for use in uses:
        if use.limit_bytes <= 0 or use.usage_bytes <= use.limit_bytes * threshold:
            continue
        resizes.append(
            MemoryResize(
                pod=use.pod,
                container=use.container,
                from_bytes=use.limit_bytes,
                to_bytes=int(use.limit_bytes * (1.0 + factor)),
                usage_bytes=use.usage_bytes,
            )
        )
    return resizes


class ResizeOperations(Protocol):
    """What the resizer needs of the cluster (the adapter's `KubernetesResizer`)."""

    def memory_uses(self, app_id: str) -> list[MemoryUse]:
        """The executor containers (of pods not labelled inactive) with a memory limit and a
        reported use; raises `PodOperationError` when they cannot be read."""

    def resize_memory(self, pod: str, container: str, memory_bytes: int) -> None:
        """Set the container's memory limit and request through the `resize` subresource."""


class ExecutorResizer:
    """One resize round over the application's executors; a failure is logged, never raised."""

    def __init__(
        self, *, settings: ResizeSettings, operations: ResizeOperations, app_id: str
    ) -> None:
        self.settings = settings
        self._operations = operations
        self._app_id = app_id
        self.resized = 0

    def run_once(self) -> list[MemoryResize]:
        try:
            uses = self._operations.memory_uses(self._app_id)
        except PodOperationError as error:
            logger.warning("Could not read the executors' memory use: %s", error)
            return []
        done = []
        for resize in memory_resizes(
            uses, threshold=self.settings.threshold, factor=self.settings.factor
        ):
            logger.info(
                "Increase executor pod %s container %s memory from %d to %d as usage %d "
                "exceeded threshold.",
                resize.pod,
                resize.container,
                resize.from_bytes,
                resize.to_bytes,
                resize.usage_bytes,
            )
            try:
                self._operations.resize_memory(resize.pod, resize.container, resize.to_bytes)
            except PodOperationError as error:
                logger.info("Failed to update %s: %s", resize.pod, error)
                continue
            self.resized += 1
            done.append(resize)
        return done
