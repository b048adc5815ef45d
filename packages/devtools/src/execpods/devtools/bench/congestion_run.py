"""Running sidecars against a kubesim in real time, over HTTP: the congestion benchmark's harness.

Each driver is an `execpods-sidecar serve` process of its own (its own app id, its own rate
controller, its own APF flow: the sidecar names itself in its User-Agent), talking HTTP to one
kubesim served from this process. This process only sets targets over gRPC and counts Running
pods per app from kubesim's store as they change. The end-to-end tests
(tests/devtools/test_congestion_e2e.py) and the benchmark (`congestion.py`) share it.
"""

from __future__ import annotations

import http.client
import math
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from execpods.client import AllocatorClient
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.kubesim.apf import ApfConfig

APP_LABEL = "spark-app-selector"
SIDECAR = Path(sys.executable).parent / "execpods-sidecar"
LISTENING = "execpods-sidecar: listening on "
METRICS = "execpods-sidecar: metrics on "


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A rate policy as the sidecar's properties."""

    name: str
    properties: Mapping[str, str]
    executable: Path = SIDECAR
    """The `execpods-sidecar` that runs it (another checkout's, to compare code side by side)."""


BENCH_APF = ApfConfig(seats=10, service_time=0.02, slowdown=1.0, queue_length=8, max_wait=2.0)
"""The benchmarks' APF server: 10 seats of 20-40 ms (about 250 calls a second when full), 8
requests queued a flow; one value so that `congestion` and `servers` measure the same server."""
STATIC = Policy(name="static bucket", properties={"execpods.kubernetes.api.ratePolicy": "static"})
ADAPTIVE = Policy(name="congestion control", properties={})
SPARK = Policy(
    name="Spark 4.3 defaults",
    properties={
        # Spark's allocator: 20 creates a round every second, no client rate limit (fabric8).
        "execpods.allocation.adaptiveBatches": "false",
        "execpods.kubernetes.api.ratePolicy": "static",
        "execpods.kubernetes.api.qps": "100000",
        "execpods.kubernetes.api.burst": "100000",
    },
)


@dataclass(slots=True)
class Driver:
    """One sidecar process: its app, address, metrics URL and how its target went."""

    app_id: str
    address: str
    metrics_url: str
    target: int = 0
    started: float = 0.0
    reached: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.reached is None else self.reached - self.started

    def allowed_rate(self) -> float | None:
        """`execpods_api_allowed_rate` from the sidecar's metrics (None: not readable)."""
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("execpods_api_allowed_rate "):
                return float(line.split()[1])
        return None


@dataclass(slots=True)
class Running:
    """Running pods per app, kept from kubesim's store events (this process, no HTTP)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    names: dict[str, set[str]] = field(default_factory=dict)
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def on_event(self, event: Any) -> None:
        raw = event.new
        metadata = raw.get("metadata") or {}
        app = (metadata.get("labels") or {}).get(APP_LABEL)
        if app is None:
            return
        running = (
            event.type != "DELETED"
            and (raw.get("status") or {}).get("phase") == "Running"
            and not metadata.get("deletionTimestamp")
        )
        with self.changed:
            names = self.names.setdefault(app, set())
            if running:
                names.add(metadata["name"])
            else:
                names.discard(metadata["name"])
            self.changed.notify_all()

    def count(self, app: str) -> int:
        with self.lock:
            return len(self.names.get(app, ()))


def cluster(executors: int, *, start_latency: float, create_rate: float = 0.0) -> ClusterConfig:
    """Nodes for `executors` pods; `create_rate`: kubesim's hard cap on creates a second (429
    with a Retry-After beyond it, one second's burst), 0 for none."""
    return ClusterConfig(
        nodes=math.ceil(executors / 110) + 2,
        start_latency=start_latency,
        start_jitter=0.0,
        create_rate=create_rate,
    )


@contextmanager
def kubesim(
    executors: int,
    *,
    start_latency: float,
    apf: ApfConfig | None = None,
    create_rate: float = 0.0,
) -> Iterator[tuple[KubeSim, Running]]:
    """A kubesim for `executors` pods (APF and a hard create cap as given), and the running-pod
    counter on it."""
    running = Running()
    sim = KubeSim(
        cluster=cluster(executors, start_latency=start_latency, create_rate=create_rate),
        apf=apf,
        event_window=max(10_000, 3 * executors),
    )
    with sim:
        sim.store.add_listener(running.on_event)
        yield sim, running


@contextmanager
def sidecars(
    sim: KubeSim | None,
    apps: Sequence[str],
    policy: Policy,
    extra: Mapping[str, str] | None = None,
    *,
    server: Sequence[str] = (),
) -> Iterator[list[Driver]]:
    """One `execpods-sidecar serve` process per app on `sim` (or on the server the `server`
    arguments name, e.g. a kubeconfig), with `policy`; killed at the end."""
    properties = {
        "spark.kubernetes.container.image": "execpods/executor:bench",
        "execpods.sidecar.checkPermissions": "false",
        "execpods.sidecar.metrics.enabled": "true",
        "execpods.sidecar.metrics.port": "0",
        "spark.executor.instances": "0",
        **policy.properties,
        **(extra or {}),
    }
    conf = [arg for key, value in properties.items() for arg in ("--conf", f"{key}={value}")]
    env = {**os.environ, "EXECPODS_LOG_LEVEL": "ERROR"}
    with ExitStack() as stack:
        processes = []
        for app in apps:
            where = ["--api-url", sim.url] if sim is not None else list(server)
            command = [str(policy.executable), "serve", "--app-id", app, *where]
            command += ["--listen", "127.0.0.1:0", *conf]
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
            )
            stack.callback(_stop, process)
            processes.append((app, process))
        drivers = []
        for app, process in processes:
            assert process.stdout is not None
            metrics = process.stdout.readline().strip()
            listening = process.stdout.readline().strip()
            if not (metrics.startswith(METRICS) and listening.startswith(LISTENING)):
                raise RuntimeError(f"sidecar {app} did not start: {metrics!r} {listening!r}")
            drivers.append(
                Driver(
                    app_id=app,
                    address=listening.removeprefix(LISTENING),
                    metrics_url=metrics.removeprefix(METRICS),
                )
            )
        yield drivers


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def scale(
    drivers: Sequence[Driver],
    running: Running,
    target: int,
    *,
    timeout: float,
    tick: Callable[[float], None] | None = None,
    interval: float = 0.25,
) -> None:
    """Ask every driver for `target` executors at once; wait until each has them Running (or
    `timeout`), calling `tick(seconds since the start)` every `interval`."""
    clients = [AllocatorClient(d.address) for d in drivers]
    try:
        start = time.monotonic()
        for driver, client in zip(drivers, clients, strict=True):
            driver.target, driver.started, driver.reached = target, time.monotonic(), None
            client.request_total(target)
        next_tick = start
        while time.monotonic() - start < timeout:
            now = time.monotonic()
            for driver in drivers:
                if driver.reached is None and running.count(driver.app_id) >= target:
                    driver.reached = now
            if all(d.reached is not None for d in drivers):
                return
            if tick is not None and now >= next_tick:
                tick(now - start)
                next_tick += interval
            with running.changed:
                running.changed.wait(0.05)
    finally:
        for client in clients:
            client.close()


def create_rate(sim: KubeSim, count: int, *, connections: int = 4) -> float:
    """Creates a second over `connections` keep-alive connections, as fast as they go: the
    physical bound's rate (no client limit, no server cap)."""
    body = orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "bound-", "labels": {"bound": "1"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    per = math.ceil(count / connections)

    def run() -> None:
        conn = http.client.HTTPConnection(sim.host, sim.port, timeout=30)
        try:
            for _ in range(per):
                conn.request(
                    "POST",
                    "/api/v1/namespaces/bound/pods",
                    body=body,
                    headers={"Content-Type": "application/json"},
                )
                conn.getresponse().read()
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(connections)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return per * connections / (time.perf_counter() - start)


def create_calls(sim: KubeSim) -> tuple[int, int]:
    """(pod create calls, of which answered 429) in kubesim's request log (not the id ledger's
    ConfigMap)."""
    creates = [r for r in sim.requests() if r.verb == "create" and r.path.endswith("/pods")]
    return len(creates), sum(1 for r in creates if r.status == 429)


def sustained_rate(sim: KubeSim) -> float | None:
    """Accepted pod creates a second between the first and the last accepted create."""
    times = sorted(
        r.at
        for r in sim.requests()
        if r.verb == "create" and r.status == 201 and r.path.endswith("/pods")
    )
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def flow_calls(sim: KubeSim, app: str) -> tuple[int, int]:
    """(calls, of which 429) of one sidecar's APF flow."""
    flows = sim.apf.state()["flows"]
    assert isinstance(flows, dict)
    state = flows.get(f"execpods-sidecar/{app}", {})
    served, rejected = int(state.get("served", 0)), int(state.get("rejected", 0))
    return served + rejected, rejected


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    if not values or not any(values):
        return 0.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))
