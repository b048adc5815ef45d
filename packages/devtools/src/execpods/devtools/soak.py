"""The soak (issue 32): one sidecar process through ten minutes and more of churn and faults.

A real `execpods-sidecar serve` process allocates for one application on an in-process kubesim
(four nodes) while a driver changes its target every cycle, kills executors, and one fault of the
fault suite runs each cycle, in turn (watch drops, 410s, 500s, 429s, latency, a kubesim restart,
start failures, a lost node, finalizers, denied deletes, evictions, a restore of the API server's
state from a backup, kills the watch never saw, a driver sending garbage). `--streams`
subscribers (20 by default) read the stream for the whole run. At the end the driver scales to 0
and the sidecar gets SIGTERM. A lower target is met as a Spark driver meets it: the driver kills
the running executors it no longer wants (the sidecar, as Spark's allocator, only drops pending
ones). The report says:

- pods: executor pods created over the run (distinct uids);
- ids reused: executor ids held by two pods (must be 0);
- removals per executor: the most removals of one executor on any one stream (must be 1), and
  whether every stream heard the same removals;
- lost unreported: executors whose pods failed or were killed that no stream heard of;
- leaks: executor pods left after the SIGTERM (must be 0), the bystander untouched;
- RSS: the sidecar process's resident memory after warm-up (the first target running) and at
  the end, with its peak.

    .venv/bin/python -m execpods.devtools.soak --minutes 10
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import grpc
from execpods.client import AllocatorClient
from execpods.devtools.fault_scenarios import (
    APP_ID,
    SCENARIOS,
    FaultContext,
    Scale,
    app_pods,
    running_ids,
)
from execpods.devtools.faults import BYSTANDER, Monitor, running, wait_until
from execpods.devtools.proxy import CuttableProxy
from execpods.kubesim import ClusterConfig, KubeSim

__all__ = ["FAULTS", "SoakReport", "main", "soak"]

FAULTS = (
    "watch drops",
    "410 storm",
    "500s",
    "429s",
    "500ms latency",
    "kubesim restart",
    "20% start failures",
    "node lost",
    "finalizer-held failed pods",
    "denied deletes",
    "evictions",
    "state restored from a backup",
    "kills the watch never saw",
    "driver sends garbage",
)
"""The fault suite's scenarios that keep the same sidecar process (no restart of it)."""

CLUSTER = ClusterConfig(nodes=4, start_latency=0.3, start_jitter=0.2, stop_latency=0.05)
CYCLE = Scale(fault_seconds=8.0, target=20, deadline=60.0, drop_every=2.0)
SIDECAR = Path(sys.executable).parent / "execpods-sidecar"


@dataclass(slots=True, kw_only=True)
class SoakReport:
    seconds: float = 0.0
    cycles: int = 0
    pods: int = 0
    ids_reused: int = 0
    streams: int = 0
    removals_max: int = 0
    streams_agree: bool = False
    removed: int = 0
    lost_unreported: int = 0
    leaked: int = 0
    bystander_ok: bool = False
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_peak_mib: float = 0.0
    exit_code: int | None = None
    targets_missed: int = 0
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            self.ids_reused == 0
            and self.removals_max <= 1
            and self.streams_agree
            and self.lost_unreported == 0
            and self.leaked == 0
            and self.bystander_ok
            and self.exit_code == 0
        )

    def table(self) -> str:
        rows = [
            ("duration", f"{self.seconds / 60:.1f} min, {self.cycles} cycles"),
            ("executor pods created", str(self.pods)),
            ("ids reused", str(self.ids_reused)),
            (
                "removals per executor (max on any stream)",
                f"{self.removals_max} ({self.removed} executors removed, {self.streams} streams, "
                f"{'all alike' if self.streams_agree else 'streams DIFFER'})",
            ),
            ("lost executors no stream heard of", str(self.lost_unreported)),
            (
                "pods leaked after SIGTERM",
                f"{self.leaked} (bystander untouched: "
                f"{'yes' if self.bystander_ok else 'NO'}; exit {self.exit_code})",
            ),
            (
                "sidecar RSS",
                f"{self.rss_start_mib:.0f} MiB after warm-up -> "
                f"{self.rss_end_mib:.0f} MiB at the end (peak {self.rss_peak_mib:.0f} MiB)",
            ),
            ("targets not reached within a cycle", str(self.targets_missed)),
        ]
        lines = ["| figure | value |", "| --- | --- |"]
        lines += [f"| {name} | {value} |" for name, value in rows]
        faults = ", ".join(f"{name} x{count}" for name, count in sorted(self.faults.items()))
        return "\n".join(lines) + f"\n\nFaults: {faults}."


def rss_mib(pid: int) -> tuple[float, float]:
    """The process's resident set and its peak, in MiB (Linux /proc)."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


@contextlib.contextmanager
def sidecar_process(sim: KubeSim) -> Iterator[tuple[subprocess.Popen[str], str]]:
    conf = {
        "spark.kubernetes.container.image": "execpods/executor:soak",
        "execpods.sidecar.checkPermissions": "false",
        "spark.executor.instances": "0",
        "spark.kubernetes.allocation.batch.delay": "200ms",
        "spark.kubernetes.executor.eventProcessingInterval": "100ms",
        "spark.kubernetes.executor.apiPollingInterval": "2s",
        "spark.kubernetes.executor.deletedExecutorsCacheTimeout": "1s",
        "execpods.kubernetes.backoffMax": "5s",
        # Ten minutes of start failures, evictions and failed pods add up past Spark's default
        # limit (twice the executors): the soak is about the sidecar, not the application.
        "spark.executor.maxNumFailures": "1000000",
    }
    command = [
        str(SIDECAR),
        "--log-level",
        "WARNING",
        "serve",
        "--app-id",
        APP_ID,
        "--api-url",
        sim.url,
        "--listen",
        "127.0.0.1:0",
    ]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            if not line.startswith("execpods-sidecar: listening on "):
                raise RuntimeError(f"the sidecar did not start: {line!r}")
            yield process, line.rsplit(" ", 1)[1]
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(30)


def _read(stream: object, counts: collections.Counter[int], stop: threading.Event) -> None:
    with contextlib.suppress(Exception):
        for update in stream:  # type: ignore[attr-defined]
            for removal in update.removed:
                counts[removal.executor_id] += 1
            if stop.is_set():
                return


def soak(*, minutes: float, streams: int, seed: int = 1) -> SoakReport:
    report = SoakReport(streams=streams)
    rng = random.Random(seed)
    with KubeSim(cluster=CLUSTER) as sim, Monitor(sim) as monitor:
        bystander = sim.create_pod(
            {
                "metadata": {
                    "name": BYSTANDER,
                    "labels": {
                        "spark-app-selector": "another-app",
                        "spark-role": "executor",
                        "spark-exec-id": "1",
                    },
                },
                "spec": {"containers": [{"name": "c", "image": "spark:other"}]},
            }
        )
        with sidecar_process(sim) as (process, address), contextlib.ExitStack() as stack:
            admin = stack.enter_context(AllocatorClient(address, timeout=60))
            proxy = stack.enter_context(CuttableProxy(address))
            stop = threading.Event()
            counters = [collections.Counter[int]() for _ in range(streams)]
            opened = []
            for counts in counters:
                client = stack.enter_context(AllocatorClient(address))
                stream = client.stream_snapshots()
                opened.append(stream)
                threading.Thread(target=_read, args=(stream, counts, stop), daemon=True).start()
            admin.request_total(CYCLE.target)
            wait_until(lambda: running(sim) == CYCLE.target, CYCLE.deadline)
            report.rss_start_mib, _ = rss_mib(process.pid)
            started = time.monotonic()
            deadline = started + minutes * 60
            killed: set[int] = set()
            names = list(FAULTS)
            while time.monotonic() < deadline:
                name = names[report.cycles % len(names)]
                report.cycles += 1
                report.faults[name] += 1
                target = rng.randint(10, 40)
                ctx = FaultContext(sim=sim, scale=CYCLE, proxy=proxy, admin=admin, target=target)
                end = SCENARIOS[name](ctx)
                retried(partial(admin.request_total, ctx.target))
                time.sleep(CYCLE.fault_seconds)
                end()
                for node in sim.nodes():  # a lost node is replaced, as a node pool heals
                    if not node.ready:
                        sim.restore_node(node.name)
                report.notes.extend(f"{name}: {n}" for n in ctx.notes)
                report.notes.extend(
                    f"{name}: PROBLEM {p}" for check in ctx.checks if (p := check()) is not None
                )
                killed.update(ctx.removed)
                # The sidecar never deletes running executors to meet a lower target (as Spark:
                # scale-down takes pending ones): the driver lets the extra ones go.
                wait_until(partial(_at_least, sim, ctx.target), CYCLE.deadline)
                extra = sorted(running_ids(sim))[ctx.target :]
                if extra:
                    retried(partial(admin.kill_executors, extra))
                    killed.update(extra)
                reached = wait_until(partial(_runs, sim, ctx.target), CYCLE.deadline)
                if not reached:
                    report.targets_missed += 1
                print(
                    f"[{(time.monotonic() - started) / 60:5.1f} min] {name}: target "
                    f"{ctx.target} {'reached' if reached else 'NOT reached'} "
                    f"({running(sim)} running, {len(app_pods(sim))} pods)",
                    file=sys.stderr,
                    flush=True,
                )
                ids = sorted(running_ids(sim))
                doomed = rng.sample(ids, k=min(len(ids), rng.randint(1, 5)))
                retried(partial(admin.kill_executors, doomed))  # the target stays: replaced
                killed.update(doomed)
            report.rss_end_mib, report.rss_peak_mib = rss_mib(process.pid)
            report.seconds = time.monotonic() - started
            retried(partial(admin.request_total, 0))
            wait_until(lambda: not running_ids(sim), CYCLE.deadline)
            monitor.sample()
            expected = monitor.lost | killed
            wait_until(lambda: all(c[i] for c in counters for i in expected), 20.0)
            stop.set()
            for stream in opened:
                stream.cancel()
            process.send_signal(signal.SIGTERM)
            report.exit_code = process.wait(60)
        report.pods = sum(len(uids) for uids in monitor.uids.values())
        report.ids_reused = sum(1 for uids in monitor.uids.values() if len(uids) > 1)
        report.removals_max = max((max(c.values(), default=0) for c in counters), default=0)
        heard = [set(c) for c in counters]
        report.streams_agree = all(h == heard[0] for h in heard)
        report.removed = len(heard[0]) if heard else 0
        report.lost_unreported = len(expected - set().union(*heard)) if heard else len(expected)
        wait_until(lambda: not app_pods(sim), 10.0)
        left = app_pods(sim)
        report.leaked = len(left)
        report.notes.extend(
            f"left: {p['metadata']['name']} phase {p.get('status', {}).get('phase')} "
            f"node {p['spec'].get('nodeName')} deleting {p['metadata'].get('deletionTimestamp')} "
            f"finalizers {p['metadata'].get('finalizers')}"
            for p in left
        )
        other = sim.pod(BYSTANDER)
        report.bystander_ok = (
            other is not None
            and other["metadata"]["uid"] == bystander["metadata"]["uid"]
            and not other["metadata"].get("deletionTimestamp")
        )
    return report


RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


def retried(call: Callable[[], object], *, timeout: float = 60.0) -> None:
    """A driver's call, retried while the sidecar says to come back (an API outage or a
    throttle behind it), as a driver does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call()
            return
        except grpc.RpcError as error:
            if error.code() not in RETRIED or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _runs(sim: KubeSim, target: int) -> bool:
    return running(sim) == target


def _at_least(sim: KubeSim, target: int) -> bool:
    return running(sim) >= target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (10)")
    parser.add_argument("--streams", type=int, default=20, help="subscribers (20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    report = soak(minutes=args.minutes, streams=args.streams, seed=args.seed)
    print(report.table())
    for note in report.notes:
        print(note)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
