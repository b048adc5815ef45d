"""Metrics of the sidecar's Kubernetes API calls and of its rate limit, named as client-go's.

Registered beside `SidecarMetrics` in its registry (so one `/metrics` serves both) when metrics
are on. client-go's `rest_client_*` names are kept where the meaning is the same, so a dashboard
built for Kubernetes controllers reads the sidecar too:

- `rest_client_requests_total{verb, code}`: calls by verb and HTTP status (`0`: no answer);
- `rest_client_request_duration_seconds{verb}`: time from sending to the answer's headers;
- `rest_client_rate_limiter_duration_seconds{verb}`: time a call waited for the rate limiter;
- `execpods_api_allowed_rate`: the calls a second the rate limit allows now (the adaptive
  policy's learnt rate, or the static qps);
- `execpods_api_throttled_total{verb}`: 429 answers (Too Many Requests) the API server gave.
"""

from __future__ import annotations

from execpods.k8s import ApiCall, RateLimiter
from execpods.sidecar.telemetry.hub import TelemetryListener
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ApiMetrics", "METRIC_NAMES"]

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

METRIC_NAMES = (
    "rest_client_requests_total",
    "rest_client_request_duration_seconds",
    "rest_client_rate_limiter_duration_seconds",
    "execpods_api_allowed_rate",
    "execpods_api_throttled_total",
)


class ApiMetrics(TelemetryListener):
    """The API-call metrics: a listener on the sidecar's observers (see the module)."""

    def __init__(self, registry: CollectorRegistry, limiter: RateLimiter | None) -> None:
        self.requests = Counter(
            "rest_client_requests",
            "Kubernetes API calls by verb and HTTP status code (0: no answer).",
            ("verb", "code"),
            registry=registry,
        )
        self.latency = Histogram(
            "rest_client_request_duration_seconds",
            "Kubernetes API call latency by verb (a watch: until its response headers).",
            ("verb",),
            buckets=_LATENCY,
            registry=registry,
        )
        self.limiter_wait = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Time API calls waited for the client-side rate limiter, by verb.",
            ("verb",),
            buckets=_LATENCY,
            registry=registry,
        )
        self.throttled = Counter(
            "execpods_api_throttled",
            "API calls the server answered with 429 Too Many Requests, by verb.",
            ("verb",),
            registry=registry,
        )
        self.allowed_rate = Gauge(
            "execpods_api_allowed_rate",
            "API calls a second the client-side rate limit allows now.",
            registry=registry,
        )
        if limiter is not None:
            self.allowed_rate.set_function(lambda: limiter.rate)

    def api_call(self, call: ApiCall) -> None:
        self.requests.labels(call.verb, str(call.code)).inc()
        self.latency.labels(call.verb).observe(call.seconds)
        self.limiter_wait.labels(call.verb).observe(call.waited)
        if call.code == 429:
            self.throttled.labels(call.verb).inc()
