"""What a crash loop costs, with the crash-loop brake and without it, side by side (prints figures).

A composed backend on a manual clock, its pods in memory: the driver wants 50 executors, and every
executor's container exits 1 two seconds after it starts. Over 15 simulated minutes, count the
executors that failed (each one spent from `spark.executor.maxNumFailures`) and the creates sent,
under the brake's defaults (`execpods.crashLoop.maxFailureRate=10`) and with it off (`0`).

Run: `python -m execpods.devtools.bench.crashloop` (about 20 s of CPU, most of it the 15,000
creates without the brake).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from execpods.core import (
    ContainerRunning,
    ContainerStatus,
    ContainerTerminated,
    CoreSettings,
    FeatureSettings,
    ManualClock,
)
from execpods.core.crashloop import CrashLoopSettings
from execpods.core.testing import InMemoryPodOperations, compose_deterministic

EXECUTOR = "spark-kubernetes-executor"
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


@dataclass(frozen=True, slots=True)
class Spent:
    rate: str
    minutes: float
    failed: int
    creates: int


def crash_loop(rate: str, *, target: int = 50, minutes: int = 15, runs_for: float = 2.0) -> Spent:
    """Failures and creates of a crash loop over `minutes`, one allocation round a second."""
    clock = ManualClock(START)
    pods = InMemoryPodOperations()
    composed = compose_deterministic(
        settings=CoreSettings.from_properties({"spark.executor.maxNumFailures": "1000000"}),
        pod_operations=pods,
        clock=clock,
        features=FeatureSettings(
            crash_loop=CrashLoopSettings.from_properties(
                {"execpods.crashLoop.maxFailureRate": rate}
            )
        ),
    )
    composed.backend.start(initial_executors=0)
    composed.allocator.set_totals({0: target})
    born: dict[str, float] = {}
    failed = 0
    for _ in range(minutes * 60):
        clock.advance(1.0)
        now = clock.monotonic()
        for name, listed in list(pods.pods.items()):
            pod = listed
            start = born.setdefault(name, now)
            if pod.phase in (None, "Pending") and now - start >= 1.0:
                up = ContainerRunning(started_at=datetime.fromtimestamp(now, UTC))
                pod = replace(
                    pod,
                    phase="Running",
                    container_statuses=(ContainerStatus(name=EXECUTOR, state=up),),
                )
                pods.pods[name] = pod
                composed.store.update_pod(pod)
            if pod.phase != "Failed" and now - start >= runs_for:
                exited = ContainerTerminated(
                    exit_code=1,
                    reason="Error",
                    started_at=datetime.fromtimestamp(start, UTC),
                    finished_at=datetime.fromtimestamp(start + runs_for, UTC),
                )
                pod = replace(
                    pod,
                    phase="Failed",
                    container_statuses=(ContainerStatus(name=EXECUTOR, state=exited),),
                )
                pods.pods[name] = pod
                composed.store.update_pod(pod)
                failed += 1
        composed.store.notify_subscribers()
    return Spent(rate=rate, minutes=minutes, failed=failed, creates=len(pods.created))


def main() -> None:
    parser = argparse.ArgumentParser(
        description="what a crash loop costs, with and without the brake"
    )
    parser.add_argument("--minutes", type=int, default=15)
    args = parser.parse_args()
    braked, free = crash_loop("10", minutes=args.minutes), crash_loop("0", minutes=args.minutes)
    print("A crash loop: 50 executors wanted, each exits 1 two seconds after it starts")
    for spent in (braked, free):
        print(
            f"  maxFailureRate={spent.rate:>2}: {spent.failed:>6,} executors failed in "
            f"{spent.minutes} min ({spent.failed / spent.minutes:7.1f} a minute), "
            f"{spent.creates:>6,} creates"
        )
    print(f"  failures without / with the brake: {free.failed / max(braked.failed, 1):.0f}x")


if __name__ == "__main__":
    main()
