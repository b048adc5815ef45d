"""The fault suite (issue 11): a sidecar on kubesim through every fault a cluster throws at it.

Each scenario starts a sidecar (in-process, real gRPC, the real Kubernetes client over HTTP) for
one application on a fresh simulator, with a bystander pod of another application beside it,
brings it to its target, then injects one fault while the driver asks for more executors, ends
the fault and waits for the target again. A monitor samples the cluster every 50 ms and a driver
stream records every removal. After each scenario the checks are:

- recovered: the target was reached again, and how long after the fault began;
- ids once: no executor id was held by two different pods (uids) over the run;
- lost once: every executor whose pod was lost (failed, deleted under it) was reported to the
  driver exactly once, and no executor was reported twice;
- rate: the API request rate (peak over any 1 s, as kubesim logged it) stayed within the
  configured limit (`execpods.kubernetes.api.qps` + `api.burst`);
- clean: after shutdown no executor pod of the app is left, and the bystander is untouched.

    .venv/bin/python -m execpods.devtools.faults            # the short run (as in the tests)
    .venv/bin/python -m execpods.devtools.faults --soak     # 30 s faults, larger targets
    .venv/bin/python -m execpods.devtools.faults --only 500s,429s

The SIGKILL-and-restart scenario runs real sidecar processes: `tests/sidecar/test_restart.py`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from execpods.client import AllocatorClient
from execpods.devtools.proxy import CuttableProxy
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar, simulator_properties

APP_ID = "faults-app"
QPS = 20
BURST = 40
BYSTANDER = "bystander-exec-1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """How long faults last and how many executors: the short run or the soak."""

    fault_seconds: float
    target: int
    deadline: float
    drop_every: float


SHORT = Scale(fault_seconds=4.0, target=6, deadline=60.0, drop_every=1.0)
SOAK = Scale(fault_seconds=30.0, target=20, deadline=180.0, drop_every=3.0)


@dataclass(slots=True, kw_only=True)
class Result:
    name: str
    recovered: bool = False
    seconds: float = float("nan")
    """From the fault's start until the target ran again (the fault itself lasts `fault`)."""
    fault: float = 0.0
    ids_once: bool = False
    lost_once: bool = False
    rate_ok: bool = False
    peak_rate: float = 0.0
    clean: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.recovered and self.ids_once and self.lost_once and self.rate_ok and self.clean


class Monitor:
    """Samples the app's pods: which uids held each executor id, and which pods were lost."""

    def __init__(self, sim: KubeSim) -> None:
        self._sim = sim
        self.uids: dict[int, set[str]] = collections.defaultdict(set)
        self.failed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.sample()
            except Exception:  # kubesim mid-restart: try again next tick
                continue

    def sample(self) -> None:
        for pod in self._sim.pods():
            labels = pod["metadata"].get("labels", {})
            if labels.get("spark-app-selector") != APP_ID:
                continue
            executor_id = int(labels["spark-exec-id"])
            self.uids[executor_id].add(str(pod["metadata"]["uid"]))
            if pod.get("status", {}).get("phase") == "Failed":
                self.failed.add(executor_id)


def _running_ids(sim: KubeSim) -> set[int]:
    return {
        int(pod["metadata"]["labels"]["spark-exec-id"])
        for pod in sim.pods()
        if pod["metadata"].get("labels", {}).get("spark-app-selector") == APP_ID
        and pod.get("status", {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    }


def running(sim: KubeSim) -> int:
    return len(_running_ids(sim))


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(0.05)
    return False


@dataclass(slots=True, kw_only=True)
class FaultContext:
    """What a fault acts on: the simulator, the driver's network, an admin client, the target
    the driver asks for during the fault, and executors the fault removes on purpose."""

    sim: KubeSim
    scale: Scale
    proxy: CuttableProxy
    admin: AllocatorClient
    target: int
    removed: set[int] = field(default_factory=set)


Fault = Callable[[FaultContext], Callable[[], None]]
"""Starts a fault; returns what ends it."""


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
    running_ids = sorted(_running_ids(ctx.sim))
    doomed = running_ids[: len(running_ids) // 2]
    ctx.target = len(running_ids) - len(doomed)
    ctx.admin.request_total(ctx.target)
    ctx.admin.kill_executors(doomed)
    ctx.removed.update(doomed)
    return ctx.proxy.restore


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
}


CLUSTER = ClusterConfig(nodes=2, start_latency=0.2, start_jitter=0.1, stop_latency=0.05)


def run_scenario(name: str, fault: Fault, scale: Scale) -> Result:
    """One scenario on a fresh simulator; the result holds every check."""
    result = Result(name=name, fault=scale.fault_seconds)
    with KubeSim(cluster=CLUSTER) as sim:
        bystander = sim.create_pod(_bystander())
        removals: collections.Counter[int] = collections.Counter()
        with (
            Monitor(sim) as monitor,
            EmbeddedSidecar(_properties(sim, scale)) as sidecar,
            CuttableProxy(sidecar.address) as proxy,
            AllocatorClient(proxy.target) as driver,
            AllocatorClient(sidecar.address) as admin,
        ):
            ctx = FaultContext(
                sim=sim, scale=scale, proxy=proxy, admin=admin, target=scale.target * 2
            )
            _drive(
                ctx=ctx,
                driver=driver,
                fault=fault,
                result=result,
                removals=removals,
                monitor=monitor,
            )
            monitor.failed.update(ctx.removed)
        _check(sim=sim, bystander=bystander, result=result, removals=removals, monitor=monitor)
    return result


def _bystander() -> dict[str, Any]:
    labels = {"spark-app-selector": "another-app", "spark-role": "executor", "spark-exec-id": "1"}
    return {
        "metadata": {"name": BYSTANDER, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "spark:other"}]},
    }


def _properties(sim: KubeSim, scale: Scale) -> dict[str, str]:
    return simulator_properties(
        sim.url,
        APP_ID,
        **{
            "spark.executor.instances": str(scale.target),
            "spark.kubernetes.allocation.batch.delay": "200ms",
            "spark.kubernetes.executor.eventProcessingInterval": "100ms",
            "spark.kubernetes.executor.apiPollingInterval": "2s",
            # The suite checks the static limit's bound: burst + qps in any second.
            "execpods.kubernetes.api.ratePolicy": "static",
            "execpods.kubernetes.api.qps": str(QPS),
            "execpods.kubernetes.api.burst": str(BURST),
            "execpods.kubernetes.backoffMax": "5s",
        },
    )


def _drive(
    *,
    ctx: FaultContext,
    driver: AllocatorClient,
    fault: Fault,
    result: Result,
    removals: collections.Counter[int],
    monitor: Monitor,
) -> None:
    """Reach the target, inject the fault while the driver asks for twice as many (or what the
    fault sets), end it, and time how long the new target took from the fault's start."""
    sim, scale = ctx.sim, ctx.scale
    stream = driver.stream_snapshots()
    threading.Thread(target=_read_removals, args=(stream, removals), daemon=True).start()
    try:
        if not wait_until(lambda: running(sim) == scale.target, scale.deadline):
            result.notes.append("never reached the first target")
            return
        sim.clear_requests()
        started = time.monotonic()
        end_fault = fault(ctx)
        target = ctx.target
        ctx.admin.request_total(target)
        time.sleep(scale.fault_seconds)
        end_fault()
        result.recovered = wait_until(lambda: running(sim) == target, scale.deadline)
        result.seconds = time.monotonic() - started
        result.peak_rate = sim.peak_request_rate(1.0)
        monitor.sample()
        expected = monitor.failed | ctx.removed
        wait_until(lambda: all(removals[i] for i in expected), 10.0)
    finally:
        stream.cancel()


def _check(
    *,
    sim: KubeSim,
    bystander: Mapping[str, Any],
    result: Result,
    removals: collections.Counter[int],
    monitor: Monitor,
) -> None:
    """The checks after shutdown (the sidecar has stopped and deleted what it owned)."""
    result.rate_ok = result.peak_rate <= QPS + BURST
    result.ids_once = all(len(uids) == 1 for uids in monitor.uids.values())
    twice = sorted(i for i, n in removals.items() if n > 1)
    unreported = sorted(monitor.failed - set(removals))
    result.lost_once = not twice and not unreported
    if twice or unreported:
        result.notes.append(f"reported twice {twice}, never {unreported}")
    wait_until(lambda: not _app_pods(sim), 10.0)
    left = _app_pods(sim)
    other = sim.pod(BYSTANDER)
    result.clean = (
        not left
        and other is not None
        and other["metadata"]["uid"] == bystander["metadata"]["uid"]
        and not other["metadata"].get("deletionTimestamp")
    )
    if not result.clean:
        result.notes.append(f"left {left}")


def _app_pods(sim: KubeSim) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in sim.pods()
        if p["metadata"].get("labels", {}).get("spark-app-selector") == APP_ID
    ]


def _read_removals(stream: object, removals: collections.Counter[int]) -> None:
    try:
        for update in stream:  # type: ignore[attr-defined]
            for removal in update.removed:
                removals[removal.executor_id] += 1
    except Exception:
        return  # cancelled at the end


def table(results: Sequence[Result]) -> str:
    head = (
        "| scenario | target again | took (s) | after the fault (s) | ids once | lost once "
        "| peak req/s | clean |"
    )
    rule = "| --- | --- | --- | --- | --- | --- | --- | --- |"
    rows = [head, rule]
    for r in results:
        rows.append(
            f"| {r.name} | {_yes(r.recovered)} | {r.seconds:.1f} | "
            f"{max(0.0, r.seconds - r.fault):.1f} | {_yes(r.ids_once)} | "
            f"{_yes(r.lost_once)} | {r.peak_rate:.0f} (limit {QPS + BURST}) | {_yes(r.clean)} |"
        )
    return "\n".join(rows)


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def run(names: Sequence[str], scale: Scale) -> list[Result]:
    return [run_scenario(name, SCENARIOS[name], scale) for name in names]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--soak", action="store_true", help="30 s faults, a larger target")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {list(SCENARIOS)}")
    results = run(names, SOAK if args.soak else SHORT)
    print(table(results))
    for r in results:
        for note in r.notes:
            print(f"{r.name}: {note}")
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
