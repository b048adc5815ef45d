"""The API-call and rate-limit metrics (client-go's `rest_client_*` names and labels), scraped
over HTTP from a real sidecar on the simulator while it creates executors and the server
throttles it."""

from __future__ import annotations

from urllib.parse import urlsplit

from execpods.client import AllocatorClient
from execpods.kubesim import KubeSim
from execpods.sidecar.telemetry.apimetrics import CLIENT_GO_BUCKETS

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for
from tests.sidecar.test_observability import METRICS_CONF, scrape, scrape_until, total, value


def test_calls_by_code_method_and_host_latency_limiter_wait_429s_and_the_allowed_rate(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("apimetrics", conf=METRICS_CONF)
    address = sidecar.server.ops.metrics_address
    host = urlsplit(sim.url).netloc  # client-go's `host` label: the API server's host:port
    before = scrape(address)
    # The adaptive policy starts at api.qps (200) and grows by one per clean answer.
    assert 200.0 <= value(before, "execpods_api_allowed_rate") < 210.0
    with AllocatorClient(sidecar.address) as client:
        client.request_total(4)
        wait_for(lambda: len(running_ids(sim, "apimetrics")) == 4, what="4 running")
        sim.throttle(1, retry_after=1)  # the next call (a create, or the id ledger's) gets 429
        client.request_total(5)
        wait_for(lambda: len(running_ids(sim, "apimetrics")) == 5, what="5 running")
    samples = scrape_until(
        address,
        # Five pods, and the id ledger's ConfigMap when there is no driver pod to annotate.
        lambda s: value(s, "rest_client_requests_total", code="201", method="POST", host=host) >= 5,
        "five creates answered 201",
    )
    assert total(samples, "rest_client_requests_total", code="429") == 1
    assert total(samples, "execpods_api_throttled_total") == 1
    assert value(samples, "rest_client_request_duration_seconds_count", verb="POST", host=host) >= 5
    assert value(samples, "rest_client_requests_total", code="200", method="GET", host=host) >= 1
    assert total(samples, "rest_client_rate_limiter_duration_seconds_count", host=host) >= 7
    # client-go's buckets, so its dashboards' quantiles read the same.
    buckets = {
        float(dict(labels)["le"])
        for (name, labels) in samples
        if name == "rest_client_request_duration_seconds_bucket"
    }
    assert buckets == {*CLIENT_GO_BUCKETS, float("inf")}
    # One 429 halved the rate it had learnt; it stays within [minQps, maxQps].
    rate = value(samples, "execpods_api_allowed_rate")
    assert 5.0 <= rate < 200.0
