"""`execpods-demo`: the whole system on an embedded simulated cluster, in about 20 s.

It starts the Kubernetes API simulator in process (real clock), the sidecar in front of it on
127.0.0.1:0, and a sample driver that talks to the sidecar over a real gRPC channel with
`execpods.client`: it asks for executors and watches them come up, kills two, has the simulator
OOM-kill one, scales down, and shuts everything down, checking that no pod is left.

It lives in the dev-only `execpods-devtools` (with the benchmarks), so the shipped sidecar depends
on neither the simulator nor the client; `python3 tools/dev.py demo` runs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import TextIO

import grpc
from execpods.client import AllocatorClient, ExecutorRemoval, ExecutorState, Snapshot
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

PROG = "execpods-demo"
APP_ID = "demo-app"
_BAR = 24


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executors", type=int, default=16, help="executors to ask for (16)")
    parser.add_argument("--batch-size", type=int, default=5, help="allocation batch size (5)")
    parser.add_argument("--batch-delay", default="1s", help="allocation batch delay (1s)")
    parser.add_argument(
        "--start-latency", type=float, default=2.0, help="simulated pod start time, s (2.0)"
    )
    parser.add_argument(
        "--stop-latency", type=float, default=0.5, help="simulated graceful stop time, s (0.5)"
    )
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes (4)")


@dataclass
class DriverState:
    """What the sample driver has learned from its stream (updated on the stream's thread)."""

    latest: Snapshot | None = None
    removals: list[ExecutorRemoval] = field(default_factory=list)
    messages: int = 0
    ended: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)


class Console:
    """A live line on a terminal; plain lines, at most one a second, anywhere else."""

    def __init__(self, out: TextIO, started: float) -> None:
        self._out = out
        self._tty = out.isatty()
        self._started = started
        self._last_plain = ""
        self._last_plain_at = 0.0
        self._live = False

    def say(self, text: str) -> None:
        self._clear()
        print(text, file=self._out, flush=True)

    def status(self, line: str) -> None:
        stamped = f"  [{time.monotonic() - self._started:5.1f}s] {line}"
        if self._tty:
            self._out.write("\r\x1b[2K" + stamped)
            self._out.flush()
            self._live = True
        elif line != self._last_plain and time.monotonic() - self._last_plain_at >= 1.0:
            print(stamped, file=self._out, flush=True)
            self._last_plain, self._last_plain_at = line, time.monotonic()

    def _clear(self) -> None:
        if self._live:
            self._out.write("\r\x1b[2K")
            self._live = False


def progress_line(snapshot: Snapshot | None, target: int) -> str:
    if snapshot is None:
        return "waiting for the first snapshot"
    counts = {state: snapshot.count(state) for state in ExecutorState}
    running = counts[ExecutorState.RUNNING]
    filled = 0 if target == 0 else min(_BAR, round(_BAR * running / target))
    bar = "#" * filled + "." * (_BAR - filled)
    return (
        f"target {target:>4} | pending {counts[ExecutorState.PENDING]:>4} | running {running:>4}"
        f" | terminating {counts[ExecutorState.TERMINATING]:>3} [{bar}]"
    )


def _settled_at(state: DriverState, count: int) -> bool:
    """The latest snapshot shows `count` executors running and none pending."""
    latest = state.latest
    return (
        latest is not None
        and latest.count(ExecutorState.RUNNING) == count
        and latest.count(ExecutorState.PENDING) == 0
    )


class SampleDriver:
    """A driver in miniature: the typed client, one stream, and a live view."""

    def __init__(self, client: AllocatorClient, console: Console) -> None:
        self.client = client
        self.console = console
        self.state = DriverState()
        self.target = 0
        self._stream = client.stream_snapshots()
        self._thread = threading.Thread(target=self._follow, name="demo-driver", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        state = self.state
        try:
            for update in self._stream:
                with state.changed:
                    state.messages += 1
                    if update.latest is not None:
                        state.latest = update.latest
                    state.removals.extend(update.removed)
                    state.changed.notify_all()
        except grpc.RpcError as error:
            if error.code() is not grpc.StatusCode.CANCELLED:
                self.console.say(f"  the stream failed: {error.code().name}: {error.details()}")
        finally:
            with state.changed:
                state.ended = True
                state.changed.notify_all()

    def request_total(self, total: int) -> None:
        self.target = total
        result = self.client.request_total(total)
        self.console.say(
            f"> RequestTotal({total}): target {result.total}, "
            f"{result.running} running, {result.pending} pending"
        )

    def running(self) -> list[int]:
        latest = self.state.latest
        return [] if latest is None else sorted(latest.ids_in(ExecutorState.RUNNING))

    def wait_until(
        self, what: str, condition: Callable[[DriverState], bool], timeout: float = 120.0
    ) -> None:
        deadline = time.monotonic() + timeout
        state = self.state
        with state.changed:
            while not condition(state):
                if state.ended or time.monotonic() > deadline:
                    raise RuntimeError(f"gave up waiting for {what}")
                self.console.status(progress_line(state.latest, self.target))
                state.changed.wait(0.2)
            self.console.status(progress_line(state.latest, self.target))

    def wait_running(self, count: int) -> None:
        self.wait_until(f"{count} running executors", lambda s: _settled_at(s, count))

    def wait_removals(self, count: int) -> list[ExecutorRemoval]:
        self.wait_until(f"{count} removals", lambda s: len(s.removals) >= count)
        return list(self.state.removals[:count])

    def close(self) -> None:
        self._stream.cancel()
        self._thread.join(5)


def _describe(removal: ExecutorRemoval) -> str:
    lines = removal.message.strip().splitlines()
    details = [
        _terminated(line) if "state=terminated" in line else line
        for line in lines[1:]
        if ("state=terminated" in line or "reason: " in line or "message: " in line)
        and not line.endswith("None")
    ]
    first_lines = [lines[0], *(_shorten(line) for line in details)]
    if removal.killed_by_driver:
        cause = "killed by the driver"
    elif removal.exit_caused_by_app:
        cause = "caused by the app"
    else:
        cause = "caused by a user or the framework"
    return (
        f"  executor {removal.executor_id} removed: exit code {removal.exit_code}, {cause}\n      "
        + "\n      ".join(first_lines)
    )


def _terminated(status: str) -> str:
    """`container NAME terminated(exitCode=.., reason=.., message=..)` from a status line."""
    name = status.partition("name=")[2].partition(",")[0]
    state = status.partition("state=")[2].partition("), ")[0]
    return f"container {name} {state})"


def _shorten(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    if args.executors < 4:
        print(f"{PROG}: error: --executors must be at least 4", file=sys.stderr)
        return 2
    started = time.monotonic()
    console = Console(out, started)
    cluster = ClusterConfig(
        nodes=args.nodes,
        start_latency=args.start_latency,
        start_jitter=args.start_latency / 2,
        stop_latency=args.stop_latency,
        seed=7,
    )
    with KubeSim(cluster=cluster) as sim:
        console.say(f"kubesim: a simulated cluster of {args.nodes} nodes at {sim.url}")
        properties = simulator_properties(
            sim.url,
            APP_ID,
            **{
                "spark.executor.instances": "0",
                "spark.kubernetes.allocation.batch.size": str(args.batch_size),
                "spark.kubernetes.allocation.batch.delay": args.batch_delay,
                "spark.kubernetes.executor.eventProcessingInterval": "250ms",
            },
        )
        sidecar = EmbeddedSidecar(properties)
        sidecar.start()
        try:
            console.say(
                f"sidecar: serving application {APP_ID} on {sidecar.address} "
                f"(batches of {args.batch_size} every {args.batch_delay})"
            )
            code = _script(sim, sidecar, args, console)
        finally:
            sidecar.stop()
        left = _wait_for_no_pods(sim, sidecar.settings.core.labels.for_app(APP_ID), timeout=30.0)
        console.say(
            f"sidecar stopped: it deleted the executor pods on the way out; "
            f"pods left in the cluster: {left}"
        )
        console.say(f"done in {time.monotonic() - started:.1f} s")
        return code if left == 0 else 1


def _script(
    sim: KubeSim, sidecar: EmbeddedSidecar, args: argparse.Namespace, console: Console
) -> int:
    n = args.executors
    with AllocatorClient(sidecar.address) as client:
        client.wait_for_ready(10)
        driver = SampleDriver(client, console)
        try:
            console.say(f"driver: connected; asking for {n} executors")
            _scale_then_kill(driver, n, kill=2)

            victim = driver.running()[-1]
            console.say(f"kubesim: OOM-killing executor {victim}'s container")
            sim.oom_kill(f"{APP_ID}-exec-{victim}")
            (removal,) = driver.wait_removals(3)[2:]
            console.say(_describe(removal))
            driver.wait_running(n)
            console.say(f"  replaced: {n} executors running again")

            keep = max(2, n // 3)
            driver.request_total(keep)
            idle = driver.running()[keep:]
            deleted = client.kill_executors(idle)
            console.say(f"> KillExecutors({len(idle)} idle executors): {deleted} pods deleted")
            driver.wait_until(
                f"{keep} executors",
                lambda s: _settled_at(s, keep) and len(s.removals) >= 3 + len(idle),
            )
            console.say(f"  scaled down to {keep} executors")
            _summary(driver, sim, console)
        finally:
            driver.close()
    return 0


def _scale_then_kill(driver: SampleDriver, n: int, *, kill: int) -> None:
    """Ask for `n`, see them run; kill the first `kill`, see why they went and the replacements."""
    console = driver.console
    driver.request_total(n)
    driver.wait_running(n)
    console.say(f"  {n} executors running")
    doomed = driver.running()[:kill]
    deleted = driver.client.kill_executors(doomed)
    console.say(f"> KillExecutors({doomed}): {deleted} pods deleted")
    for removal in driver.wait_removals(kill):
        console.say(_describe(removal))
    driver.wait_running(n)
    console.say(f"  replaced: {n} executors running again")


def drive(address: str, executors: int, out: TextIO | None = None) -> int:
    """The sample driver alone, against a sidecar already serving at `address` (any cluster):
    ask for `executors`, watch them run, kill one and see it replaced, then scale to zero."""
    console = Console(out if out is not None else sys.stdout, time.monotonic())
    with AllocatorClient(address) as client:
        client.wait_for_ready(60)  # the sidecar may still be starting
        driver = SampleDriver(client, console)
        try:
            console.say(f"driver: connected to {address}; asking for {executors} executors")
            _scale_then_kill(driver, executors, kill=1)
            driver.request_total(0)
            deleted = client.kill_executors(driver.running())
            console.say(f"> KillExecutors(all): {deleted} pods deleted")
            driver.wait_until("no executors", lambda s: _settled_at(s, 0))
            console.say("  scaled down to 0: done")
        finally:
            driver.close()
    return 0


def _summary(driver: SampleDriver, sim: KubeSim, console: Console) -> None:
    removals = driver.state.removals
    by_app = sum(1 for r in removals if r.exit_caused_by_app)
    creates = sim.request_counts().get("create", 0)
    console.say(
        f"summary: {creates} executor pods created, {len(removals)} removals reported "
        f"({by_app} caused by the app, {len(removals) - by_app} by the driver or the framework), "
        f"{driver.state.messages} stream messages; shutting down"
    )


def _wait_for_no_pods(sim: KubeSim, labels: Mapping[str, str], *, timeout: float) -> int:
    """Pods with `labels` still listed once graceful deletion had its time (0 is the goal)."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in sim.pods() if labels.items() <= p["metadata"].get("labels", {}).items()]
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.05)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="execpods on an embedded simulated cluster, with a sample driver."
    )
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {version('execpods-devtools')}"
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="the sidecar's log level: DEBUG, INFO, WARNING or ERROR (default WARNING: the "
        "demo tells its own story)",
    )
    parser.add_argument(
        "--sidecar",
        metavar="ADDRESS",
        help="drive a sidecar already serving at ADDRESS (host:port) with the sample driver "
        "alone, instead of starting the simulator and a sidecar in process",
    )
    add_demo_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.getLevelNamesMapping().get(args.log_level.upper())
    if level is None:
        print(f"{PROG}: error: --log-level {args.log_level!r}: use DEBUG, INFO, WARNING or ERROR")
        return 2
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.sidecar:
        return drive(args.sidecar, args.executors)
    return run_demo(args)


if __name__ == "__main__":
    sys.exit(main())
