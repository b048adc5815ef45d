"""gRPC health that tells the truth: NOT_SERVING while the cluster cannot be reached, or while
allocation cannot make progress for any other reason (`execpods.core.progress`: the id ledger
unreadable, a worker thread dead, the API's credentials refused).

A sidecar that answers its driver but cannot reach the API server allocates nothing, so a probe
should see it. `ClusterHealth` follows every API call the gateway reports (a call that could not
reach the server, or got a 5xx, marks the cluster unreachable; any answer, even a refusal, marks it
reachable), and when no call has said anything for `execpods.sidecar.health.checkInterval` it
makes one itself (a list of at most one pod). Each change is applied to the standard health
service under `""` and the allocator's service name, and logged once.

Kubernetes' gRPC probes speak plaintext and send no headers, so `execpods.sidecar.health.listen`
can open a second, plaintext port that serves only the health service (for a main port behind
TLS, or bound to loopback where the kubelet cannot reach it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from execpods.core.settingkit import SettingsBase, duration_setting, parse_str, setting
from execpods.k8s import ApiCall
from execpods.sidecar.addresses import listen_address_problem
from execpods.sidecar.telemetry.hub import TelemetryListener
from grpc_health.v1 import health_pb2

logger = logging.getLogger(__name__)


def _listen_or_off(value: str) -> str | None:
    return None if not value else listen_address_problem(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthSettings(SettingsBase):
    """gRPC health: a plaintext health-only port for probes, and the cluster check's interval."""

    listen: str = setting(
        "execpods.sidecar.health.listen",
        "",
        "A second, plaintext port serving only grpc.health.v1 (for Kubernetes' gRPC probes); "
        "empty = off. Health is always served on the main port too.",
        parse=parse_str,
        rule=_listen_or_off,
    )
    check_interval: float = duration_setting(
        "execpods.sidecar.health.checkInterval",
        "5s",
        "How long without any API call before health checks the cluster itself (a list of at "
        "most one pod).",
    )


class ClusterHealth(TelemetryListener):
    """Reachability of the API server, from the calls the sidecar makes and its own probes."""

    def __init__(
        self,
        *,
        probe: Callable[[], None] | None,
        interval: float,
        on_change: Callable[[bool], None],
    ) -> None:
        self._probe = probe
        self._interval = interval
        self._on_change = on_change
        self._reachable = True
        self._last_heard = time.monotonic()
        self._last_problem = ""

    def api_call(self, call: ApiCall) -> None:
        self._last_heard = time.monotonic()
        self._set(not call.unreachable, f"a {call.verb} call failed: {call.outcome}")

    def _set(self, reachable: bool, problem: str) -> None:
        if reachable == self._reachable:
            return
        self._reachable = reachable
        if reachable:
            logger.warning("The Kubernetes API server is reachable again: SERVING.")
        else:
            logger.warning(
                "The Kubernetes API server cannot be reached (%s): NOT_SERVING.",
                problem,
                extra={"reason": "ApiUnavailable"},
            )
        self._on_change(reachable)

    async def run(self) -> None:
        """Probe whenever nothing was heard for an interval; cancel the task to stop."""
        if self._probe is None:
            return
        probe = self._probe
        while True:
            quiet = time.monotonic() - self._last_heard
            if quiet < self._interval:
                await asyncio.sleep(self._interval - quiet)
                continue
            try:
                await asyncio.to_thread(probe)
            except Exception as error:  # the gateway has reported the call already
                logger.debug("The health probe failed: %s", error)
            # A probe that never reached the gateway (e.g. it could not start) still counts.
            self._last_heard = time.monotonic()


class HealthStatus:
    """The health servicer's statuses, set from any thread through its event loop."""

    def __init__(self, servicer: Any, names: tuple[str, ...]) -> None:
        self._servicer = servicer
        self._names = names
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = False
        self._reachable = True
        self._progressing = True

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def set_serving(self, serving: bool) -> None:
        """The server's own state (started, or shutting down)."""
        self._serving = serving
        await self._apply()

    def set_reachable(self, reachable: bool) -> None:
        """The cluster's reachability (any thread)."""
        self._reachable = reachable
        self._reapply()

    def set_progressing(self, progressing: bool) -> None:
        """Whether allocation can make progress (`ProgressMonitor`; any thread)."""
        self._progressing = progressing
        self._reapply()

    @property
    def serving(self) -> bool:
        """What the statuses say (or are about to say): up, reachable and progressing."""
        return self._serving and self._reachable and self._progressing

    def _reapply(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._apply(), loop)

    async def _apply(self) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self._names:
            await self._servicer.set(name, status)
