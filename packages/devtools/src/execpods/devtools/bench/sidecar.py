"""Sidecar benchmarks (printed): `.venv/bin/python -m execpods.devtools.bench.sidecar [--quick]`.

1. RequestTotal latency over loopback (p50, p99), with the sync client.
2. StreamSnapshots delivery lag with 1 and with 100 subscribers while 1,000 executors start: for
   each executor, the time from the store first holding it as running (seen by an in-process
   subscriber polling every 2 ms) to the stream's client seeing it running.
3. Time for the demo's sidecar to bring 1,000 executors to Running on the simulator with its
   default latencies (the batch settings used are printed).

Everything runs in this one process (simulator, sidecar, clients), so the figures include their
contention for the GIL: a separate driver process would see less.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import tracemalloc
from collections.abc import Sequence

import grpc
from execpods.client import AllocatorClient
from execpods.core import ExecutorExited, ExecutorPodsSnapshot, ExecutorRemoval, ExecutorState
from execpods.core.removals import RemovalChannel
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

RUNNING = pb.ExecutorState.STATE_RUNNING


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def bench_request_total(calls: int) -> None:
    with KubeSim() as sim:
        props = simulator_properties(sim.url, "bench-rt", **{"spark.executor.instances": "0"})
        with EmbeddedSidecar(props) as sidecar, AllocatorClient(sidecar.address) as client:
            for _ in range(200):
                client.request_total(0)
            samples = []
            for _ in range(calls):
                started = time.perf_counter()
                client.request_total(0)
                samples.append(time.perf_counter() - started)
    print(
        f"RequestTotal over loopback ({calls} calls, sync client): "
        f"p50 {_ms(_percentile(samples, 0.5))}, p99 {_ms(_percentile(samples, 0.99))}"
    )


class RunningTimes:
    """When each executor was first running in the store (an in-process subscriber)."""

    def __init__(self) -> None:
        self.first_running: dict[int, float] = {}
        self._last: ExecutorPodsSnapshot | None = None
        self.lock = threading.Lock()

    def on_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        now = time.monotonic()
        for snapshot in snapshots:
            changed = snapshot.changes_since(self._last)
            ids = snapshot.executor_pods.keys() if changed is None else changed
            for executor_id in ids:
                observed = snapshot.executor_pods.get(executor_id)
                if observed is not None and observed.state is ExecutorState.RUNNING:
                    with self.lock:
                        self.first_running.setdefault(executor_id, now)
            self._last = snapshot


async def _follow(
    stub: pb_grpc.ExecutorAllocatorAsyncStub,
    interval_ms: int,
    seen: dict[int, float],
    total: int,
    subscribed: asyncio.Event,
) -> None:
    call = stub.StreamSnapshots(pb.StreamSnapshotsRequest(batch_interval_ms=interval_ms))
    async for message in call:
        subscribed.set()
        now = time.monotonic()
        for snapshot in message.snapshots:
            for executor_id, observed in snapshot.executor_pods.items():
                if observed.state == RUNNING and executor_id not in seen:
                    seen[executor_id] = now
        if len(seen) >= total:
            call.cancel()
            return


def bench_stream_lag(
    loop: asyncio.AbstractEventLoop, subscribers: int, executors: int, interval_ms: int
) -> None:
    cluster = ClusterConfig(nodes=executors // 100 + 2, start_latency=1.0, start_jitter=0.5)
    with KubeSim(cluster=cluster) as sim:
        props = simulator_properties(
            sim.url,
            "bench-lag",
            **{
                "spark.executor.instances": "0",
                "spark.kubernetes.allocation.batch.size": "100",
                "spark.kubernetes.allocation.batch.delay": "200ms",
            },
        )
        with EmbeddedSidecar(props) as sidecar:
            reference = RunningTimes()
            sidecar.runtime.backend.subscribe(0.002, reference.on_snapshots)
            seen: list[dict[int, float]] = [{} for _ in range(subscribers)]
            started = time.monotonic()

            async def scenario() -> None:
                async with grpc.aio.insecure_channel(sidecar.address) as channel:
                    stub = pb_grpc.ExecutorAllocatorStub(channel)
                    events = [asyncio.Event() for _ in seen]
                    tasks = [
                        asyncio.create_task(_follow(stub, interval_ms, s, executors, e))
                        for s, e in zip(seen, events, strict=True)
                    ]
                    await asyncio.gather(*(e.wait() for e in events))
                    await stub.RequestTotal(pb.RequestTotalRequest(total=executors))
                    await asyncio.wait_for(asyncio.gather(*tasks), timeout=600)

            loop.run_until_complete(scenario())
            elapsed = time.monotonic() - started
            lags = [
                when - reference.first_running[executor_id]
                for stream in seen
                for executor_id, when in stream.items()
            ]
    print(
        f"StreamSnapshots lag, {subscribers:>3} subscriber(s), batch_interval_ms={interval_ms}, "
        f"{executors} executors starting ({elapsed:.1f} s): p50 {_ms(_percentile(lags, 0.5))}, "
        f"p99 {_ms(_percentile(lags, 0.99))}, max {_ms(max(lags))}"
    )


def bench_time_to_running(executors: int, batch_size: int, batch_delay: str) -> None:
    defaults = ClusterConfig()
    cluster = ClusterConfig(nodes=max(defaults.nodes, executors // defaults.pods_per_node + 1))
    with KubeSim(cluster=cluster) as sim:
        props = simulator_properties(
            sim.url,
            "bench-scale",
            **{
                "spark.executor.instances": "0",
                "spark.kubernetes.allocation.batch.size": str(batch_size),
                "spark.kubernetes.allocation.batch.delay": batch_delay,
            },
        )
        with EmbeddedSidecar(props) as sidecar, AllocatorClient(sidecar.address) as client:
            done = threading.Event()
            target = executors

            def check(snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
                if snapshots and snapshots[-1].count(ExecutorState.RUNNING) >= target:
                    done.set()

            sidecar.runtime.backend.subscribe(0.05, check)
            started = time.monotonic()
            client.request_total(executors)
            if not done.wait(900):
                raise TimeoutError("the executors did not all start within 15 minutes")
            elapsed = time.monotonic() - started
            creates = sim.request_counts().get("create", 0)
    print(
        f"{executors} executors to Running: {elapsed:.1f} s with batch.size={batch_size}, "
        f"batch.delay={batch_delay} (simulator defaults: start latency "
        f"{defaults.start_latency} s +/- {defaults.start_jitter} s, {cluster.nodes} nodes of "
        f"{defaults.pods_per_node} pods; {creates} creates)"
    )


def bench_removal_window(window: int) -> None:
    """The memory a full window of removals costs (execpods.sidecar.stream.removalWindow): the
    backend's removal channel alone."""
    message = (
        "The executor with id {i} exited with exit code 137(SIGKILL, possible container OOM). "
        "The API gave the following brief reason: OOMKilled. The API gave the following "
        "message: Container spark-kubernetes-executor was OOM-killed."
    )
    log = RemovalChannel(window=window)  # the channel alone, as the backend keeps it
    tracemalloc.start()
    for i in range(1, 2 * window + 1):  # the window full, and turned over once
        reason = ExecutorExited(exit_code=137, exit_caused_by_app=True, message=message.format(i=i))
        log.executor_removed(ExecutorRemoval(executor_id=i, reason=reason, snapshot_serial=i))
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        f"removal window of {window}: {used / 1e6:.2f} MB held, {used / window:.0f} bytes a "
        f"removal (messages of about {len(message)} characters)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m execpods.devtools.bench.sidecar")
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    parser.add_argument("--executors", type=int, default=1000)
    parser.add_argument("--stream-interval-ms", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--batch-delay", default="1s")
    args = parser.parse_args(argv)
    executors = 100 if args.quick else args.executors
    bench_request_total(200 if args.quick else 2000)
    # One client event loop for the whole run: grpc.aio keeps a poller bound to the loops it
    # has served, and a closed one makes it log errors.
    loop = asyncio.new_event_loop()
    for subscribers in (1, 100):
        bench_stream_lag(loop, subscribers, executors, args.stream_interval_ms)
    bench_time_to_running(executors, args.batch_size, args.batch_delay)
    loop.close()
    bench_removal_window(1_000 if args.quick else 10_000)


if __name__ == "__main__":
    main()
