"""The fault suite's scenarios: each starts one fault on kubesim and returns what ends it.

Issue 11's: watch drops, a storm of 410s, 500s, 429s, latency, a kubesim restart, start
failures, a lost node, the driver's stream cut mid-scale-down. Issue 20's: failed pods that a
finalizer holds, deletes an admission webhook denies, evictions and other disruptions, and a
sidecar restarted after every pod of the application is gone. Issue 32's: the id ledger deleted,
lowered, set beyond the maximum and unreadable, the API server's state restored from an older
backup, kills the watch never saw, and a driver sending what the sidecar must refuse or drop.
The runner and its checks are in `execpods.devtools.faults`.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from execpods.client import AllocatorClient, ExecutorProfile
from execpods.devtools.proxy import CuttableProxy
from execpods.k8s.ledger import DATA_KEY, ledger_config_map_name
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
    notes: list[str] = field(default_factory=list)
    """What the fault saw along the way, for the report (a refused call, a stall told)."""
    checks: list[Callable[[], str | None]] = field(default_factory=list)
    """Run after the scenario: each returns what went wrong, or None."""


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


# -- issue 32 ------------------------------------------------------------------------------------

LEDGER = ledger_config_map_name(APP_ID)
NOTICED_S = 1.5
"""How long a fault lets the sidecar run between touching the ledger and the restart: a few
allocation rounds (200 ms in the suite), in which it must notice and write the mark again."""


def _ledger_value(sim: KubeSim) -> str | None:
    configmaps = sim.object_apis["configmaps"]
    found = configmaps.store.find("default", LEDGER)
    return None if found is None else str((found.get("data") or {}).get(DATA_KEY))


def _set_ledger(sim: KubeSim, value: str) -> None:
    patch = {"data": {DATA_KEY: value}}
    sim.object_apis["configmaps"].patch("default", LEDGER, "application/merge-patch+json", patch)


def _kill_the_highest(ctx: FaultContext) -> None:
    """The driver lets the executors with the highest ids go: afterwards no pod says they were
    ever used, and only the ledger remembers them."""
    ids = sorted(running_ids(ctx.sim))
    doomed = ids[len(ids) // 2 :]
    ctx.admin.request_total(len(ids) - len(doomed))
    ctx.admin.kill_executors(doomed)


def _ledger_deleted(ctx: FaultContext) -> Callable[[], None]:
    """The ledger's ConfigMap is deleted (a label clean-up, a person), the executors with the
    highest ids are killed, and the sidecar restarts: it must have written its mark again in
    between, or the new life issues their ids again (R3)."""
    ctx.sim.object_apis["configmaps"].delete("default", LEDGER, {})
    _kill_the_highest(ctx)
    time.sleep(NOTICED_S)
    ctx.notes.append(f"ledger before the restart: {_ledger_value(ctx.sim)}")
    ctx.restart()
    return lambda: None


def _ledger_lowered(ctx: FaultContext) -> Callable[[], None]:
    """The ledger's mark goes back to 1 (its ConfigMap restored from an old backup, a typo),
    the executors with the highest ids are killed, and the sidecar restarts (R3)."""
    _set_ledger(ctx.sim, "1")
    _kill_the_highest(ctx)
    time.sleep(NOTICED_S)
    ctx.notes.append(f"ledger before the restart: {_ledger_value(ctx.sim)}")
    ctx.restart()
    return lambda: None


def _ledger_beyond_maximum(ctx: FaultContext) -> Callable[[], None]:
    """Somebody sets the ledger far beyond spark.kubernetes.allocation.maximum (20 digits,
    beyond int64 even), the executors with the highest ids are killed, and the sidecar restarts:
    the running sidecar must have written its mark again, and the new one must not believe such
    a value: allocation goes on, with fresh ids (R2)."""
    _set_ledger(ctx.sim, "99999999999999999999")
    _kill_the_highest(ctx)
    time.sleep(NOTICED_S)
    ctx.notes.append(f"ledger before the restart: {_ledger_value(ctx.sim)}")
    ctx.restart()
    return lambda: None


def _ledger_unreadable(ctx: FaultContext) -> Callable[[], None]:
    """The sidecar may no longer read or write its ledger (a Role without configmaps, with the
    start-up check off) and restarts into it: nothing may be created (an id could be issued
    twice), but the driver's stream and health must say why (R8); once the verbs are back,
    allocation resumes by itself."""
    sim = ctx.sim
    sim.forbid("configmaps", "get", "create", "patch")
    ctx.restart()
    told: list[str] = []

    def watch_stream() -> None:
        with ctx.admin.stream_snapshots() as stream:
            for update in stream:
                told.extend(f"{n.kind}:{n.reason}" for n in update.notices)
                if told:
                    return

    reader = threading.Thread(target=watch_stream, daemon=True)
    reader.start()
    reader.join(ctx.scale.fault_seconds)

    def check() -> str | None:
        if "allocation_stalled:IdLedgerUnreadable" not in told:
            return f"the stall was not told on the stream (told: {told})"
        return None

    ctx.checks.append(check)
    return lambda: sim.forbid("configmaps")


def _state_restored(ctx: FaultContext) -> Callable[[], None]:
    """The API server's state is restored from a backup taken at the fault's start, after the
    driver doubled its target: the executors made since, and the ledger's newer mark, are gone
    from the API, and resourceVersions go back. The sidecar must follow at once (R9), write its
    mark again (R3), and reach the target with fresh ids."""
    backup = ctx.sim.backup()

    def end() -> None:
        ctx.sim.restore(backup)

    return end


def _unseen_kills(ctx: FaultContext) -> Callable[[], None]:
    """The driver kills half its executors while the server forgets its event history and every
    watch is cut: the watch never sees the deletions, only the next full list shows them gone.
    The driver must hear of each at once, not a missingPodDetectDelta later (R9)."""
    sim = ctx.sim
    ids = sorted(running_ids(sim))
    doomed = ids[: len(ids) // 2]
    sim.pause_kubelet()
    ctx.admin.request_total(len(ids) - len(doomed))
    ctx.target = ctx.scale.target
    ctx.admin.kill_executors(doomed)
    ctx.removed.update(doomed)
    sim.compact()
    sim.drop_watches()
    sim.resume_kubelet()
    return lambda: None


def _driver_abuse(ctx: FaultContext) -> Callable[[], None]:
    """The driver sends what the sidecar must refuse or drop: registrations and kills of a
    million ids never issued, a pod template nested 90,000 deep, and one the Kubernetes client's
    model refuses (R5-R7). Each bad call is INVALID_ARGUMENT, nothing is kept, and allocation
    goes on."""
    admin = ctx.admin
    problems: list[str] = []
    ctx.checks.append(lambda: "; ".join(problems) or None)
    unknown = range(1_000_000_000, 1_000_200_000)
    for part in range(4):
        known = admin.update_driver_executors(
            registered=range(unknown.start + part * 50_000, unknown.start + (part + 1) * 50_000)
        )
        if any(i >= unknown.start for i in known):
            problems.append("ids never issued were echoed back as known")
    if admin.kill_executors(unknown) != 0:
        problems.append("a kill of ids never issued deleted pods")
    deep = "[" * 90_000 + "]" * 90_000
    refused_string = {
        "spec": {
            "containers": [
                {
                    "name": "spark-kubernetes-executor",
                    "securityContext": {"capabilities": {"add": "SYS_ADMIN"}},
                }
            ]
        }
    }
    for template in (deep, json.dumps(refused_string)):
        try:
            admin.request_total(
                0, profiles=[ExecutorProfile(id=7, pod_template=template)], profile_totals={7: 1}
            )
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
                problems.append(f"a bad template got {error.code().name}: {error.details()}")
        else:
            problems.append("a bad template was accepted")
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
    "ledger deleted": _ledger_deleted,
    "ledger lowered": _ledger_lowered,
    "ledger beyond the maximum": _ledger_beyond_maximum,
    "ledger unreadable": _ledger_unreadable,
    "state restored from a backup": _state_restored,
    "kills the watch never saw": _unseen_kills,
    "driver sends garbage": _driver_abuse,
}
