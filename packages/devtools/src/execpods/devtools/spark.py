"""Run real Spark (pyspark 4.3, client mode) against a Kubernetes API URL such as kubesim's.

    python -m execpods.devtools.spark --executors 20            # on a kubesim of its own
    python -m execpods.devtools.spark --executors 20 --api-url http://127.0.0.1:PORT

:class:`SparkDriver` starts ``spark_driver.py`` in its own process and steers it over stdin;
:class:`ExecutorWatch` follows the application's executor pods over a plain HTTP watch;
:func:`spark_time_to_target` is the measurement the time-to-target benchmark uses for its
"Spark alone" peer: from setting the executor target to N to N executor pods Running.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import importlib.util
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

from execpods.devtools.simulated import create_namespace, simulator_properties
from execpods.devtools.spark_plugin import build as build_plugin
from execpods.kubesim import ClusterConfig, KubeSim
from execpods.sidecar.embedded import EmbeddedSidecar

__all__ = [
    "DRIVER",
    "PEER_PLUGIN",
    "PEER_SPARK",
    "PLUGIN_CLASS",
    "main",
    "ExecutorWatch",
    "SparkDriver",
    "SparkRun",
    "spark_available",
    "spark_on_kubesim",
    "spark_time_to_target",
]

DRIVER = Path(__file__).with_name("spark_driver.py")
PLUGIN_CLASS = "io.execpods.spark.ExecPodsAllocator"
PEER_SPARK = "Spark 4.3 alone"
PEER_PLUGIN = "Spark 4.3 + execpods plugin"


def spark_available() -> str | None:
    """None when real Spark can run here, else why not (for a skip message)."""
    if shutil.which("java") is None:
        return "java is not installed (python3 tools/dev.py installs openjdk-17-jdk-headless)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (the 'spark' dependency group)"
    return None


class SparkDriver:
    """One Spark driver process: ``started`` on start, then commands and their answers."""

    def __init__(
        self, master: str, *, executors: int = 0, conf: dict[str, str] | None = None
    ) -> None:
        argv = [sys.executable, str(DRIVER), "--master", master, "--executors", str(executors)]
        for key, value in (conf or {}).items():
            argv += ["--conf", f"{key}={value}"]
        self._argv = argv
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.stderr_tail: list[str] = []
        self.app_id = ""

    def start(self, timeout: float = 120.0) -> SparkDriver:
        """Start the JVM driver and wait until its SparkContext is up."""
        self._proc = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, name="spark-driver-out", daemon=True)
        self._reader.start()
        threading.Thread(target=self._drain_stderr, name="spark-driver-err", daemon=True).start()
        self.app_id = str(self.expect("started", timeout)["appId"])
        return self

    def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("{"):
                self._events.put(json.loads(line))
        self._events.put({"event": "exited"})

    def _drain_stderr(self) -> None:
        assert self._proc is not None
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self.stderr_tail = [*self.stderr_tail[-999:], line.rstrip()]

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """The next event, which must be ``event`` (within ``timeout`` seconds)."""
        try:
            got = self._events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no {event!r} from the Spark driver in {timeout} s") from None
        if got.get("event") != event:
            tail = "\n".join(self.stderr_tail[-40:])
            raise RuntimeError(f"expected {event!r} from the Spark driver, got {got}\n{tail}")
        return got

    def send(self, command: str) -> None:
        assert self._proc is not None
        assert self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()

    def set_total(self, n: int, timeout: float = 30.0) -> None:
        """Set the executor target to ``n``, as dynamic allocation does."""
        self.send(f"total {n}")
        self.expect("total", timeout)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the driver ends on its own, or None if it still runs after
        ``timeout`` seconds."""
        proc = self._proc
        if proc is None:
            return None
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 60.0) -> int:
        """``SparkSession.stop()`` and wait for the process to exit; returns its exit code."""
        proc = self._proc
        if proc is None:
            return 0
        try:
            if proc.poll() is None:
                self.send("stop")
            return proc.wait(timeout)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            proc.kill()
            return proc.wait(10)
        finally:
            self._proc = None

    def __enter__(self) -> SparkDriver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ExecutorWatch:
    """The phases of executor pods, kept current by one HTTP watch, with when things happened.

    ``first_created`` is when the first executor pod appeared and ``running_at[k]`` when the
    (k+1)-th pod was first seen Running (``time.perf_counter`` seconds).
    """

    def __init__(
        self, api_url: str, *, namespace: str = "default", selector: str = "spark-role=executor"
    ) -> None:
        split = urlsplit(api_url)
        self._host, self._port = split.hostname or "127.0.0.1", split.port or 80
        query = f"watch=true&labelSelector={quote(selector)}"
        self._path = f"/api/v1/namespaces/{namespace}/pods?{query}"
        self._cond = threading.Condition()
        self.phases: dict[str, str] = {}
        self.created = 0
        self.first_created: float | None = None
        self.running_at: list[float] = []
        self._ever_running: set[str] = set()
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name="executor-watch", daemon=True)

    def start(self) -> ExecutorWatch:
        """Open the watch; on return the server has registered it (its headers came back)."""
        self._conn = http.client.HTTPConnection(self._host, self._port, timeout=600)
        self._conn.request("GET", self._path)
        self._resp = self._conn.getresponse()
        if self._resp.status != 200:
            raise RuntimeError(f"watch {self._path}: HTTP {self._resp.status}")
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self._resp is not None
        try:
            for line in self._resp:
                if line.strip():
                    self._apply(json.loads(line))
        except (OSError, ValueError, http.client.HTTPException):
            pass

    def _apply(self, event: dict[str, Any]) -> None:
        now = time.perf_counter()
        obj = event["object"]
        name = obj["metadata"]["name"]
        with self._cond:
            if event["type"] == "DELETED":
                self.phases.pop(name, None)
            else:
                if name not in self.phases:
                    self.created += 1
                    if self.first_created is None:
                        self.first_created = now
                phase = obj.get("status", {}).get("phase", "Pending")
                self.phases[name] = phase
                if phase == "Running" and name not in self._ever_running:
                    self._ever_running.add(name)
                    self.running_at.append(now)
            self._cond.notify_all()

    def running(self) -> int:
        with self._cond:
            return sum(1 for p in self.phases.values() if p == "Running")

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Block until ``predicate(phases)`` holds (True) or ``timeout`` passes (False)."""
        with self._cond:
            return bool(self._cond.wait_for(lambda: predicate(dict(self.phases)), timeout))

    def close(self) -> None:
        """End the watch: shut the socket down so the reading thread wakes, then close."""
        if self._conn is not None:
            sock = self._conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._thread.join(10)
            self._conn.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class SparkRun:
    """One measured run of Spark's own allocator."""

    executors: int
    seconds_to_target: float
    pods_created: int
    exit_code: int
    pods_left: int
    curve: tuple[tuple[float, int], ...] = ()
    """(seconds since the first executor pod was created, pods Running so far)."""
    seconds_from_request: float | None = None
    """With the plugin: from the sidecar holding a RequestTotal for `executors` (the instant a
    sidecar-alone run is timed from) to `executors` Running."""


class _FirstTarget:
    """When a sidecar first holds a target of at least `executors` (polled every 5 ms)."""

    def __init__(self, sidecar: EmbeddedSidecar, executors: int) -> None:
        self.at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._poll, args=(sidecar, executors), name="first-target", daemon=True
        )
        self._thread.start()

    def _poll(self, sidecar: EmbeddedSidecar, executors: int) -> None:
        while not self._stop.wait(0.005):
            if sum(sidecar.runtime.backend.targets().values()) >= executors:
                self.at = time.perf_counter()  # the watch's clock
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def spark_time_to_target(
    api_url: str,
    executors: int,
    *,
    conf: dict[str, str] | None = None,
    plugin_jar: Path | None = None,
    sidecar_conf: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> SparkRun:
    """Run Spark with ``executors`` executors in a namespace of its own and time its allocation:
    from its first executor pod's creation to ``executors`` pods Running. Then stop Spark and
    count what it left behind.

    The clock starts at the first pod so that the JVM's start-up is not counted (spark-submit
    refuses a starting target of 0, so the target cannot be set later by command instead).
    With ``plugin_jar`` Spark allocates through an execpods sidecar started here on the same
    API server (the "Spark + execpods plugin" peer), configured by ``sidecar_conf``.
    """
    namespace = f"spark-{uuid.uuid4().hex[:8]}"
    create_namespace(api_url, namespace)
    settings = {"spark.kubernetes.namespace": namespace, **(conf or {})}
    requested: _FirstTarget | None = None
    with contextlib.ExitStack() as stack:
        if plugin_jar is not None:
            props = simulator_properties(
                api_url,
                namespace,
                **{
                    "spark.kubernetes.namespace": namespace,
                    "spark.executor.instances": "0",
                    **(sidecar_conf or {}),
                },
            )
            sidecar = stack.enter_context(EmbeddedSidecar(props))
            requested = _FirstTarget(sidecar, executors)
            stack.callback(requested.stop)
            settings.update(
                {
                    "spark.app.id": namespace,
                    "spark.kubernetes.allocation.pods.allocator": PLUGIN_CLASS,
                    "spark.execpods.sidecar.address": sidecar.address,
                    "spark.driver.extraClassPath": str(plugin_jar),
                }
            )
        watch = ExecutorWatch(api_url, namespace=namespace).start()
        stack.callback(watch.close)
        with SparkDriver(f"k8s://{api_url}", executors=executors, conf=settings) as driver:
            reached = watch.wait_for(
                lambda phases: sum(p == "Running" for p in phases.values()) >= executors, timeout
            )
            if not reached or watch.first_created is None:
                raise TimeoutError(f"Spark did not reach {executors} Running pods in {timeout} s")
            elapsed = watch.running_at[executors - 1] - watch.first_created
            from_request = None
            if requested is not None and requested.at is not None:
                from_request = watch.running_at[executors - 1] - requested.at
            code = driver.stop()
        watch.wait_for(lambda phases: not phases, 30.0)
        return SparkRun(
            executors=executors,
            seconds_to_target=elapsed,
            seconds_from_request=from_request,
            pods_created=watch.created,
            exit_code=code,
            pods_left=len(watch.phases),
            curve=(
                (0.0, 0),
                *((t - watch.first_created, i + 1) for i, t in enumerate(watch.running_at)),
            ),
        )
    raise AssertionError("unreachable")  # pragma: no cover (ExitStack does not swallow)


def spark_on_kubesim(
    cluster: ClusterConfig,
    executors: int,
    *,
    conf: dict[str, str] | None = None,
    plugin_jar: Path | None = None,
) -> SparkRun:
    """:func:`spark_time_to_target` on a fresh kubesim with ``cluster``: the form a benchmark
    that compares peers on the same simulated cluster settings calls."""
    with KubeSim(cluster=cluster) as sim:
        return spark_time_to_target(sim.url, executors, conf=conf, plugin_jar=plugin_jar)


def main(argv: list[str] | None = None) -> int:
    """Time Spark's allocator to N Running pods and print the run as one JSON line."""
    parser = argparse.ArgumentParser(description="Spark 4.3's time to N Running executor pods")
    parser.add_argument("--executors", type=int, default=20)
    parser.add_argument("--api-url", help="an API server to use (default: a kubesim of its own)")
    parser.add_argument("--nodes", type=int, default=10, help="kubesim nodes (own kubesim only)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--plugin", action="store_true", help="allocate through an execpods sidecar (the plugin)"
    )
    args = parser.parse_args(argv)
    conf = dict(item.partition("=")[::2] for item in args.conf)
    if reason := spark_available():
        parser.error(reason)
    with tempfile.TemporaryDirectory(prefix="execpods-spark-") as tmp:
        jar = build_plugin(Path(tmp)) if args.plugin else None
        if args.api_url:
            run = spark_time_to_target(args.api_url, args.executors, conf=conf, plugin_jar=jar)
        else:
            cluster = ClusterConfig(nodes=args.nodes)
            run = spark_on_kubesim(cluster, args.executors, conf=conf, plugin_jar=jar)
    print(json.dumps({"peer": PEER_PLUGIN if jar else PEER_SPARK, **dataclasses.asdict(run)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
