"""The load command: a sidecar under many streams and calls while its executors churn.

    .venv/bin/python -m execpods.devtools.load                       # 60 s, 1,000 executors
    .venv/bin/python -m execpods.devtools.load --duration 10 --executors 100 --subscribers 10

Three processes, as in production: the simulator (`kubesim`, pods start in about a second and
fail after a mean of `--failure-after` seconds, so the executors churn and the allocator keeps
replacing them), the sidecar (`execpods-sidecar serve`, metrics on), and this one, the drivers:
`--subscribers` StreamSnapshots calls and `--rate` RequestTotal calls per second (asking for
`--executors`) on a few channels, for `--duration` seconds once the executors first run.

It prints:

- errors: every call or stream that ended in anything but OK (the goal is 0);
- RequestTotal latency p50/p99 (client side) and the rate achieved;
- stream lag p99: the sidecar's `execpods_stream_lag_seconds` histogram over the run (from a
  stream receiving snapshots to sending them; interpolated within its bucket);
- messages the streams received (read raw: the subscribers do not rebuild snapshots, so the
  figures are the sidecar's, not the Python client's), replacements the churn caused;
- the sidecar's CPU time over the run;
- the sidecar's resident memory (VmRSS) when the executors first run and at the end, its peak,
  and its course over the run (sampled every 0.1 s, shown at every tenth): flat or growing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from execpods.client import AsyncAllocatorClient, ExecutorState
from execpods.v1 import allocator_pb2 as pb
from prometheus_client.parser import text_string_to_metric_families

BIN = Path(sys.executable).parent
CHANNELS = 4
TICK = 0.01
RSS_EVERY = 0.1
"""Seconds between RSS samples: a full snapshot's buffers for 100 streams live for a fraction of
a second, and a once-a-second sample misses most such peaks."""


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    """Resident set size of a process (Linux /proc), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def rss_timeline(samples: Sequence[tuple[float, float]], end: float, elapsed: float) -> str:
    """The RSS at every tenth of the run, from the samples (time, MiB): flat or growing?"""
    points: list[str] = []
    for tenth in range(10):
        at = elapsed * tenth / 10
        nearest = min(samples, key=lambda s: abs(s[0] - at), default=None)
        if nearest is not None:
            points.append(f"{nearest[0]:.0f} s {nearest[1]:.0f}")
    points.append(f"{elapsed:.0f} s {end:.0f} MiB")
    return ", ".join(points)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def histogram_quantile(buckets: list[tuple[float, float]], fraction: float) -> float:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return 0.0
    rank = fraction * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            share = 0.0 if width == 0 else (rank - lower_count) / width
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound


def lag_buckets(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[float, float]:
    return {
        float(dict(labels)["le"]): value
        for (name, labels), value in samples.items()
        if name == "execpods_stream_lag_seconds_bucket"
    }


class Child:
    """A child process whose stdout lines announce where it listens."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.name = Path(command[0]).name
        self._log = log.open("w")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._log, text=True
        )

    def line(self, prefix: str = "") -> str:
        assert self.process.stdout is not None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name} exited: see {self._log.name}")
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    messages: int = 0
    calls: int = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


STREAM_METHOD = "/execpods.v1.ExecutorAllocator/StreamSnapshots"


async def follow(channel: grpc.aio.Channel, results: Results, stop: asyncio.Event) -> None:
    """One subscriber reading the messages' bytes undecoded: the load is on the sidecar, and
    100 Python decoders of 10,000-executor snapshots would measure this process instead."""
    stream: grpc.aio.UnaryStreamMultiCallable[pb.StreamSnapshotsRequest, bytes] = (
        channel.unary_stream(
            STREAM_METHOD,
            request_serializer=pb.StreamSnapshotsRequest.SerializeToString,
            response_deserializer=None,
        )
    )
    call = stream(pb.StreamSnapshotsRequest(batch_interval_ms=100))
    try:
        async for _ in call:
            results.messages += 1
            if stop.is_set():
                break
    except asyncio.CancelledError:
        pass
    except grpc.RpcError as error:
        results.error(f"StreamSnapshots {error.code().name}")
    finally:
        call.cancel()


async def request_total(client: AsyncAllocatorClient, total: int, results: Results) -> None:
    started = time.perf_counter()
    try:
        await client.request_total(total)
    except grpc.RpcError as error:
        results.error(f"RequestTotal {error.code().name}")
        return
    results.latencies.append(time.perf_counter() - started)


async def drive(args: argparse.Namespace, address: str, sidecar_pid: int, metrics: str) -> None:
    clients = [AsyncAllocatorClient(address, timeout=10.0) for _ in range(CHANNELS)]
    for client in clients:
        await client.wait_for_ready(30)
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    results = Results()
    started = time.monotonic()
    await clients[0].request_total(args.executors)
    watcher = clients[0].stream_snapshots(batch_interval_ms=200)
    # Under churn some executors are always being replaced: 95% running is "up".
    wanted = args.executors * 95 // 100
    running = 0
    async for update in watcher:
        latest = update.latest
        running = 0 if latest is None else latest.count(ExecutorState.RUNNING)
        if running >= wanted:
            break
    watcher.cancel()
    print(
        f"{running} of {args.executors} executors running after {time.monotonic() - started:.1f} s"
    )
    rss_start = rss_mib(sidecar_pid)
    cpu_start = cpu_seconds(sidecar_pid)
    own_start = cpu_seconds(os.getpid())
    before = scrape(metrics)
    stop = asyncio.Event()
    streams = [
        asyncio.create_task(follow(channels[i % CHANNELS], results, stop))
        for i in range(args.subscribers)
    ]
    calls: set[asyncio.Task[None]] = set()
    timeline: list[tuple[float, float]] = []
    begin = time.monotonic()
    sent = 0
    next_rss = begin
    while (now := time.monotonic()) - begin < args.duration:
        due = int((now - begin) * args.rate) - sent
        for _ in range(due):
            task = asyncio.create_task(
                request_total(clients[sent % CHANNELS], args.executors, results)
            )
            calls.add(task)
            task.add_done_callback(calls.discard)
            sent += 1
        if now >= next_rss:
            timeline.append((now - begin, rss_mib(sidecar_pid)))
            next_rss = now + RSS_EVERY
        await asyncio.sleep(TICK)
    elapsed = time.monotonic() - begin
    if calls:
        await asyncio.wait(calls, timeout=30)
    stop.set()
    after = scrape(metrics)
    rss_end = rss_mib(sidecar_pid)
    cpu = cpu_seconds(sidecar_pid) - cpu_start
    own = cpu_seconds(os.getpid()) - own_start
    if streams:
        await asyncio.wait(streams, timeout=5)
    for task in streams:
        task.cancel()
    for client in clients:
        await client.close()
    for channel in channels:
        await channel.close()
    at, peak = max([(0.0, rss_start), *timeline, (elapsed, rss_end)], key=lambda s: s[1])
    report(args, results, sent, elapsed, before, after, (rss_start, rss_end, peak))
    print(f"sidecar RSS over the run: {rss_timeline(timeline, rss_end, elapsed)}")
    print(f"sidecar RSS peak: {peak:.0f} MiB at {at:.1f} s")
    print(
        f"CPU over the {elapsed:.0f} s run: sidecar {cpu:.1f} s ({cpu / elapsed:.0%} of a core), "
        f"drivers (this process) {own:.1f} s"
    )


def report(  # noqa: PLR0917 (one call site; the figures of one run)
    args: argparse.Namespace,
    results: Results,
    sent: int,
    elapsed: float,
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    rss: tuple[float, float, float],
) -> None:
    start_buckets, end_buckets = lag_buckets(before), lag_buckets(after)
    window = [(bound, end_buckets[bound] - start_buckets.get(bound, 0.0)) for bound in end_buckets]
    lag_p99 = histogram_quantile(window, 0.99)
    lag_p50 = histogram_quantile(window, 0.5)
    created = after.get(("execpods_pods_created_total", ()), 0.0) - before.get(
        ("execpods_pods_created_total", ()), 0.0
    )
    errors = sum(results.errors.values())
    latencies = results.latencies or [0.0]
    print(
        f"load: {args.subscribers} subscribers, RequestTotal at {args.rate}/s for "
        f"{elapsed:.1f} s, {args.executors} executors churning (failure after "
        f"{args.failure_after:g} s mean)"
    )
    print(f"errors: {errors}" + (f" {results.errors}" if errors else ""))
    print(
        f"RequestTotal: {len(results.latencies)} ok of {sent} sent "
        f"({len(results.latencies) / elapsed:.0f}/s), p50 {_percentile(latencies, 0.5) * 1000:.2f} "
        f"ms, p99 {_percentile(latencies, 0.99) * 1000:.2f} ms"
    )
    print(
        f"stream lag (sidecar histogram, this run): p50 {lag_p50 * 1000:.1f} ms, "
        f"p99 {lag_p99 * 1000:.1f} ms; {results.messages} messages received"
    )
    print(f"churn: {created:.0f} executor pods created during the run")
    print(f"sidecar RSS: start {rss[0]:.0f} MiB, end {rss[1]:.0f} MiB, peak {rss[2]:.0f} MiB")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="execpods-load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (60)")
    parser.add_argument("--subscribers", type=int, default=100, help="streams (100)")
    parser.add_argument("--rate", type=int, default=500, help="RequestTotal calls/s (500)")
    parser.add_argument("--executors", type=int, default=1000, help="executors (1000)")
    parser.add_argument(
        "--failure-after", type=float, default=60.0, help="mean run time before a pod fails (s)"
    )
    parser.add_argument("--logs", default="/tmp", help="folder for the children's logs")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further sidecar setting (repeatable), e.g. to compare two values side by side",
    )
    args = parser.parse_args(argv)
    logs = Path(args.logs)
    nodes = max(3, -(-args.executors * 12 // 10 // 110))
    sim = Child(
        [
            str(BIN / "kubesim"),
            "--nodes",
            str(nodes),
            "--start-latency",
            "1",
            "0.5",
            "--stop-latency",
            "0.2",
            "--failure-rate",
            "1.0",
            "--failure-after",
            str(args.failure_after),
        ],
        logs / "execpods-load-kubesim.log",
    )
    sidecar: Child | None = None
    try:
        url = sim.line()
        sidecar = Child(
            [
                str(BIN / "execpods-sidecar"),
                "serve",
                "--app-id",
                "load",
                "--api-url",
                url,
                "--listen",
                "127.0.0.1:0",
                "--image",
                "execpods/executor:load",
                "--initial-executors",
                "0",
                "--conf",
                "spark.kubernetes.allocation.batch.size=200",
                "--conf",
                "spark.kubernetes.allocation.batch.delay=200ms",
                "--conf",
                # The churn is the point: failed executors must not fail the application.
                "spark.executor.maxNumFailures=1000000000",
                "--conf",
                "execpods.sidecar.metrics.enabled=true",
                "--conf",
                "execpods.sidecar.metrics.port=0",
                *(part for conf in args.conf for part in ("--conf", conf)),
            ],
            logs / "execpods-load-sidecar.log",
        )
        metrics = sidecar.line("execpods-sidecar: metrics on ")
        address = sidecar.line("execpods-sidecar: listening on ")
        print(f"kubesim {url}, sidecar {address} (pid {sidecar.process.pid}), metrics {metrics}")
        asyncio.run(drive(args, address, sidecar.process.pid, metrics))
    finally:
        if sidecar is not None:
            sidecar.stop()
        sim.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    sys.exit(main())
