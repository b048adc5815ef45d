"""In-place resize of executors' memory (Spark 4.2+'s `ExecutorResizeDriverPlugin`), as a feature.

Spark's plugin, every `spark.kubernetes.executor.resizeInterval`, lists the application's executor
pods and their memory use (the metrics API, `kubectl top`), and for each executor container that
uses more than `spark.kubernetes.executor.resizeThreshold` of its memory limit raises its memory
limit and request, together, to limit x (1 + `spark.kubernetes.executor.resizeFactor`), through
the pods' `resize` subresource (the container keeps running). It refuses to start unless Spark's
own allocator is in use (`spark.kubernetes.allocation.pods.allocator=direct`), so it never runs
through the execpods plugin: the backend does its job instead, with the same settings, for any
driver, once `execpods.executor.resize.enabled` is set (the counterpart of putting the plugin in
`spark.plugins`).

`ExecutorResize` is a feature (`features.py`) that `compose_backend` plugs from `ResizeSettings`
(a slice of `FeatureSettings`). It reads and resizes over the parts' `ResizeOperations` (the
adapter's `KubernetesResizer`; the sidecar counts each resize in `execpods_pods_resized_total`).
As Spark's plugin runs on a scheduled thread of its own, the rounds run on the parts' scheduler,
not in the allocation round: listing the pods and the metrics API once a minute must not hold an
allocation back. The task starts with the first allocation round (the backend has started; the
first resize round one interval later, as Spark's `scheduleAtFixedRate(interval, interval)`), and
is cancelled when the backend stops. The interval is counted from the end of a round (a fixed
delay, not Spark's fixed rate: a round slower than the interval does not pile up rounds).

Not here: `ExecutorPVCResizeDriverPlugin`, which grows claims from disk use the executors report to
the driver over Spark's plugin messages, which no sidecar sees (docs/configuration.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from execpods.core.errors import PodOperationError
from execpods.core.features import Feature, FeatureParts, RoundFacts
from execpods.core.ports import Cancellable, MemoryUse, ResizeOperations, Scheduler
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    parse_bool,
    parse_float,
    setting,
)

__all__ = [
    "ExecutorResize",
    "MemoryResize",
    "ResizeSettings",
    "memory_resizes",
    "plug",
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
    """Spark's ExecutorResizePlugin settings, applied by the backend when enabled."""

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


def plug(settings: ResizeSettings, parts: FeatureParts) -> ExecutorResize | None:
    """The resize feature when enabled (and its interval not 0), over the parts' resize calls."""
    if not settings.active:
        return None
    if parts.resize is None:
        logger.warning(
            "execpods.executor.resize.enabled is set but this backend has no resize calls: "
            "executors are not resized."
        )
        return None
    return ExecutorResize(
        settings=settings, operations=parts.resize, app_id=parts.app_id, scheduler=parts.scheduler
    )


class ExecutorResize(Feature):
    """Resize rounds over the application's executors, every interval on the parts' scheduler,
    from the first allocation round until the backend stops; a failure is logged, never raised."""

    def __init__(
        self,
        *,
        settings: ResizeSettings,
        operations: ResizeOperations,
        app_id: str,
        scheduler: Scheduler,
    ) -> None:
        self._settings = settings
        self._operations = operations
        self._app_id = app_id
        self._scheduler = scheduler
        self._lock = threading.Lock()
        self._task: Cancellable | None = None
        self._closed = False

    def observe(self, facts: RoundFacts) -> None:
        """The first allocation round starts the periodic task (later ones only look)."""
        with self._lock:
            if self._task is not None or self._closed:
                return
            interval = self._settings.interval
            self._task = self._scheduler.schedule_with_fixed_delay(interval, interval, self._tick)
        logger.info(
            "Resizing executors' memory in place every %gs (threshold %g, factor %g).",
            interval,
            self._settings.threshold,
            self._settings.factor,
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def _tick(self) -> None:
        self.run_once()

    def run_once(self) -> list[MemoryResize]:
        """One resize round: what it resized."""
        try:
            uses = self._operations.memory_uses(self._app_id)
        except PodOperationError as error:
            logger.warning("Could not read the executors' memory use: %s", error)
            return []
        done = []
        for resize in memory_resizes(
            uses, threshold=self._settings.threshold, factor=self._settings.factor
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
            done.append(resize)
        return done
