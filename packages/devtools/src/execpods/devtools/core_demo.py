"""A replay of a scale-up and a failure through the core alone.

    .venv/bin/python -m execpods.devtools.core_demo

It shows the core used as a library: `compose_backend` assembles the real store, allocator and
lifecycle manager on a deterministic scheduler, with an in-memory "cluster" as the source that
starts the pods the allocator creates. Virtual time makes it finish instantly and print the same
story every time.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from execpods.core import Machinery, Ports
from execpods.core.clock import ManualClock
from execpods.core.compose import compose_backend, scheduled_store
from execpods.core.pods import ContainerStatus, ContainerTerminated
from execpods.core.ports import SnapshotsWriter
from execpods.core.scheduling import DeterministicScheduler
from execpods.core.settings import CoreSettings
from execpods.core.states import ExecutorState
from execpods.core.testing import InMemoryPodOperations, RecordingDriver, SimpleExecutorPodBuilder

APP_ID = "demo-app"


class ToyCluster:
    """Starts every pod one tick after it was created, and tells the store, as a watch would."""

    def __init__(self, pods: InMemoryPodOperations, store: SnapshotsWriter) -> None:
        self.pods = pods
        self.store = store

    def start(self, app_id: str) -> None:
        """A `SnapshotSource`: the demo steps the cluster itself."""

    def stop(self) -> None:
        """Nothing to release."""

    def step(self) -> None:
        for name, pod in list(self.pods.pods.items()):
            if pod.phase == "Pending":
                started = replace(pod, phase="Running")
                self.pods.pods[name] = started
                self.store.update_pod(started)

    def fail(self, executor_id: int, exit_code: int) -> None:
        name = f"{APP_ID}-exec-{executor_id}"
        terminated = ContainerTerminated(exit_code=exit_code, reason="OOMKilled")
        failed = replace(
            self.pods.pods[name],
            phase="Failed",
            container_statuses=(
                ContainerStatus(name="spark-kubernetes-executor", state=terminated),
            ),
        )
        self.pods.pods[name] = failed
        self.store.update_pod(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--executors", type=int, default=12)
    args = parser.parse_args()
    settings = CoreSettings(executor_instances=0, batch_size=5)
    clock = ManualClock()
    scheduler = DeterministicScheduler(clock)
    pods = InMemoryPodOperations()
    driver = RecordingDriver()
    clusters: list[ToyCluster] = []

    def sources(store: SnapshotsWriter) -> list[ToyCluster]:
        clusters.append(ToyCluster(pods, store))
        return clusters

    backend = compose_backend(
        app_id=APP_ID,
        settings=settings,
        ports=Ports(
            pod_operations=pods,
            pod_builder=SimpleExecutorPodBuilder(),
            driver=driver,
            sources=sources,
        ),
        machinery=Machinery(
            clock=clock, store=scheduled_store(scheduler), request_scheduler=scheduler
        ),
    )
    backend.start()
    (cluster,) = clusters

    def show(event: str) -> None:
        snapshot = backend.current_snapshot
        running = snapshot.count(ExecutorState.RUNNING)
        pending = len(pods.pods) - running
        print(
            f"t={clock.monotonic():4.0f}s  {event:<34} created={len(pods.created):3d} "
            f"running={running:3d} pending={pending:3d}"
        )

    print(f"Scale-up to {args.executors} executors in batches of {settings.batch_size}:")
    backend.request_total(args.executors)
    scheduler.run_until_idle()
    show("target set")
    while backend.current_snapshot.count(ExecutorState.RUNNING) < args.executors:
        scheduler.tick(settings.batch_delay)
        cluster.step()
        show("allocation round")

    print("\nExecutor 3 fails (OOMKilled, exit code 137):")
    cluster.fail(3, 137)
    scheduler.tick(settings.batch_delay)
    show("lifecycle + allocation round")
    for executor_id, reason in driver.removed:
        first_line = reason.message.splitlines()[0]
        print(
            f"  driver told: executor {executor_id} removed, exit {reason.exit_code}: {first_line}"
        )
    cluster.step()
    scheduler.tick(settings.batch_delay)
    show("replacement running")
    running = backend.current_snapshot.count(ExecutorState.RUNNING)
    backend.stop()
    print(f"\nDone: {running} executors running, {len(driver.removed)} removal reported.")


if __name__ == "__main__":
    main()
