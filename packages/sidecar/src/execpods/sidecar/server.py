"""The gRPC server: the allocator service, health, reflection, the listen address and shutdown.

Start: bind (port 0 reads the real port back), start serving, then start the backend (in Spark's
order, SPARK-24248: target, lifecycle manager, allocator, watch, poll), then mark the service
SERVING.

Stop (SIGTERM, SIGINT, or `stop()`): mark NOT_SERVING, end every stream cleanly (each sends what it
has and returns, so clients see a normal end of stream), stop the server with a grace period for
calls in flight, and then stop the backend in Spark's order: the store, the watch, the poll,
delete the application's executor pods (unless spark.kubernetes.executor.deleteOnTermination is
false), and close the Kubernetes client. The backend's stop blocks on the API, so it runs in a
worker thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket

import grpc
from execpods.core import ShutdownReport
from execpods.sidecar.guard import security
from execpods.sidecar.guard.templatepolicy import POLICY_KEY, TemplatePolicy, TemplatePolicyLevel
from execpods.sidecar.ops import OpsPlane
from execpods.sidecar.rpc.service import AllocatorService, add_to_server
from execpods.sidecar.wiring import Runtime
from execpods.v1 import allocator_pb2 as pb
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

logger = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["ExecutorAllocator"].full_name


class SidecarServer:
    """One grpc.aio server over one runtime; `start`, `wait_stopped`, `stop`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.service = AllocatorService(runtime)
        self._health = health.aio.HealthServicer()
        limit = runtime.settings.sidecar.max_concurrent_rpcs
        self.ops = OpsPlane(runtime, self._health, ("", SERVICE_NAME))
        # The metrics interceptor first: it sees every call end, the security refusals included.
        counted = () if self.ops.grpc_metrics is None else (self.ops.grpc_metrics,)
        metrics = self.ops.metrics
        refusals = security.RefusalLog(
            on_unlogged=None if metrics is None else metrics.refusal_unlogged
        )
        self._server = grpc.aio.server(
            options=[("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=limit if limit > 0 else None,
            interceptors=(
                *counted,
                *security.interceptors(runtime.settings.security, log=refusals),
            ),
        )
        add_to_server(self.service, self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        self.address = ""
        self._stopped = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None
        self.shutdown_report: ShutdownReport | None = None
        """What stopping did to the executor pods, once stopped."""

    async def start(self) -> str:
        """Bind, serve and start the backend; returns the address (`host:port` or `unix:path`).

        If any step fails, whatever had started is stopped (as by `stop()`) before the error is
        raised.
        """
        try:
            return await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> str:
        listen = self.runtime.settings.sidecar.listen
        credentials = security.server_credentials(self.runtime.settings.security)
        if listen.startswith("unix:"):
            refuse_unix_socket_in_use(listen.removeprefix("unix:").removeprefix("//"))
        try:
            port = (
                self._server.add_insecure_port(listen)
                if credentials is None
                else self._server.add_secure_port(listen, credentials)
            )
        except RuntimeError as error:
            raise OSError(f"cannot listen on {listen}: {error}") from error
        if listen.startswith("unix:"):
            self.address = listen
        else:
            host = listen.rsplit(":", 1)[0]
            self.address = f"{host}:{port}"
        if self.runtime.before_start is not None:
            # The driver's readiness, before any RPC can set a target the backend's start would
            # then overwrite with its initial one.
            await asyncio.to_thread(self.runtime.before_start)
        await self._server.start()
        await self.ops.start()
        await asyncio.to_thread(self.runtime.backend.start)
        await self.ops.running()
        logger.info(
            "Serving %s for application %s on %s (%s).",
            SERVICE_NAME,
            self.runtime.app_id,
            self.address,
            security.describe(self.runtime.settings.security),
        )
        log_template_policy(self.runtime.template_policy)
        return self.address

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the server gracefully (once; a second signal is ignored)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        logger.info("Received %s: shutting down.", signal.Signals(signum).name)
        ignore_stop_signals(asyncio.get_running_loop())
        self.request_stop()

    def request_stop(self) -> None:
        """Start stopping without waiting (from a signal handler); `wait_stopped` waits."""
        self._stop_task()

    async def stop(self) -> None:
        """Stop once: a second caller, or a signal during a stop, waits for the same stop."""
        await asyncio.shield(self._stop_task())

    def _stop_task(self) -> asyncio.Task[None]:
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self._stop())
        return self._stopping

    async def _stop(self) -> None:
        grace = self.runtime.settings.sidecar.shutdown_grace
        try:
            await self._health.enter_graceful_shutdown()
            await self.ops.stop()
            self.service.close_streams()
            await self._server.stop(grace)
        finally:
            contact = self.runtime.contact
            hopeless = contact.never_answered if contact is not None else (lambda: None)
            self.shutdown_report = await asyncio.to_thread(
                self.runtime.backend.stop, hopeless=hopeless
            )
            self._stopped.set()
            logger.info("The sidecar for application %s has stopped.", self.runtime.app_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def log_template_policy(policy: TemplatePolicy) -> None:
    """Say at start-up what callers' pod templates may ask for; no policy is a WARNING."""
    level = policy.level
    if level is TemplatePolicyLevel.NONE:
        logger.warning(
            "Pod templates sent over gRPC are not checked (%s=none): the cluster's admission "
            "control must refuse privileged or host-level executor pods.",
            POLICY_KEY,
        )
    else:
        logger.info(
            "Pod templates sent over gRPC: policy %s, namespace %s, service account %s.",
            level.value,
            policy.namespace,
            policy.service_account or "default",
        )


def ignore_stop_signals(loop: asyncio.AbstractEventLoop) -> None:
    """From the first stop signal on, SIGTERM and SIGINT are ignored by the process itself.

    The loop's handlers would ignore them too, but only while the loop runs: closing it restores
    the default action, so a second SIGTERM in the moments after the stop (while the process
    exits) ended it with 143 and masked the exit 1 that says pods were left. Taken out of the
    loop's hands, the ignore outlives it.
    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(signum)
        signal.signal(signum, signal.SIG_IGN)


def refuse_unix_socket_in_use(path: str) -> None:
    """Raise `OSError` if a server accepts connections on the Unix socket `path`.

    gRPC unlinks whatever is at the path before it binds, so a second sidecar would silently take
    the socket of a live one, which would go on managing pods that nobody can reach. A socket that
    refuses connections (left by a process that died) is stale: gRPC may replace it. This is what
    binding a TCP port already in use does for TCP.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno in (errno.ECONNREFUSED, errno.ENOTSOCK):
            return  # stale, or not a socket: gRPC's own bind decides
        raise OSError(f"cannot listen on unix:{path}: {error}") from error
    else:
        raise OSError(
            errno.EADDRINUSE,
            f"cannot listen on unix:{path}: another server accepts connections on it",
        )
    finally:
        probe.close()
