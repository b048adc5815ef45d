"""The fault suite's scenarios: each starts one fault on kubesim and returns what ends it.

Issue 11's: watch drops, a storm of 410s, 500s, 429s, latency, a kubesim restart, start
failures, a lost node, the driver's stream cut mid-scale-down. Issue 20's: failed pods that a
finalizer holds, deletes an admission webhook denies, evictions and other disruptions, and a
sidecar restarted after every pod of the application is gone. The runner and its checks are in
`execpods.devtools.faults`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from execpods.client import AllocatorClient
from execpods.devtools.proxy import CuttableProxy
from execpods.kubesim import KubeSim, Pod

APP_ID = "faults-app"
HOLD = "faults.execpods.io/hold"
"""The finalizer the finalizer scenario puts on executor pods."""
DISRUPTIONS = ("Evicted", "Preempted", "DeletionByTaintManager")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """How long faults last and how many executors: the short run or the soak."""

    fault_seconds: float
    target: int
    deadline: float
    drop_every: float


SHORT = Scale(fault_seconds=4.0, target=6, deadline=60.0, drop_every=1.0)
SOAK = Scale(fault_seconds=30.0, target=20, deadline=180.0, drop_every=3.0)


def _no_restart() -> None:
    raise RuntimeError("this run cannot restart its sidecar")


@dataclass(slots=True, kw_only=True)
class FaultContext:
    """What a fault acts on: the simulator, the driver's network, an admin client, the target
    the driver asks for during the fault, executors the fault removes on purpose, and a way to
    replace the sidecar by a new one for the same application."""

    sim: KubeSim
    scale: Scale
    proxy: CuttableProxy
    admin: AllocatorClient
    target: int
    removed: set[int] = field(default_factory=set)
    restart: Callable[[], None] = _no_restart


Fault = Callable[[FaultContext], Callable[[], None]]
"""Starts a fault; returns what ends it."""


def app_pods(sim: KubeSim) -> list[Pod]:
    return [
        p for p in sim.pods() if p["metadata"].get("labels", {}).get("spark-app-selector") == APP_ID
    ]


def running_ids(sim: KubeSim) -> set[int]:
    return {
        int(pod["metadata"]["labels"]["spark-exec-id"])
        for pod in sim.pods()
        if pod["metadata"].get("labels", {}).get("spark-app-selector") == APP_ID
        and pod.get("status", {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    }


def _names(sim: KubeSim, ids: Iterable[int]) -> list[str]:
    wanted = {str(i) for i in ids}
    return [
        p["metadata"]["name"]
        for p in sim.pods()
        if p["metadata"].get("labels", {}).get("spark-app-selector") == APP_ID
        and p["metadata"]["labels"].get("spark-exec-id") in wanted
    ]


def _set_finalizers(sim: KubeSim, name: str, finalizers: list[str] | None) -> None:
    patch: Any = {"metadata": {"finalizers": finalizers}}
    sim.api.patch("default", name, "application/merge-patch+json", patch, status=False)


# -- issue 11 ------------------------------------------------------------------------------------


def _drops(ctx: FaultContext) -> Callable[[], None]:
    sim, scale = ctx.sim, ctx.scale
    sim.drop_watches_every(scale.drop_every)
    return lambda: sim.drop_watches_every(0)


def _gone_storm(ctx: FaultContext) -> Callable[[], None]:
    sim, scale = ctx.sim, ctx.scale
    sim.expire_next(seconds=scale.fault_seconds)
    return lambda: None


def _errors(ctx: FaultContext) -> Callable[[], None]:
    sim, scale = ctx.sim, ctx.scale
    sim.fail_requests(500, seconds=scale.fault_seconds)
    return lambda: None


def _throttle(ctx: FaultContext) -> Callable[[], None]:
    sim, scale = ctx.sim, ctx.scale
    sim.throttle(seconds=scale.fault_seconds, retry_after=1)
    return lambda: None


def _latency(ctx: FaultContext) -> Callable[[], None]:
    sim = ctx.sim
    sim.set_latency(0.5)
    return lambda: sim.set_latency(0.0)


def _restart(ctx: FaultContext) -> Callable[[], None]:
    sim, scale = ctx.sim, ctx.scale
    sim.restart(down_seconds=min(2.0, scale.fault_seconds / 2))
    return lambda: None


def _start_failures(ctx: FaultContext) -> Callable[[], None]:
    sim = ctx.sim
    sim.set_failures(0.2, after=0.0)
    return lambda: sim.set_failures(0.0)


def _node_loss(ctx: FaultContext) -> Callable[[], None]:
    sim = ctx.sim
    busiest = max(sim.nodes(), key=lambda node: node.pods)
    sim.lose_node(busiest.name)
    return lambda: None


def _stream_cut(ctx: FaultContext) -> Callable[[], None]:
    """The driver's network fails mid-scale-down: the driver kills half its executors and lowers
    its target while its stream is cut; the client must resume and hear each removal once."""
    ctx.proxy.cut()
    ids = sorted(running_ids(ctx.sim))
    doomed = ids[: len(ids) // 2]
    ctx.target = len(ids) - len(doomed)
    ctx.admin.request_total(ctx.target)
    ctx.admin.kill_executors(doomed)
    ctx.removed.update(doomed)
    return ctx.proxy.restore


# -- issue 20 ------------------------------------------------------------------------------------


def _finalizer_held(ctx: FaultContext) -> Callable[[], None]:
    """A finalizer holds every running executor pod, and half of them fail: their pods stay,
    failed and terminating, through the fault (and through several expiries of the
    deleted-executors cache). Each failure must count once and be reported once; the end of the
    fault removes the finalizers."""
    sim = ctx.sim
    ids = sorted(running_ids(sim))
    held = _names(sim, ids)
    for name in held:
        _set_finalizers(sim, name, [HOLD])
    for name in _names(sim, ids[: max(1, len(ids) // 2)]):
        sim.fail_pod(name, exit_code=1, message="failed under a finalizer")

    def end() -> None:
        for name in held:
            if sim.pod(name) is not None:
                _set_finalizers(sim, name, None)

    return end


def _denied_deletes(ctx: FaultContext) -> Callable[[], None]:
    """An admission webhook denies every delete of the application's pods while a third of the
    executors fail: the failed pods linger, undeletable, until the fault ends."""
    sim = ctx.sim
    sim.deny_deletes({"spark-app-selector": APP_ID}, code=403, message="deletes are frozen")
    ids = sorted(running_ids(sim))
    for name in _names(sim, ids[: max(1, len(ids) // 3)]):
        sim.fail_pod(name, exit_code=1, message="failed while deletes were denied")
    return sim.clear_faults


def _evictions(ctx: FaultContext) -> Callable[[], None]:
    """Half the running executors are disrupted: evicted by the kubelet, preempted, removed by
    the taint manager (the `DisruptionTarget` condition says which). They are replaced and
    reported, and by default not counted as failures."""
    sim = ctx.sim
    ids = sorted(running_ids(sim))
    doomed = _names(sim, ids[: max(1, len(ids) // 2)])
    for name, cause in zip(doomed, itertools.cycle(DISRUPTIONS), strict=False):
        sim.evict(name, cause=cause)
    return lambda: None


def _restart_from_zero(ctx: FaultContext) -> Callable[[], None]:
    """The sidecar stops (deleting every executor pod: nothing in the cluster's pods says which
    ids were used) and a new one starts for the same application: it must issue fresh ids."""
    ctx.restart()
    return lambda: None


SCENARIOS: dict[str, Fault] = {
    "watch drops": _drops,
    "410 storm": _gone_storm,
    "500s": _errors,
    "429s": _throttle,
    "500ms latency": _latency,
    "kubesim restart": _restart,
    "20% start failures": _start_failures,
    "node lost": _node_loss,
    "driver stream cut mid-scale-down": _stream_cut,
    "finalizer-held failed pods": _finalizer_held,
    "denied deletes": _denied_deletes,
    "evictions": _evictions,
    "restart after scale to zero": _restart_from_zero,
}
