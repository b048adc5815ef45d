"""Metrics of the sidecar's Kubernetes API calls and of its rate limit, named as client-go's.

Registered beside `SidecarMetrics` in its registry (so one `/metrics` serves both) when metrics
are on. client-go's `rest_client_*` series are reproduced with client-go's own labels and values
(k8s.io/component-base/metrics/prometheus/restclient and client-go's rest/request.go), so a
dashboard or alert built for Kubernetes controllers reads the sidecar as it reads them:

- `rest_client_requests_total{code, method, host}`: calls by HTTP status (`<error>` when no
  answer came), HTTP method (`GET`, `POST`, `PATCH`, `DELETE`) and API server `host:port`;
- `rest_client_request_duration_seconds{verb, host}`: time from sending to the answer's headers,
  `verb` being the HTTP method as in client-go;
- `rest_client_rate_limiter_duration_seconds{verb, host}`: time a call waited for the client-side
  rate limiter;

with client-go's buckets. Kubernetes' own verbs (`create`, `watch`, `deletecollection`...) are
told apart by execpods' own series (`execpods_api_calls_total{verb, outcome}` in `metrics.py`),
and two more are execpods':

- `execpods_api_allowed_rate`: the calls a second the rate limit allows now (the adaptive
  policy's learnt rate, or the static qps);
- `execpods_api_throttled_total{verb}`: 429 answers (Too Many Requests) the API server gave, by
  Kubernetes verb.
"""

from __future__ import annotations

from execpods.k8s import ApiCall, RateLimiter
from execpods.sidecar.telemetry.hub import TelemetryListener
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["METRIC_NAMES", "NO_ANSWER", "ApiMetrics"]

CLIENT_GO_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""client-go's buckets for both latency histograms."""

NO_ANSWER = "<error>"
"""client-go's `code` for a call no answer came to (its errors are not bounded label values)."""

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
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ("code", "method", "host"),
            registry=registry,
        )
        self.latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ("verb", "host"),
            buckets=CLIENT_GO_BUCKETS,
            registry=registry,
        )
        self.limiter_wait = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            ("verb", "host"),
            buckets=CLIENT_GO_BUCKETS,
            registry=registry,
        )
        self.throttled = Counter(
            "execpods_api_throttled",
            "API calls the server answered with 429 Too Many Requests, by Kubernetes verb.",
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
        method = call.http_method
        code = str(call.code) if call.answered else NO_ANSWER
        self.requests.labels(code, method, call.host).inc()
        self.latency.labels(method, call.host).observe(call.seconds)
        self.limiter_wait.labels(method, call.host).observe(call.waited)
        if call.code == 429:
            self.throttled.labels(call.verb).inc()
