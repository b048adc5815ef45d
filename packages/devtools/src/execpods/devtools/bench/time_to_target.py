"""Time to target: how long each allocation policy takes to bring N executors to Running.

`python3 tools/dev.py bench --only time-to-target` (or `.venv/bin/python -m
execpods.devtools.bench.time_to_target [--sizes 1000,10000] [--plot docs/time-to-target.png]`).

Every policy runs the real core backend as `compose_backend` assembles it (the allocator, the
lifecycle manager and the real snapshot store; kubesim's events feed the store instead of the watch
and the poll) against kubesim's real scheduler and kubelet on kubesim's *virtual clock*: the
allocator's rounds, the pods' start latencies (1 s +/- 0.5 s, uniform), the client's token bucket
and kubesim's server-side create-rate cap (429 with Retry-After beyond it, as API Priority and
Fairness) all run on one simulated timeline, so 10,000 executors under the slowest policy finish in
bounded wall time and every run is reproducible. What is simulated is the API's transport: creates
and deletes call kubesim in process (no HTTP), and pod events reach the store as the watch would
deliver them, at once. Each create still takes a token from the client's rate limit and passes the
server's cap.

Policies:
- the 2018 rule (SPARK-24248): batch 5 every 1 s, no new batch while any pod is pending;
- newest Spark's defaults: batch 20 every 1 s, no stall on pending pods (SPARK-33262);
- execpods' defaults: adaptive batches (slow start) within the rate limit.

For each it prints the time to 100% Running, the ratio to the physical bound (start latency + N /
the limiting create rate, the lower of the client's rate limit and the server's cap), and the
highest number of API calls the client let through in any one second. `PEERS` is the hook for
other runners (a real Spark driver, for example): a callable from the executor count to a `Run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from execpods.client import AllocatorClient
from execpods.core import (
    ApiThrottled,
    CoreSettings,
    DeterministicScheduler,
    ExecutorPod,
    Machinery,
    ManualClock,
    PodConflict,
    PodManifest,
    PodNotFound,
    PodSelector,
    Ports,
    compose_backend,
)
from execpods.core.compose import scheduled_store
from execpods.core.testing import HandFed, RecordingDriver, SimpleExecutorPodBuilder
from execpods.devtools.bench.runs import (
    SERVER_CREATE_RATE,
    START_JITTER,
    START_LATENCY,
    FirstPodBody,
    Run,
    body_bytes,
)
from execpods.devtools.bench.spark_peers import spark_peers
from execpods.devtools.simulated import simulator_properties
from execpods.k8s import ApiRateSettings, TokenBucket, pod_from_dict
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.kubesim.bodies import JsonValue
from execpods.kubesim.errors import ApiError
from execpods.sidecar.embedded import EmbeddedSidecar
from matplotlib.figure import Figure

APP_ID = "ttt"
STEP = 0.02
"""Virtual seconds per simulation step (the resolution of every time measured)."""
MAX_VIRTUAL = 4 * 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    name: str
    properties: Mapping[str, str]


POLICIES = (
    Policy(
        name="2018 rule (batch 5, wait for pending)",
        properties={
            "spark.kubernetes.allocation.batch.size": "5",
            "execpods.allocation.waitForPendingPods": "true",
            "execpods.allocation.adaptiveBatches": "false",
        },
    ),
    Policy(
        name="newest Spark defaults (batch 20 every 1 s)",
        properties={"execpods.allocation.adaptiveBatches": "false"},
    ),
    Policy(name="execpods defaults", properties={}),
)


PEERS: dict[str, Callable[[int], Run]] = {}
"""Other runners to compare in the same run, by name (e.g. a real Spark driver on kubesim)."""


class VirtualScheduler(DeterministicScheduler):
    """The deterministic scheduler, tolerating tasks that move the shared clock themselves
    (a rate-limited create waits by advancing virtual time)."""

    def tick(self, seconds: float) -> None:
        deadline = self.clock.monotonic() + seconds
        self._run_due(deadline)
        if self.clock.monotonic() < deadline:
            self.clock.set_time(deadline)


class SimPodOperations:
    """`PodOperations` over kubesim in process: each call takes a token from the client's bucket
    (waiting in virtual time), and creates pass kubesim's server-side create-rate cap."""

    def __init__(self, sim: KubeSim, limiter: TokenBucket, wait: Callable[[float], None]) -> None:
        self._sim = sim
        self._limiter = limiter
        self._wait = wait
        self.creates = 0
        self.throttled = 0
        self.pod_bytes = 0

    def create(self, manifest: PodManifest) -> None:
        if not self.pod_bytes:
            self.pod_bytes = body_bytes(manifest)
        self._limiter.acquire()
        try:
            self._sim.api.create("default", manifest, limited=True)
        except ApiError as error:
            if error.code == 429:
                self.throttled += 1
                raise ApiThrottled(str(error), retry_after=error.retry_after) from None
            if error.code == 409:
                raise PodConflict(str(error)) from None
            raise
        self.creates += 1

    def delete(self, name: str) -> None:
        self._limiter.acquire()
        try:
            self._sim.delete_pod(name)
        except ApiError as error:
            if error.code != 404:
                raise PodNotFound(str(error)) from None

    def delete_by_selector(
        self, selector: PodSelector, *, grace_period_seconds: int | None = None
    ) -> int:
        self._limiter.acquire()
        doomed = self.list(selector)
        for pod in doomed:
            try:
                self._sim.delete_pod(pod.name)
            except ApiError:
                continue
        return len(doomed)

    def patch_labels(self, name: str, labels: Mapping[str, str]) -> None:
        self._patch_metadata(name, "labels", labels)

    def patch_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        self._patch_metadata(name, "annotations", annotations)

    def _patch_metadata(self, name: str, field: str, values: Mapping[str, str]) -> None:
        self._limiter.acquire()
        merged: dict[str, JsonValue] = dict(values)
        body: JsonValue = {"metadata": {field: merged}}
        self._sim.api.patch(
            "default", name, "application/strategic-merge-patch+json", body, status=False
        )

    def list(self, selector: PodSelector) -> list[ExecutorPod]:
        pods = (pod_from_dict(raw) for raw in self._sim.pods("default"))
        return [p for p in pods if p is not None and selector.matches(p)]


def _running(raw: Mapping[str, Any]) -> bool:
    status = raw.get("status") or {}
    metadata = raw.get("metadata") or {}
    return status.get("phase") == "Running" and not metadata.get("deletionTimestamp")


def run_policy(policy: Policy, executors: int, *, seed: int = 7) -> Run:
    """One policy to `executors` Running, on kubesim's virtual clock."""
    nodes = math.ceil(executors / 110) + 2
    cluster = ClusterConfig(
        nodes=nodes,
        start_latency=START_LATENCY,
        start_jitter=START_JITTER,
        create_rate=SERVER_CREATE_RATE,
        seed=seed,
    )
    sim = KubeSim(cluster=cluster, deterministic=True, event_window=max(10_000, 4 * executors))
    clock = ManualClock(sim.now())
    scheduler = VirtualScheduler(clock)
    properties = {"spark.executor.instances": "0", **policy.properties}
    settings = CoreSettings.from_properties(properties)
    rate = ApiRateSettings.from_properties(properties)

    def wait(seconds: float) -> None:  # a rate-limited call waits in virtual time
        clock.advance(seconds)
        _sync(sim, clock)

    limiter = TokenBucket(qps=rate.qps, burst=rate.burst, clock=clock.monotonic, sleep=wait)
    pods = SimPodOperations(sim, limiter, wait)
    # The whole backend as the sidecar assembles it, minus the watch and poll: kubesim's events
    # feed the store directly (the sources factory hands over its write side).
    fed = HandFed()
    backend = compose_backend(
        app_id=APP_ID,
        settings=settings,
        ports=Ports(
            pod_operations=pods,
            pod_builder=SimpleExecutorPodBuilder(),
            driver=RecordingDriver(),
            sources=fed,
            api_rate_ceiling=rate.peak_qps,
        ),
        machinery=Machinery(
            clock=clock, store=scheduled_store(scheduler), request_scheduler=scheduler
        ),
    )
    store = fed.writer
    running: set[str] = set()
    curve: list[tuple[float, int]] = [(0.0, 0)]
    start = clock.monotonic()

    measuring = threading.Event()
    measuring.set()

    def on_event(event: Any) -> None:
        if not measuring.is_set():
            return
        raw = event.new
        name = raw["metadata"]["name"]
        was = name in running
        if event.type != "DELETED" and _running(raw):
            running.add(name)
        else:
            running.discard(name)
        if (name in running) != was:
            curve.append((clock.monotonic() - start, len(running)))
        pod = pod_from_dict(raw)
        if pod is None:
            return
        if event.type == "DELETED" and pod.deletion_timestamp is None:
            pod = dataclasses.replace(pod, deletion_timestamp=datetime.now(UTC))
        store.update_pod(pod)

    sim.store.add_listener(on_event)
    backend.start(initial_executors=0)
    started = time.perf_counter()
    backend.request_total(executors)
    done: float | None = None
    while clock.monotonic() - start < MAX_VIRTUAL:
        scheduler.tick(STEP)
        _sync(sim, clock)
        if len(running) >= executors:
            done = clock.monotonic() - start
            break
    wall = time.perf_counter() - started
    measuring.clear()  # stopping deletes the executor pods: not part of the curve
    backend.stop()
    limiting = min(float(rate.qps), SERVER_CREATE_RATE)
    return Run(
        policy=policy.name,
        executors=executors,
        seconds=done,
        bound=START_LATENCY + executors / limiting,
        peak_rate=limiter.peak_rate(1.0),
        rate_limit=limiter.bound(1.0),
        curve=curve,
        creates=pods.creates,
        throttled=pods.throttled,
        wall=wall,
        pod_bytes=pods.pod_bytes,
    )


def run_real(policy: Policy, executors: int) -> Run:
    """The same policy through the real sidecar, over HTTP, in real time (a cross-check of the
    virtual runs; its peak rate includes the watch's and the poll's calls)."""
    cluster = ClusterConfig(
        nodes=math.ceil(executors / 110) + 2,
        start_latency=START_LATENCY,
        start_jitter=START_JITTER,
        create_rate=SERVER_CREATE_RATE,
    )
    running: set[str] = set()
    curve: list[tuple[float, int]] = [(0.0, 0)]
    started = time.monotonic()

    def on_event(event: Any) -> None:
        name = event.new["metadata"]["name"]
        was = name in running
        if event.type != "DELETED" and _running(event.new):
            running.add(name)
        else:
            running.discard(name)
        if (name in running) != was:
            curve.append((time.monotonic() - started, len(running)))

    with KubeSim(cluster=cluster) as sim:
        sim.store.add_listener(on_event)
        body = FirstPodBody(sim)
        props = simulator_properties(
            sim.url, APP_ID, **{"spark.executor.instances": "0", **policy.properties}
        )
        with EmbeddedSidecar(props) as sidecar, AllocatorClient(sidecar.address) as client:
            started = time.monotonic()
            client.request_total(executors)
            while len(running) < executors and time.monotonic() - started < 1800:
                time.sleep(0.05)
            done = time.monotonic() - started if len(running) >= executors else None
            limiter = sidecar.runtime.rate_limiter
            assert limiter is not None
            peak, allowed = limiter.peak_rate(1.0), limiter.bound(1.0)
            settings = sidecar.settings.api_rate
            throttled = sim.create_limit.rejected
            creates = sim.request_counts().get("create", 0)
    limiting = min(float(settings.qps), SERVER_CREATE_RATE)
    return Run(
        policy=f"{policy.name} [real time, HTTP]",
        executors=executors,
        seconds=done,
        bound=START_LATENCY + executors / limiting,
        peak_rate=peak,
        rate_limit=allowed,
        curve=curve,
        creates=creates,
        throttled=throttled,
        wall=time.monotonic() - started,
        pod_bytes=body.bytes,
    )


def _sync(sim: KubeSim, clock: ManualClock) -> None:
    """Bring kubesim's virtual clock to the allocator's (kubelet timers fire on the way)."""
    behind = clock.monotonic() - sim.now()
    if behind > 0:
        sim.advance(behind)


def _fmt(seconds: float | None) -> str:
    return f"> {MAX_VIRTUAL:.0f} s" if seconds is None else f"{seconds:.1f} s"


def report(runs: Iterable[Run]) -> str:
    lines = [
        "| policy | executors | time to 100% Running | bound | ratio | peak API calls in 1 s "
        "(limit: burst + qps x 1 s) | creates | 429s | pod body |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        ratio = "-" if run.ratio is None else f"{run.ratio:.2f}x"
        lines.append(
            f"| {run.policy} | {run.executors:,} | {_fmt(run.seconds)} | {run.bound:.1f} s | "
            f"{ratio} | {run.peak_rate} ({run.rate_limit:.0f}) | {run.creates:,} | "
            f"{run.throttled} | {f'{run.pod_bytes:,} B' if run.pod_bytes else '-'} |"
        )
    return "\n".join(lines)


def plot(runs: list[Run], path: Path) -> None:
    sizes = sorted({r.executors for r in runs})
    figure = Figure(figsize=(6 * len(sizes), 5.6))  # no pyplot: no GUI backend, no global state
    axes = figure.subplots(1, len(sizes), squeeze=False)
    for axis, size in zip(axes[0], sizes, strict=True):
        for run in (r for r in runs if r.executors == size and "[real" not in r.policy):
            xs = [t for t, _ in run.curve]
            ys = [n for _, n in run.curve]
            axis.step(xs, ys, where="post", label=f"{run.policy}: {_fmt(run.seconds)}")
        bound = next(r.bound for r in runs if r.executors == size)
        # Not a lower bound: the token buckets' bursts let a run start ahead of the steady rate.
        axis.axvline(
            bound,
            color="grey",
            linestyle="--",
            label=f"steady-rate reference {bound:.1f} s (mean start + N / create rate; "
            "bursts can beat it)",
        )
        axis.set_xscale("log")
        axis.set_xlabel("seconds since the target was set (kubesim's virtual clock, log scale)")
        axis.set_ylabel("executors Running")
        axis.set_title(f"{size:,} executors on kubesim")
        # Below the axes: inside, the legend hid the fastest curve's end.
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
        axis.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="executor counts (1000,10000)")
    parser.add_argument(
        "--plot", type=Path, default=Path("docs/time-to-target.png"), help="where the PNG goes"
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--real",
        default="",
        help="also run these sizes through the real sidecar over HTTP in real time, for newest "
        "Spark's and execpods' defaults (e.g. 1000)",
    )
    parser.add_argument(
        "--spark",
        default="",
        help="also run real Spark 4.3, alone and with the execpods plugin, at these sizes in real "
        "time on kubesim (e.g. 200; needs Java and pyspark, see docs/spark.md)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.ERROR
    )  # the allocator's warnings (429s) would drown the table
    sizes = [int(s) for s in args.sizes.split(",") if s]
    runs: list[Run] = []
    for size in sizes:
        for policy in POLICIES:
            run = run_policy(policy, size)
            runs.append(run)
            print(
                f"{policy.name}, {size:,} executors: {_fmt(run.seconds)} to 100% Running "
                f"(bound {run.bound:.1f} s, ratio "
                f"{'-' if run.ratio is None else f'{run.ratio:.2f}x'}), peak {run.peak_rate} "
                f"API calls in 1 s (bucket allows {run.rate_limit:.0f}); {run.wall:.1f} s wall",
                flush=True,
            )
        for name, peer in PEERS.items():
            print(f"peer {name}, {size:,} executors ...", flush=True)
            runs.append(peer(size))
    for size in [int(s) for s in args.real.split(",") if s]:
        for policy in POLICIES[1:]:
            run = run_real(policy, size)
            runs.append(run)
            print(f"{run.policy}, {size:,} executors: {_fmt(run.seconds)}", flush=True)
    spark_sizes = [int(s) for s in args.spark.split(",") if s]
    if spark_sizes:
        with tempfile.TemporaryDirectory(prefix="execpods-spark-") as tmp:
            peers = spark_peers(Path(tmp))
            for size in spark_sizes:
                for name, peer in peers.items():
                    run = peer(size)
                    runs.append(run)
                    print(f"{name}, {size:,} executors: {_fmt(run.seconds)}", flush=True)
    print()
    print(report(runs))
    for size in sizes:
        ours = next(r for r in runs if r.executors == size and r.policy == "execpods defaults")
        spark = next(r for r in runs if r.executors == size and r.policy.startswith("newest"))
        if ours.seconds and spark.seconds:
            print(f"{size:,}: execpods is {spark.seconds / ours.seconds:.1f}x faster than Spark")
    if not args.no_plot:
        plot(runs, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
