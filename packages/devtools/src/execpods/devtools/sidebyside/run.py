"""One scenario run under one allocator, on a fresh simulated cluster, with simulated executors.

A `ScenarioRun` is what a scenario's script steers: it starts and stops the Spark application
(with the plugin and a sidecar in ``plugin`` mode), marks the scenario's steps, disrupts pods as a
cluster would (an OOM kill, a node drain), and waits for the cluster to settle. Beside it an
`ExecutorStandIns` thread plays the executor processes a simulated pod does not have: an executor
registers with the driver once its pod runs, and exits (its pod Succeeded) when the driver stops
or decommissions it, as Spark's executor backend does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execpods.devtools.sidebyside.sessions import SparkSessions
from execpods.devtools.simulated import simulator_properties
from execpods.devtools.spark import PLUGIN_CLASS
from execpods.devtools.spark_driver import defaults
from execpods.k8s.resize import quantity_bytes
from execpods.kubesim import ClusterConfig, KubeSim, RequestRecord
from execpods.sidecar.embedded import EmbeddedSidecar

__all__ = ["DIRECT", "PLUGIN", "ExecutorStandIns", "ScenarioRun", "Timing"]

logger = logging.getLogger(__name__)

DIRECT = "direct"
PLUGIN = "plugin"

_EXIT_MESSAGES = ("StopExecutor$", "DecommissionExecutor$", "Shutdown$")


def _env(pod: Mapping[str, Any]) -> dict[str, str]:
    containers = pod.get("spec", {}).get("containers", [])
    if not containers:
        return {}
    return {str(e["name"]): str(e.get("value", "")) for e in containers[0].get("env", [])}


def _executor_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = pod["spec"]["containers"]
    named = [c for c in containers if c["name"] == "spark-kubernetes-executor"]
    return dict(named[0] if named else containers[0])


def executor_id(pod: Mapping[str, Any]) -> int:
    return int(pod["metadata"]["labels"]["spark-exec-id"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """How long the stand-ins take: an executor exits this long after the driver stops it."""

    exit_after: float = 0.3
    poll: float = 0.1


class ExecutorStandIns:
    """Executor processes for the simulator's pods, registering and exiting as Spark's do.

    ``hung`` executors never exit when told to (a JVM stuck in a GC loop): the driver's own
    clean-up has to delete their pods. ``silent`` executors never register (an image that cannot
    reach the driver).
    """

    def __init__(
        self,
        sim: KubeSim,
        sessions: SparkSessions,
        app_id: str,
        *,
        timing: Timing,
        hung: Iterable[int] = (),
        silent: Iterable[int] = (),
    ) -> None:
        self._sim = sim
        self._sessions = sessions
        self._app_id = app_id
        self._timing = timing
        self.hung = set(hung)
        self.silent = set(silent)
        self.registered: set[int] = set()
        self.refused: set[int] = set()
        self.told: list[str] = []
        self._exits: dict[int, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="executor-stand-ins", daemon=True)

    def start(self) -> ExecutorStandIns:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _pods(self) -> list[Mapping[str, Any]]:
        return [
            p
            for p in self._sim.pods()
            if p["metadata"].get("labels", {}).get("spark-app-selector") == self._app_id
            and p["metadata"].get("labels", {}).get("spark-role") == "executor"
        ]

    def _run(self) -> None:
        while not self._stop.wait(self._timing.poll):
            try:
                self._round()
            except Exception:
                logger.exception("executor stand-ins: a round failed")

    def _round(self) -> None:
        pods = {executor_id(p): p for p in self._pods()}
        for number, pod in sorted(pods.items()):
            if number in self.registered | self.refused | self.silent:
                continue
            status = pod.get("status", {})
            if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            env = _env(pod)
            answer = self._sessions.call(
                "register",
                driverUrl=env["SPARK_DRIVER_URL"],
                id=str(number),
                host=status.get("podIP", "127.0.0.1"),
                cores=int(env.get("SPARK_EXECUTOR_CORES", "1")),
                profile=int(env.get("SPARK_RESOURCE_PROFILE_ID", "0") or 0),
            )
            with self._lock:
                (self.registered if answer["accepted"] else self.refused).add(number)
        for message in self._sessions.call("received")["messages"]:
            self.told.append(message)
            number_text, _, name = message.partition(" ")
            number = int(number_text)
            if name in _EXIT_MESSAGES and number not in self.hung:
                self._exits.setdefault(number, time.monotonic() + self._timing.exit_after)
        now = time.monotonic()
        for number, when in sorted(self._exits.items()):
            if when > now:
                continue
            del self._exits[number]
            exiting = pods.get(number)
            if exiting is not None and exiting.get("status", {}).get("phase") == "Running":
                with contextlib.suppress(Exception):
                    self._sim.succeed_pod(exiting["metadata"]["name"])


class ScenarioRun:
    """One run of a scenario: the cluster, the application, and the marks of its steps."""

    def __init__(
        self,
        *,
        mode: str,
        sessions: SparkSessions,
        app_id: str,
        spark_conf: Mapping[str, str],
        cluster: ClusterConfig,
        plugin_jar: Path | None,
        timing: Timing,
        timeout: float = 30.0,
    ) -> None:
        if mode == PLUGIN and plugin_jar is None:
            raise ValueError("the plugin mode needs the plugin jar")
        self.mode = mode
        self.sessions = sessions
        self.app_id = app_id
        self.spark_conf = dict(spark_conf)
        self.timing = timing
        self.timeout = timeout
        self.sim = KubeSim(cluster=cluster)
        self.steps: list[tuple[str, float]] = []
        self.sidecar: EmbeddedSidecar | None = None
        self.stand_ins: ExecutorStandIns | None = None
        self._hung: set[int] = set()
        self._silent: set[int] = set()
        self.app_running = False
        self.records: list[RequestRecord] = []
        """The simulator's request log, kept when the run ends."""

    # -- the run's life ------------------------------------------------------------------------

    def __enter__(self) -> ScenarioRun:
        self.sim.start()
        self.sim.keep_request_bodies()
        self._driver_pod()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.app_running:
                self.stop_app()
        finally:
            self._stop_sidecar()
            self.records = self.sim.requests()
            self.sim.close()

    @property
    def driver_pod_name(self) -> str:
        return f"{self.app_id}-driver"

    def _driver_pod(self) -> None:
        """The driver's pod, as in cluster mode (the driver process itself runs here): Spark
        waits for it to be ready, owns executors by it, and the sidecar keeps its ledger on it."""
        self.sim.create_pod(
            {
                "metadata": {
                    "name": self.driver_pod_name,
                    "labels": {"spark-app-selector": self.app_id, "spark-role": "driver"},
                },
                "spec": {
                    "containers": [
                        {"name": "spark-kubernetes-driver", "image": "apache/spark:4.3.0"}
                    ]
                },
            }
        )
        self.wait_for_driver()
        self.spark_conf.setdefault("spark.kubernetes.driver.pod.name", self.driver_pod_name)

    def wait_for_driver(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            pod = self.sim.pod(self.driver_pod_name)
            if pod is not None and pod.get("status", {}).get("phase") == "Running":
                return
            time.sleep(0.05)
        raise TimeoutError("the driver pod did not start")

    def step(self, name: str) -> None:
        """Calls from here on belong to step ``name``."""
        self.steps.append((name, self.sim.now()))

    def _sidecar_properties(self) -> dict[str, str]:
        # The sidecar reads the application's spark-defaults.conf too (its decommission label,
        # its batch settings...); it allocates nothing until Spark declares its pod template.
        conf = {k: v for k, v in self.spark_conf.items() if not k.startswith("spark.execpods.")}
        conf["spark.executor.instances"] = "0"
        return simulator_properties(self.sim.url, self.app_id, **conf)

    def _start_sidecar(self) -> EmbeddedSidecar:
        sidecar = EmbeddedSidecar(self._sidecar_properties())
        sidecar.start()
        self.sidecar = sidecar
        return sidecar

    def _stop_sidecar(self) -> None:
        if self.sidecar is not None:
            sidecar, self.sidecar = self.sidecar, None
            sidecar.stop()

    def start_app(self, **conf: str) -> str:
        """Start the application (and, through the plugin, its sidecar first)."""
        settings = {**defaults(f"k8s://{self.sim.url}", 0), **self.spark_conf, **conf}
        settings["spark.app.id"] = self.app_id
        if self.mode == PLUGIN:
            sidecar = self.sidecar or self._start_sidecar()
            settings["spark.kubernetes.allocation.pods.allocator"] = PLUGIN_CLASS
            settings["spark.execpods.sidecar.address"] = sidecar.address
        else:
            settings["spark.kubernetes.allocation.pods.allocator"] = "direct"
        started = self.sessions.start(settings)
        self.app_running = True
        self.stand_ins = ExecutorStandIns(
            self.sim,
            self.sessions,
            self.app_id,
            timing=self.timing,
            hung=self._hung,
            silent=self._silent,
        ).start()
        return started

    def stop_app(self) -> None:
        """``SparkContext.stop()``: Spark (or the plugin) deletes the executors."""
        if self.stand_ins is not None:
            self.stand_ins.close()
            self.stand_ins = None
        self.sessions.call("stop")
        self.app_running = False

    def restart(self, **conf: str) -> str:
        """The driver restarts (and with it, through the plugin, its sidecar): the application
        stops, then starts again with the same id."""
        self.stop_app()
        self.wait(lambda pods: not pods, "the executors are gone after the stop")
        self._stop_sidecar()
        return self.start_app(**conf)

    # -- what the script does ------------------------------------------------------------------

    def hang(self, *executor_ids: int) -> None:
        """These executors will not exit when the driver stops them."""
        self._hung.update(executor_ids)

    def never_register(self, *executor_ids: int) -> None:
        self._silent.update(executor_ids)

    def total(self, n: int) -> None:
        self.sessions.call("total", n=n)

    def kill(self, *executor_ids: int) -> None:
        self.sessions.call("kill", ids=[str(i) for i in executor_ids])

    def decommission(self, *executor_ids: int) -> None:
        self.sessions.call("decommission", ids=[str(i) for i in executor_ids])

    def pods(self) -> list[Mapping[str, Any]]:
        """The application's executor pods, as they are now."""
        return [
            p
            for p in self.sim.pods()
            if p["metadata"].get("labels", {}).get("spark-role") == "executor"
        ]

    def pod_of(self, ordinal: int) -> Mapping[str, Any]:
        """The run's ``ordinal``-th executor pod still present (1 = the oldest)."""
        pods = sorted(self.pods(), key=executor_id)
        return pods[ordinal - 1]

    def oom_kill(self, ordinal: int) -> int:
        pod = self.pod_of(ordinal)
        self.sim.oom_kill(pod["metadata"]["name"])
        return executor_id(pod)

    def drain(self, ordinal: int, *, grace: int = 1) -> int:
        """The node is drained (``kubectl drain --grace-period``): the pod is deleted with a short
        grace, and its executor, slower to stop than that, is killed at its end (exit 137)."""
        pod = self.pod_of(ordinal)
        self.sim.delete_pod(pod["metadata"]["name"], grace_period=grace)
        return executor_id(pod)

    def memory_limit(self, ordinal: int) -> int:
        """The executor container's memory limit (bytes) of the ``ordinal``-th executor pod."""
        pod = self.pod_of(ordinal)
        limit = quantity_bytes(_executor_container(pod)["resources"]["limits"]["memory"])
        assert limit is not None
        return limit

    def use_memory(self, ordinal: int, share: float) -> str:
        """The metrics API reports the ``ordinal``-th executor using ``share`` of its memory
        limit; returns the pod's name."""
        pod = self.pod_of(ordinal)
        name = str(pod["metadata"]["name"])
        memory = str(int(self.memory_limit(ordinal) * share))
        self.sim.set_usage(name, str(_executor_container(pod)["name"]), memory=memory)
        return name

    def wait(
        self, predicate: Callable[[list[Mapping[str, Any]]], bool], what: str
    ) -> list[Mapping[str, Any]]:
        """Wait until ``predicate(executor pods)`` holds; ``what`` names it in the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            pods = self.pods()
            if predicate(pods):
                return pods
            if time.monotonic() > deadline:
                phases = {p["metadata"]["name"]: p.get("status", {}).get("phase") for p in pods}
                raise TimeoutError(f"{self.mode}: {what} within {self.timeout} s: {phases}")
            time.sleep(0.05)

    def wait_running(self, n: int, *, registered: bool = True) -> None:
        """``n`` executors Running and no other pods, each registered with the driver."""

        def done(pods: list[Mapping[str, Any]]) -> bool:
            running = [
                p
                for p in pods
                if p.get("status", {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ]
            if len(running) != n or len(pods) != n:
                return False
            if not registered or self.stand_ins is None:
                return True
            ids = {executor_id(p) for p in running} - self._silent
            return ids <= self.stand_ins.registered

        self.wait(done, f"{n} executors running")

    def settle(self, seconds: float) -> None:
        """Let time pass: timers of either allocator run out (a delete grace period)."""
        time.sleep(seconds)
