"""In-place memory resize as Spark 4.3's `ExecutorResizeDriverPlugin.checkAndIncreaseMemory`
decides it (read in its bytecode): usage > limit x threshold gives limit x (1 + factor), both
limit and request, whole bytes; a failed resize is logged and the others go on. The feature is
plugged by the composition root from its settings slice and runs on the features' scheduler every
interval (as the plugin's own scheduled thread), from the first allocation round until stop."""

from __future__ import annotations

import pytest
from execpods.core import (
    DeterministicScheduler,
    FeatureSettings,
    ManualClock,
    MemoryUse,
    PodForbidden,
    SettingsError,
)
from execpods.core.resize import ExecutorResize, ResizeSettings, memory_resizes
from execpods.core.testing import Composed, compose_deterministic

GIB = 1024**3


def _use(pod: str, usage: int, limit: int = GIB) -> MemoryUse:
    return MemoryUse(pod=pod, container="spark-kubernetes-executor", limit_bytes=limit,
                     usage_bytes=usage)  # fmt: skip


def test_a_container_over_the_threshold_grows_by_the_factor() -> None:
    uses = [_use("a", int(GIB * 0.95)), _use("b", int(GIB * 0.9)), _use("c", GIB // 2)]
    (resize,) = memory_resizes(uses, threshold=0.9, factor=0.1)
    assert (resize.pod, resize.from_bytes, resize.to_bytes) == ("a", GIB, int(GIB * 1.1))
    assert (
        memory_resizes([_use("a", 1001, limit=1000)], threshold=0.5, factor=1.0)[0].to_bytes == 2000
    )
    assert memory_resizes([_use("z", 5, limit=0)], threshold=0.5, factor=1.0) == [], "no limit"


def test_spark_s_defaults_and_ranges() -> None:
    settings = ResizeSettings()
    assert (settings.interval, settings.threshold, settings.factor) == (60.0, 0.9, 0.1)
    assert not settings.active, "off unless enabled, as the plugin is unless in spark.plugins"
    assert ResizeSettings.from_properties({"execpods.executor.resize.enabled": "true"}).active
    off = {
        "execpods.executor.resize.enabled": "true",
        "spark.kubernetes.executor.resizeInterval": "0",
    }
    assert not ResizeSettings.from_properties(off).active, "interval 0 disables, as in Spark"
    for key, value in (
        ("spark.kubernetes.executor.resizeThreshold", "1"),
        ("spark.kubernetes.executor.resizeThreshold", "0"),
        ("spark.kubernetes.executor.resizeFactor", "0"),
        ("spark.kubernetes.executor.resizeFactor", "1.5"),
        ("spark.kubernetes.executor.resizeInterval", "-1s"),
    ):
        with pytest.raises(SettingsError, match=key):
            ResizeSettings.from_properties({key: value})


class _Cluster:
    """`ResizeOperations` in memory: limits and uses per pod, resizes applied."""

    def __init__(self, uses: list[MemoryUse]) -> None:
        self.uses = {u.pod: u for u in uses}
        self.refuse: set[str] = set()
        self.resized: list[tuple[str, int]] = []

    def memory_uses(self, app_id: str) -> list[MemoryUse]:
        return list(self.uses.values())

    def resize_memory(self, pod: str, container: str, memory_bytes: int) -> None:
        if pod in self.refuse:
            raise PodForbidden(f"pods/resize {pod} is forbidden")
        self.resized.append((pod, memory_bytes))
        use = self.uses[pod]
        self.uses[pod] = MemoryUse(pod=pod, container=container, limit_bytes=memory_bytes,
                                   usage_bytes=use.usage_bytes)  # fmt: skip


ON = FeatureSettings(resize=ResizeSettings(enabled=True))  # every 60 s, Spark's default


def _composed(
    cluster: _Cluster, features: FeatureSettings = ON
) -> tuple[Composed, DeterministicScheduler]:
    scheduler = DeterministicScheduler(ManualClock())
    composed = compose_deterministic(
        clock=scheduler.clock, request_scheduler=scheduler, resize=cluster, features=features
    )
    return composed, scheduler


def test_each_round_resizes_what_is_over_and_a_refusal_does_not_stop_the_others() -> None:
    cluster = _Cluster([_use("a", int(GIB * 0.99)), _use("b", int(GIB * 0.95)), _use("c", 1)])
    cluster.refuse.add("a")
    composed, _ = _composed(cluster)
    resize = composed.feature(ExecutorResize)
    assert [r.pod for r in resize.run_once()] == ["b"]
    assert cluster.resized == [("b", int(GIB * 1.1))]
    assert resize.run_once() == [], "b is under its new limit; a still refused"
    assert cluster.resized == [("b", int(GIB * 1.1))]


def test_rounds_run_every_interval_from_the_first_allocation_round_until_stop() -> None:
    cluster = _Cluster([_use("a", int(GIB * 0.95))])
    composed, scheduler = _composed(cluster)
    scheduler.tick(120.0)
    assert cluster.resized == [], "not before the backend's first allocation round"
    composed.backend.start(initial_executors=0)
    composed.store.notify_subscribers()  # the first allocation round: the task starts
    composed.store.notify_subscribers()  # later rounds do not start another
    scheduler.tick(59.0)
    assert cluster.resized == [], "the first round one interval later, as Spark's plugin"
    scheduler.tick(1.0)
    assert cluster.resized == [("a", int(GIB * 1.1))]
    cluster.uses["a"] = _use("a", int(GIB * 1.1 * 0.95), limit=int(GIB * 1.1))  # it grew again
    scheduler.tick(60.0)
    assert [pod for pod, _ in cluster.resized] == ["a", "a"], "one round per interval"
    composed.backend.stop()
    cluster.uses["a"] = _use("a", int(GIB * 2), limit=int(GIB * 1.21))
    scheduler.tick(600.0)
    assert len(cluster.resized) == 2, "stopping the backend cancels the task"


def test_off_unless_enabled_and_given_the_resize_calls() -> None:
    for features in (FeatureSettings(), FeatureSettings(resize=ResizeSettings(
        enabled=True, interval=0.0
    ))):  # fmt: skip
        with pytest.raises(LookupError):
            _composed(_Cluster([]), features)[0].feature(ExecutorResize)
    scheduler = DeterministicScheduler(ManualClock())
    composed = compose_deterministic(clock=scheduler.clock, request_scheduler=scheduler,
                                     features=ON)  # fmt: skip
    with pytest.raises(LookupError):
        composed.feature(ExecutorResize)
