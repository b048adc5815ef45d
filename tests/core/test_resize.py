"""In-place memory resize as Spark 4.3's `ExecutorResizeDriverPlugin.checkAndIncreaseMemory`
decides it (read in its bytecode): usage > limit x threshold gives limit x (1 + factor), both
limit and request, whole bytes; a failed resize is logged and the others go on."""

from __future__ import annotations

import pytest
from execpods.core import PodForbidden, SettingsError
from execpods.core.resize import (
    ExecutorResizer,
    MemoryUse,
    ResizeSettings,
    memory_resizes,
)

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


def test_each_round_resizes_what_is_over_and_a_refusal_does_not_stop_the_others() -> None:
    cluster = _Cluster([_use("a", int(GIB * 0.99)), _use("b", int(GIB * 0.95)), _use("c", 1)])
    cluster.refuse.add("a")
    resizer = ExecutorResizer(settings=ResizeSettings(), operations=cluster, app_id="app")
    assert [r.pod for r in resizer.run_once()] == ["b"]
    assert cluster.resized == [("b", int(GIB * 1.1))]
    assert resizer.run_once() == [], "b is under its new limit; a still refused"
    assert resizer.resized == 1
