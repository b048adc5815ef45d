"""Prometheus metrics of a running sidecar, on their own port (off by default).

`execpods.sidecar.metrics.enabled=true` serves `/metrics` on `execpods.sidecar.metrics.host`
(127.0.0.1 unless set) and `.port` (9464; 0 picks a free port, read back into
`SidecarMetrics.address`). Each sidecar has its own registry, so several in one process (tests,
the demo) never mix their figures.

Every metric, with its type, labels and meaning, is listed in docs/operations.md. Names follow
Prometheus' conventions: `execpods_` prefix, counters end in `_total`, durations are `_seconds`;
series another ecosystem names keep its names and labels (client-go's `rest_client_*` in
`apimetrics.py`, grpc-ecosystem's `grpc_server_*` in `grpcmetrics.py`), and the process' own
`process_*` and `python_*` series are served too. No `_created` series are exposed.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import grpc
from execpods.core import (
    AllocatorNotice,
    ExecutorExited,
    ExecutorLabels,
    ExecutorPodsSnapshot,
    ExecutorRemoval,
    ExecutorState,
    NoticeKind,
    PendingReason,
    ProgressChange,
    waiting_for,
)
from execpods.core.settingkit import (
    SettingsBase,
    non_negative,
    parse_bool,
    parse_int,
    parse_str,
    setting,
)
from execpods.k8s import ApiCall
from execpods.sidecar.telemetry.hub import TelemetryListener
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

DEFAULT_METRICS_PORT = 9464
VERSION = metadata.version("execpods-sidecar")
OOM_KILLED_EXIT_CODE = 137
"""SIGKILL: what a container the kernel killed for memory (OOMKilled) exits with."""
JVM_OUT_OF_MEMORY_EXIT_CODE = 52
"""Spark's executor exit code for a JVM OutOfMemoryError."""
SIGTERM_EXIT_CODE = 143
UNKNOWN_EXIT_CODE = -1
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _port(value: int) -> str | None:
    return None if 0 <= value <= 65535 else "must be a port from 0 (any free port) to 65535"


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSettings(SettingsBase):
    """The Prometheus endpoint: off by default; on its own address and port when on."""

    enabled: bool = setting(
        "execpods.sidecar.metrics.enabled",
        False,
        "Serve Prometheus metrics at /metrics on their own port.",
        parse=parse_bool,
    )
    host: str = setting(
        "execpods.sidecar.metrics.host",
        "127.0.0.1",
        "Address the metrics port binds (0.0.0.0 to let Prometheus scrape the pod).",
        parse=parse_str,
        rule=lambda value: None if value.strip() else "must not be empty",
    )
    port: int = setting(
        "execpods.sidecar.metrics.port",
        DEFAULT_METRICS_PORT,
        "Port of the metrics endpoint (0 = any free port).",
        parse=parse_int,
        rule=lambda value: non_negative(value) or _port(value),
    )


_WAITING_REASONS = tuple(reason.value for reason in PendingReason)


class _ExecutorsCollector(Collector):
    """`execpods_executors{state, resource_profile}` from the latest snapshot, at scrape time."""

    def __init__(self, metrics: SidecarMetrics) -> None:
        self._snapshot = metrics.snapshot
        self._profile_label = metrics.labels.resource_profile_id
        self._targets = metrics.targets
        self._effective = metrics.effective_targets
        self._kept_out = metrics.kept_out
        self._failures = metrics.failures

    def collect(self) -> Iterator[GaugeMetricFamily]:
        executors = GaugeMetricFamily(
            "execpods_executors",
            "Executors in the latest snapshot, by state and resource profile.",
            labels=("state", "resource_profile"),
        )
        counts: dict[tuple[str, str], int] = {}
        waiting = dict.fromkeys(_WAITING_REASONS, 0)
        for _, state in self._snapshot().items():
            profile = state.pod.labels.get(self._profile_label, "0")
            key = (state.state.value, profile)
            counts[key] = counts.get(key, 0) + 1
            if state.state is ExecutorState.PENDING:
                why = waiting_for(state)
                if why is not None:
                    waiting[why.reason.value] += 1
        for pod_state in ExecutorState:  # every state, so a dashboard sees zeros too
            counts.setdefault((pod_state.value, "0"), 0)
        for (state_name, profile), count in sorted(counts.items()):
            executors.add_metric((state_name, profile), count)
        yield executors
        target = GaugeMetricFamily(
            "execpods_target_executors",
            "The target the driver set, by resource profile.",
            labels=("resource_profile",),
        )
        for profile_id, total in sorted(self._targets().items()):
            target.add_metric((str(profile_id),), total)
        yield target
        by_reason = GaugeMetricFamily(
            "execpods_executors_waiting",
            "Pending executors by why they wait (Unschedulable, ImagePull, ContainerConfig, "
            "CrashLoop, FailedMount, SchedulingGated), and executors the namespace's quota keeps "
            "from being created (Quota); every reason, zeros included.",
            labels=("reason",),
        )
        waiting[PendingReason.QUOTA.value] = self._kept_out()
        for reason, count in waiting.items():
            by_reason.add_metric((reason,), count)
        yield by_reason
        effective = GaugeMetricFamily(
            "execpods_effective_target_executors",
            "The target allocation pursues, by resource profile: the driver's, capped at what "
            "the namespace's ResourceQuota admits and lowered by the pending timeout.",
            labels=("resource_profile",),
        )
        for profile_id, total in sorted(self._effective().items()):
            effective.add_metric((str(profile_id),), total)
        yield effective
        yield GaugeMetricFamily(
            "execpods_executor_failures_counted",
            "Executor failures counted now toward spark.executor.maxNumFailures (those within "
            "spark.executor.failuresValidityInterval); past the limit the application fails.",
            value=self._failures(),
        )


class SidecarMetrics(TelemetryListener):
    """The sidecar's metrics: a listener on its observers plus a scrape-time collector."""

    def __init__(
        self,
        *,
        snapshot: Callable[[], ExecutorPodsSnapshot],
        labels: ExecutorLabels,
        targets: Callable[[], Mapping[int, int]],
        effective_targets: Callable[[], Mapping[int, int]] | None = None,
        kept_out: Callable[[], int] = lambda: 0,
        failures: Callable[[], int] = lambda: 0,
        failure_limit: int = 0,
        app_id: str = "",
    ) -> None:
        self.snapshot = snapshot
        self.labels = labels
        self.targets = targets
        self.effective_targets = effective_targets if effective_targets is not None else targets
        self.kept_out = kept_out
        self.failures = failures
        # No `_created` series (a start time per counter and histogram child doubles the series
        # for nothing a query uses). prometheus_client's switch is process-wide: the sidecar's
        # process exposes no other registry.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        # The process' own series, as the default registry has them: process_* (CPU, memory,
        # open files, start time), python_info, python_gc_*.
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        registry.register(_ExecutorsCollector(self))
        build = Gauge(
            "execpods_build_info",
            "Always 1: the sidecar's version, its application, and the Python and gRPC it runs.",
            ("version", "app_id", "python", "grpc"),
            registry=registry,
        )
        build.labels(VERSION, app_id, platform.python_version(), grpc.__version__).set(1)
        Gauge(
            "execpods_executor_failures_limit",
            "spark.executor.maxNumFailures: the application fails once the count exceeds it.",
            registry=registry,
        ).set(failure_limit)
        self.removals = Counter(
            "execpods_executor_removals",
            "Executors removed (the driver told they are gone), by reason (killed_by_driver, "
            "exited, lost) and cause (oom_killed, jvm_out_of_memory, error, success, terminated, "
            "deleted, unknown).",
            ("reason", "cause"),
            registry=registry,
        )
        self.failures_total = Counter(
            "execpods_executor_failures",
            "Executor failures counted toward spark.executor.maxNumFailures, by source: pod (a "
            "pod failed) or create (creates the API refused or that failed).",
            ("source",),
            registry=registry,
        )
        self.created = Counter(
            "execpods_pods_created", "Executor pods the API accepted.", registry=registry
        )
        self.deleted = Counter(
            "execpods_pods_deleted", "Executor pods the API said it deleted.", registry=registry
        )
        self.resized = Counter(
            "execpods_pods_resized",
            "Executor pods the API resized in place (memory, execpods.executor.resize.enabled).",
            registry=registry,
        )
        self.refused = Counter(
            "execpods_pods_refused",
            "Executor pod creates the API refused, by error.",
            ("reason",),
            registry=registry,
        )
        self.api_calls = Counter(
            "execpods_api_calls",
            "Kubernetes API calls by verb and outcome (success or the error's type).",
            ("verb", "outcome"),
            registry=registry,
        )
        self.api_latency = Histogram(
            "execpods_api_call_duration_seconds",
            "Latency of Kubernetes API calls (a watch: until its response headers).",
            ("verb",),
            buckets=_FAST,
            registry=registry,
        )
        self.rounds = Histogram(
            "execpods_round_duration_seconds",
            "Duration of reconciler rounds (the count is the number of rounds).",
            ("reconciler",),
            buckets=_FAST,
            registry=registry,
        )
        self.subscribers = Gauge(
            "execpods_stream_subscribers", "Open StreamSnapshots calls.", registry=registry
        )
        self.stream_lag = Histogram(
            "execpods_stream_lag_seconds",
            "From a stream receiving snapshots from the store to sending them.",
            buckets=_FAST,
            registry=registry,
        )
        self.target_reached = Histogram(
            "execpods_target_reached_seconds",
            "From a target change to that many executors running.",
            buckets=_SLOW,
            registry=registry,
        )
        self.target_changes = Counter(
            "execpods_target_changes", "Changes of the target.", registry=registry
        )
        self.notices = Counter(
            "execpods_allocator_notices",
            "Allocator notices by kind (node_blocked: a bad node blocked, execpods.badNodes.*).",
            ("kind",),
            registry=registry,
        )
        self.blocked_nodes = Gauge(
            "execpods_blocked_nodes",
            "Nodes new executors keep off now (bad-node avoidance).",
            registry=registry,
        )
        self.refusals_unlogged = Counter(
            "execpods_refusals_unlogged",
            "Calls refused (UNAUTHENTICATED, PERMISSION_DENIED) beyond the refusal log's rate "
            "(a burst of 5 lines per peer host, then one every 10 s; 20 over all hosts).",
            ("code",),
            registry=registry,
        )
        self.ledger_distrusted = Counter(
            "execpods_id_ledger_distrusted",
            "Times the executor id ledger's mark was not believed or found changed, by reason "
            "(LedgerMarkInvalid, LedgerMarkBelowPods, LedgerGone, LedgerMarkLowered, "
            "LedgerMarkRaised); the mark is then written again.",
            ("reason",),
            registry=registry,
        )
        self.stalled = Gauge(
            "execpods_allocation_stalled",
            "1 while allocation cannot make progress for this reason (gRPC health is then "
            "NOT_SERVING): IdLedgerUnreadable, IdLedgerUnwritable, ThreadDied, CredentialsRefused.",
            ("reason",),
            registry=registry,
        )
        self._lock = threading.Lock()
        self._pending_target: tuple[int, float] | None = None
        self._last_reached: int | None = None

    # -- observer callbacks ------------------------------------------------------------------

    def executor_removed(self, removal: ExecutorRemoval) -> None:
        """A removal the lifecycle manager decided (the backend's `on_removal`)."""
        reason, cause = removal_labels(removal.reason)
        self.removals.labels(reason, cause).inc()
        if reason == "exited" and removal.reason.exit_code != 0:
            self.failures_total.labels("pod").inc()  # as the lifecycle manager counts it

    def notice(self, notice: AllocatorNotice) -> None:
        """An allocator notice: refused and failed creates count toward the limit too; every
        notice is counted by kind, and blocked nodes are followed (bad-node avoidance)."""
        if notice.kind in (NoticeKind.CREATE_REFUSED, NoticeKind.CREATE_FAILED):
            self.failures_total.labels("create").inc(notice.count)
        self.notices.labels(notice.kind.value).inc(notice.count)
        if notice.kind is NoticeKind.ID_LEDGER_DISTRUSTED:
            self.ledger_distrusted.labels(notice.reason).inc()
        if notice.kind is NoticeKind.NODE_BLOCKED:
            self.blocked_nodes.inc()
        elif notice.kind is NoticeKind.NODE_UNBLOCKED:
            self.blocked_nodes.dec()

    def refusal_unlogged(self, code: str) -> None:
        """A refused call the refusal log left out (`security.RefusalLog`)."""
        self.refusals_unlogged.labels(code).inc()

    def progress_changed(self, change: ProgressChange) -> None:
        """A stall began or ended (`ProgressMonitor`'s listener)."""
        self.stalled.labels(change.stall.reason).set(1 if change.stalled else 0)

    def api_call(self, call: ApiCall) -> None:
        self.api_calls.labels(call.verb, call.outcome).inc()
        self.api_latency.labels(call.verb).observe(call.seconds)

    def pods_created(self, count: int) -> None:
        self.created.inc(count)

    def pods_deleted(self, count: int) -> None:
        self.deleted.inc(count)

    def pods_resized(self, count: int) -> None:
        self.resized.inc(count)

    def pod_refused(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    def round_finished(self, kind: str, seconds: float) -> None:
        self.rounds.labels(kind).observe(seconds)

    def stream_opened(self) -> None:
        self.subscribers.inc()

    def stream_closed(self) -> None:
        self.subscribers.dec()

    def stream_sent(self, lag: float) -> None:
        self.stream_lag.observe(lag)

    def target_set(self, total: int) -> None:
        """A new total starts the clock; the same total asked again keeps it running."""
        with self._lock:
            pending = self._pending_target
            if pending is not None and pending[0] == total:
                return
            if pending is None and self._last_reached == total:
                return
            self._pending_target = (total, time.monotonic())
        self.target_changes.inc()

    def on_snapshots(self, snapshots: Sequence[ExecutorPodsSnapshot]) -> None:
        """A store subscriber, used as a ticker: is the pending target running now?"""
        with self._lock:
            pending = self._pending_target
        if pending is None:
            return
        total, since = pending
        latest = snapshots[-1] if snapshots else self.snapshot()
        if latest.count(ExecutorState.RUNNING) != total:
            return
        with self._lock:
            if self._pending_target == pending:
                self._pending_target = None
                self._last_reached = total
                self.target_reached.observe(time.monotonic() - since)


def removal_labels(exited: ExecutorExited) -> tuple[str, str]:
    """(reason, cause) of a removal: a handful of values each, fit for labels."""
    if exited.killed_by_driver:
        reason = "killed_by_driver"
    elif exited.exit_caused_by_app:
        reason = "exited"
    else:
        reason = "lost"
    code = exited.exit_code
    if "OOMKilled" in exited.message or code == OOM_KILLED_EXIT_CODE:
        cause = "oom_killed"
    elif code == JVM_OUT_OF_MEMORY_EXIT_CODE:
        cause = "jvm_out_of_memory"
    elif reason == "lost" and code == UNKNOWN_EXIT_CODE:
        cause = "deleted"
    elif code == UNKNOWN_EXIT_CODE:
        cause = "unknown"
    elif code == 0:
        cause = "success"
    elif code == SIGTERM_EXIT_CODE:
        cause = "terminated"
    else:
        cause = "error"
    return reason, cause


class MetricsServer:
    """The HTTP endpoint: `start()` binds and reads the port back, `stop()` closes it."""

    def __init__(self, settings: MetricsSettings, registry: CollectorRegistry) -> None:
        self._settings = settings
        self._registry = registry
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.address = ""

    def start(self) -> str:
        try:
            server, thread = start_http_server(
                self._settings.port, addr=self._settings.host, registry=self._registry
            )
        except OSError as error:
            raise OSError(
                f"cannot serve metrics on {self._settings.host}:{self._settings.port} "
                f"(execpods.sidecar.metrics.host/port): {error.strerror or error}"
            ) from error
        self._server, self._thread = server, thread
        host = self._settings.host
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{server.server_port}"
        logger.info("Serving Prometheus metrics on http://%s/metrics.", self.address)
        return self.address

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)
