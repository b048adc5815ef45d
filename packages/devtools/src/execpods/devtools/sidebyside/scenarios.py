"""The side-by-side scenarios: what a platform team's first weeks do to executor pods.

Each scenario is a spark-defaults.conf and a script of steps, run once with Spark's own allocator
and once through the plugin and a sidecar. ``size`` scales the executors (the check runs the
smallest size; ``python -m execpods.devtools.sidebyside --size 20`` a larger one). Scripts call
what dynamic allocation calls (``requestTotalExecutors``, ``decommissionExecutors``,
``killExecutors``) rather than waiting for its idle timers, and disrupt pods as a cluster does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execpods.devtools.sidebyside.run import ScenarioRun
from execpods.kubesim import ClusterConfig

__all__ = ["SCENARIOS", "Scenario", "realistic_defaults"]

TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  labels:
    template-label: from-the-template
spec:
  tolerations:
    - key: dedicated
      operator: Equal
      value: spark
      effect: NoSchedule
  securityContext:
    fsGroup: 185
  containers:
    - name: spark-kubernetes-executor
"""


def realistic_defaults(app_id: str, work: Path) -> dict[str, str]:
    """A spark-defaults.conf as a platform team writes one: sizes, overhead, environment, labels
    and annotations, a node selector, a pod template with tolerations, decommission on."""
    template = work / "executor-template.yaml"
    template.write_text(TEMPLATE)
    return {
        "spark.kubernetes.container.image": "apache/spark:4.3.0",
        "spark.executor.cores": "2",
        "spark.executor.memory": "1g",
        "spark.executor.memoryOverhead": "512m",
        "spark.kubernetes.executor.request.cores": "1500m",
        "spark.kubernetes.executor.limit.cores": "2",
        "spark.executorEnv.TEAM_QUEUE": "analytics",
        "spark.kubernetes.executor.label.team": "data-eng",
        "spark.kubernetes.executor.annotation.example.com/cost-center": "cc-42",
        "spark.kubernetes.node.selector.kubernetes.io/os": "linux",
        "spark.kubernetes.executor.podTemplateFile": str(template),
        "spark.kubernetes.executor.podNamePrefix": app_id,
        "spark.decommission.enabled": "true",
        "spark.kubernetes.executor.decommissionLabel": "example.com/decommissioning",
        "spark.kubernetes.executor.decommissionLabelValue": "true",
        "spark.kubernetes.executor.podDeletionCost": "-100",
        "spark.kubernetes.dynamicAllocation.deleteGracePeriod": "2s",
        "spark.kubernetes.allocation.batch.delay": "500ms",
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    name: str
    describe: str
    script: Callable[[ScenarioRun, int], None]
    conf: Mapping[str, str] = field(default_factory=dict)
    """On top of the realistic defaults."""
    cluster: ClusterConfig = field(
        default_factory=lambda: ClusterConfig(
            nodes=4, start_latency=0.2, start_jitter=0.0, stop_latency=0.3, seed=7
        )
    )


def _initial(run: ScenarioRun, size: int) -> None:
    run.step("start")
    run.start_app(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("stop")
    run.stop_app()
    run.wait(lambda pods: not pods, "every executor gone after the stop")


def _dynamic(run: ScenarioRun, size: int) -> None:
    run.step("start")
    run.start_app(**{"spark.executor.instances": "1"})
    run.wait_running(1)
    run.step("scale up")
    run.total(size + 1)
    run.wait_running(size + 1)
    run.step("decommission")
    # ExecutorAllocationManager: the target first, then the idle executors, decommissioned.
    run.total(1)
    run.decommission(*range(2, size + 2))
    run.wait_running(1)
    run.step("kill a hung executor")
    run.hang(1)
    run.kill(1)  # a plain kill: label, then a delete once the grace period has passed
    run.wait(lambda pods: not pods, "the hung executor deleted after the grace period")
    run.step("stop")
    run.stop_app()


def _gone(executor_id: int) -> Callable[[list[Mapping[str, Any]]], bool]:
    def done(pods: list[Mapping[str, Any]]) -> bool:
        return executor_id not in {int(p["metadata"]["labels"]["spark-exec-id"]) for p in pods}

    return done


def _oom_and_drain(run: ScenarioRun, size: int) -> None:
    """Each loss with the target one lower, then the target back: the next executor is created
    only once both lifecycle managers have judged the loss (Spark's replacement of the very
    executor that died races its own switch to recovery mode)."""
    run.step("start")
    run.start_app(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("drain")
    run.total(size - 1)
    drained = run.drain(1)
    run.wait(_gone(drained), "the drained executor's pod gone")
    run.settle(1.0)  # two event-processing intervals: the loss is judged
    run.step("after the drain")
    run.total(size)
    run.wait_running(size)
    run.step("oom")
    run.total(size - 1)
    killed = run.oom_kill(1)
    run.wait(_gone(killed), "the OOM-killed executor's pod gone")
    run.settle(1.0)
    run.step("after the oom")
    run.total(size)
    run.wait_running(size)
    run.step("stop")
    run.stop_app()


VOLUME = "spark.kubernetes.executor.volumes.persistentVolumeClaim.data"


def _claims(run: ScenarioRun, size: int) -> None:
    run.step("start")
    run.start_app(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("kill")
    run.kill(1)
    run.wait_running(size - 1)
    run.step("re-request")
    run.settle(2.5)  # past the pod creation timeout: the claim may now be reused
    run.total(size)
    run.wait_running(size)
    run.step("stop")
    run.stop_app()


def _restart(run: ScenarioRun, size: int) -> None:
    run.step("start")
    run.start_app(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("restart")
    run.restart(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("stop")
    run.stop_app()


RESIZE_PLUGIN = "org.apache.spark.scheduler.cluster.k8s.ExecutorResizePlugin"


def _resize(run: ScenarioRun, size: int) -> None:
    """Spark's ExecutorResizePlugin (direct) against the sidecar's resize (through the plugin,
    where Spark's refuses to start): an executor using 95% of its memory limit grows in place."""
    run.step("start")
    run.start_app(**{"spark.executor.instances": str(size)})
    run.wait_running(size)
    run.step("grow")
    limit = run.memory_limit(1)
    run.use_memory(1, 0.95)
    run.wait(lambda pods: run.memory_limit(1) > limit, "the busy executor resized")
    run.step("stop")
    run.stop_app()


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="initial",
        describe="initial allocation with a realistic spark-defaults.conf",
        script=_initial,
    ),
    Scenario(
        name="dynamic",
        describe="dynamic allocation up, down with decommission, and a hung executor killed",
        script=_dynamic,
    ),
    Scenario(
        name="oom-and-drain",
        describe="a drained executor (exit 137 after its grace), then an OOM-killed one",
        script=_oom_and_drain,
        # Executors take 1.5 s to stop: longer than the drain's 1 s grace, so the kubelet kills
        # the drained one (137), as after `kubectl drain --grace-period=1`.
        cluster=ClusterConfig(
            nodes=4, start_latency=0.2, start_jitter=0.0, stop_latency=1.5, seed=7
        ),
        conf={"spark.kubernetes.executor.eventProcessingInterval": "500ms"},
    ),
    Scenario(
        name="claims",
        describe="OnDemand claims across a kill and a re-request",
        script=_claims,
        conf={
            f"{VOLUME}.mount.path": "/data",
            f"{VOLUME}.options.claimName": "OnDemand",
            f"{VOLUME}.options.storageClass": "standard",
            f"{VOLUME}.options.sizeLimit": "1Gi",
            "spark.kubernetes.allocation.executor.timeout": "2s",
        },
    ),
    Scenario(
        name="restart",
        describe="a driver restart (with its sidecar) under spark.kubernetes.allocation.maximum",
        script=_restart,
        conf={"spark.kubernetes.allocation.maximum": "50"},
    ),
    Scenario(
        name="resize",
        describe="in-place memory resize of an executor over the threshold",
        script=_resize,
        conf={
            "spark.plugins": RESIZE_PLUGIN,  # Spark's; through the plugin it refuses to start
            "execpods.executor.resize.enabled": "true",  # the sidecar's counterpart
            "spark.kubernetes.executor.resizeInterval": "1s",
        },
    ),
)
