"""What a platform team runs beside the allocator service: health, metrics, a probe port.

`OpsPlane` is started by the server once the backend runs and stopped first at shutdown. It owns

- the health statuses (`""` and the allocator's service): SERVING only while the server is up,
  the cluster is reachable (`health.ClusterHealth`) *and* allocation can make progress (the
  backend's `ProgressMonitor`: no stall on);
- the optional plaintext health-only port (`execpods.sidecar.health.listen`);
- the optional Prometheus endpoint (`execpods.sidecar.metrics.*`) and the metrics' store
  subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
from execpods.core import ProgressChange, Subscription, watch_threads
from execpods.sidecar.telemetry.apimetrics import ApiMetrics
from execpods.sidecar.telemetry.grpcmetrics import GrpcServerMetrics
from execpods.sidecar.telemetry.health import ClusterHealth, HealthStatus
from execpods.sidecar.telemetry.metrics import MetricsServer, SidecarMetrics
from execpods.sidecar.wiring import Runtime
from execpods.v1 import allocator_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

logger = logging.getLogger(__name__)

SERVED_SERVICES = (
    allocator_pb2.DESCRIPTOR.services_by_name["ExecutorAllocator"],
    health_pb2.DESCRIPTOR.services_by_name["Health"],
)
"""The services whose gRPC series start at zero (the reflection service is not counted)."""

TARGET_TICK = 0.1
"""Seconds between checks whether a pending target runs (the resolution of that metric)."""


class OpsPlane:
    """Health, the health port and metrics of one sidecar."""

    def __init__(self, runtime: Runtime, health_servicer: Any, names: tuple[str, ...]) -> None:
        self._runtime = runtime
        self._health_servicer = health_servicer
        self.status = HealthStatus(health_servicer, names)
        settings = runtime.settings
        self.cluster = ClusterHealth(
            probe=runtime.probe,
            interval=settings.health.check_interval,
            on_change=self.status.set_reachable,
        )
        self.metrics: SidecarMetrics | None = None
        self.grpc_metrics: GrpcServerMetrics | None = None
        """The server interceptor counting and timing gRPC calls (metrics on)."""
        self.api_metrics: ApiMetrics | None = None
        self._metrics_server: MetricsServer | None = None
        self._unlisten: Callable[[], None] | None = None
        self._unprogress: Callable[[], None] | None = None
        self._unwatch: Callable[[], None] | None = None
        if settings.metrics.enabled:
            backend = runtime.backend
            self.metrics = SidecarMetrics(
                snapshot=lambda: backend.current_snapshot,
                labels=settings.core.labels,
                targets=backend.targets,
                effective_targets=backend.effective_targets,
                kept_out=backend.kept_out_by_quota,
                failures=lambda: backend.failed_executors,
                failure_limit=settings.core.max_executor_failures,
                app_id=runtime.app_id,
            )
            self.grpc_metrics = GrpcServerMetrics(self.metrics.registry)
            self.grpc_metrics.initialize(SERVED_SERVICES)
            self.api_metrics = ApiMetrics(self.metrics.registry, runtime.rate_limiter)
            self._metrics_server = MetricsServer(settings.metrics, self.metrics.registry)
        self._health_server: Any = None
        self.health_address = ""
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    @property
    def metrics_address(self) -> str:
        """host:port of the Prometheus endpoint ("" when metrics are off)."""
        return "" if self._metrics_server is None else self._metrics_server.address

    async def start(self) -> None:
        """Start the endpoints (before the backend, so a bad port fails before any pod)."""
        self.status.bind(asyncio.get_running_loop())
        progress = self._runtime.backend.progress
        with progress.held() as stalls:  # every stall from now on, the current ones first
            self._unprogress = progress.add_listener(self._progress_changed)
            for stall in stalls:
                self._progress_changed(ProgressChange(stall=stall, stalled=True))
        self._unwatch = watch_threads(progress)
        if self._metrics_server is not None and self.metrics is not None:
            self._metrics_server.start()
            self._runtime.telemetry.add(self.metrics)
            # Before the backend starts: a notice of its first round (a ledger distrusted at
            # start-up) is counted too.
            self._unlisten = self._runtime.backend.add_notice_listener(self.metrics.notice)
            if self.api_metrics is not None:
                self._runtime.telemetry.add(self.api_metrics)
        listen = self._runtime.settings.health.listen
        if listen:
            server: Any = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(self._health_servicer, server)
            try:
                port = server.add_insecure_port(listen)
            except RuntimeError as error:
                raise OSError(
                    f"cannot listen on {listen} (execpods.sidecar.health.listen): {error}"
                ) from error
            await server.start()
            self._health_server = server
            self.health_address = (
                listen if listen.startswith("unix:") else f"{listen.rsplit(':', 1)[0]}:{port}"
            )
            logger.info("Serving health only on %s.", self.health_address)

    async def running(self) -> None:
        """The backend runs: follow the cluster and report SERVING while it is reachable."""
        self._runtime.telemetry.add(self.cluster)
        if self.metrics is not None:
            backend = self._runtime.backend
            metrics = self.metrics
            # A stream of its own: every removal reaches the metrics once, as it reaches drivers.
            self._subscription = backend.open_stream(
                TARGET_TICK,
                on_snapshots=metrics.on_snapshots,
                on_removal=lambda numbered: metrics.executor_removed(numbered.removal),
            )
        self._task = asyncio.get_running_loop().create_task(self.cluster.run())
        await self.status.set_serving(True)

    def _progress_changed(self, change: ProgressChange) -> None:
        self.status.set_progressing(self._runtime.backend.progress.progressing)
        if self.metrics is not None:
            self.metrics.progress_changed(change)

    async def stop(self) -> None:
        """NOT_SERVING from now on; close the endpoints."""
        await self.status.set_serving(False)
        if self._unprogress is not None:
            self._unprogress()
        if self._unwatch is not None:
            self._unwatch()
        self._runtime.telemetry.remove(self.cluster)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._subscription is not None:
            self._subscription.cancel()
        if self._unlisten is not None:
            self._unlisten()
        if self._health_server is not None:
            await self._health_server.stop(0)
        if self._metrics_server is not None:
            await asyncio.to_thread(self._metrics_server.stop)
