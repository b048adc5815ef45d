"""Benchmarks of the core's hot paths; prints figures (run: python -m execpods.devtools.bench.core).

Each figure is the best of several repeats (the least disturbed run on a shared machine), next to
the goal set for it in the issue. Nothing here sleeps or does I/O beyond printing.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence

from execpods.core import Machinery, Ports
from execpods.core.clock import ManualClock
from execpods.core.compose import compose_backend, scheduled_store
from execpods.core.pods import ExecutorPod
from execpods.core.scheduling import DeterministicScheduler
from execpods.core.settings import CoreSettings
from execpods.core.snapshot import ExecutorPodsSnapshot
from execpods.core.testing import (
    HandFed,
    InMemoryPodOperations,
    RecordingDriver,
    SimpleExecutorPodBuilder,
    compose_deterministic,
    failed_executor,
    pending_executor,
    running_executor,
)


def best_of(repeats: int, run: Callable[[], float]) -> float:
    gc.collect()
    return min(run() for _ in range(repeats))


def running_pods(count: int) -> list[ExecutorPod]:
    return [running_executor(i) for i in range(count)]


def with_update_cost(executors: int, updates: int = 20_000) -> float:
    """Microseconds per `with_update` on a snapshot of `executors` executors."""
    base = ExecutorPodsSnapshot.from_pods(running_pods(executors))
    events = [failed_executor(i % executors) for i in range(updates)]

    def run() -> float:
        snapshot = base
        start = time.perf_counter()
        for pod in events:
            snapshot = snapshot.with_update(pod)
        return (time.perf_counter() - start) / updates * 1e6

    return best_of(3, run)


def store_throughput(executors: int = 10_000, updates: int = 100_000) -> float:
    """Updates per second into the store alone (the backend is composed but not started: no
    reconciler subscribes) with two subscribers, deliveries included."""
    events = [
        (running_executor if i % 2 else pending_executor)(i % executors) for i in range(updates)
    ]

    def run() -> float:
        scheduler = DeterministicScheduler(ManualClock())
        fed = HandFed()
        backend = compose_backend(
            app_id="bench",
            settings=CoreSettings(),
            ports=Ports(
                pod_operations=InMemoryPodOperations(),
                pod_builder=SimpleExecutorPodBuilder(),
                driver=RecordingDriver(),
                sources=fed,
            ),
            machinery=Machinery(
                clock=scheduler.clock, store=scheduled_store(scheduler), request_scheduler=scheduler
            ),
        )
        store = fed.writer
        store.replace_snapshot(running_pods(executors))
        received = [0, 0]

        def first(batch: Sequence[ExecutorPodsSnapshot]) -> None:
            received[0] += len(batch)

        def second(batch: Sequence[ExecutorPodsSnapshot]) -> None:
            received[1] += len(batch)

        backend.subscribe(1.0, first)
        backend.subscribe(2.0, second)
        start = time.perf_counter()
        for index, pod in enumerate(events):
            store.update_pod(pod)
            if index % 1000 == 999:
                scheduler.tick(1.0)
        scheduler.tick(2.0)
        elapsed = time.perf_counter() - start
        assert received == [updates + 1, updates + 1], received
        return elapsed

    return updates / best_of(3, run)


def lifecycle_batch(executors: int = 10_000, snapshots: int = 1_000) -> float:
    """Milliseconds for one lifecycle round over a batch of `snapshots` snapshots: the lifecycle
    manager alone (composed as in production; only it is started, the allocator is not)."""
    base = ExecutorPodsSnapshot.from_pods(running_pods(executors))

    def run() -> float:
        # The measured round fails many executors on purpose: not an application to fail.
        settings = CoreSettings(max_num_failures=executors * 10)
        driver = RecordingDriver(known=set(range(executors)))
        manager = compose_deterministic(settings=settings, driver=driver).lifecycle
        manager.start(driver)
        manager.on_new_snapshots([base])  # the state before the measured round
        batch = [base]
        for i in range(snapshots):
            pod = failed_executor(i) if i % 10 == 0 else running_executor(i)
            batch.append(batch[-1].with_update(pod))
        batch = batch[1:]
        start = time.perf_counter()
        manager.on_new_snapshots(batch)
        elapsed = time.perf_counter() - start
        assert len(driver.removed) == snapshots // 10
        return elapsed * 1e3

    return best_of(5, run)


def allocator_pass(executors: int = 10_000) -> float:
    """Milliseconds for one allocation round over a snapshot of `executors` executors: the
    allocator alone (composed as in production; only it is started, the lifecycle manager is
    not)."""
    snapshot = ExecutorPodsSnapshot.from_pods(running_pods(executors))

    def run() -> float:
        allocator = compose_deterministic(app_id="bench").allocator
        allocator.start("bench")
        allocator.set_total_expected_executors(executors + 5)
        start = time.perf_counter()
        allocator.on_new_snapshots([snapshot])
        return (time.perf_counter() - start) * 1e3

    return best_of(5, run)


def main() -> None:
    parser = argparse.ArgumentParser(description="execpods core benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print("execpods.core benchmarks (best of several runs)")
    costs = {n: with_update_cost(n // scale if n > 1000 else n) for n in (1_000, 10_000, 100_000)}
    for n, cost in costs.items():
        print(f"  with_update at {n:>7,} executors: {cost:6.2f} us")
    ratio = costs[100_000] / costs[1_000]
    print(f"  with_update 100k / 1k ratio:         {ratio:6.2f}   (goal <= 2)")
    rate = store_throughput(updates=100_000 // scale)
    print(f"  store, 2 subscribers, 10k executors: {rate:,.0f} updates/s   (goal >= 100,000)")
    ms = lifecycle_batch()
    print(f"  lifecycle, 1,000 snapshots x 10k:    {ms:6.2f} ms   (goal <= 50)")
    ms = allocator_pass()
    print(f"  allocator pass, 10k executors:       {ms:6.2f} ms   (goal <= 5)")


if __name__ == "__main__":
    main()
