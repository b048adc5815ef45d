"""The Grafana dashboard (deploy/grafana-dashboard.json) queries only metrics a sidecar serves.

A live sidecar on the simulator, with metrics on, goes through what the panels show: executors
requested, run, killed by the driver, one OOM-killed, a create refused, an API call throttled
(429), a bad RPC. Its /metrics
must then hold a sample of every metric any panel or variable queries, so a renamed metric or a
misspelt query fails here rather than as an empty panel in production.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import grpc
import pytest
from execpods.client import AllocatorClient
from execpods.kubesim import KubeSim

from tests.sidecar.conftest import SidecarFactory, running_ids, wait_for
from tests.sidecar.test_observability import (
    METRICS_CONF,
    Samples,
    pod_name,
    scrape,
    scrape_until,
    total,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
_METRIC = re.compile(r"\b(?:execpods|rest_client|grpc_server|process)_[a-z0-9_]+\b")


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {name for expr in _queries(dashboard) for name in _METRIC.findall(expr)}


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            assert _METRIC.search(target["expr"]), target["expr"]
            assert 'instance=~"$instance"' in target["expr"], target["expr"]
    assert {
        "execpods_executor_removals_total",
        "grpc_server_handled_total",
        "rest_client_requests_total",
        "process_cpu_seconds_total",
    } <= queried_metrics()


def dashboard_scenario(sim: KubeSim, make_sidecar: SidecarFactory) -> tuple[Samples, Samples]:
    """A live sidecar through each case the dashboard shows: (a scrape once 3 executors run,
    a scrape after a bad RPC, a refused create, a driver kill, an OOM kill and a 429).
    The alert rules' tests (test_alert_rules.py) use these series too."""
    sidecar = make_sidecar("dashboard", conf=METRICS_CONF)
    address = sidecar.server.ops.metrics_address
    with AllocatorClient(sidecar.address) as client:
        stream = client.stream_snapshots(batch_interval_ms=50)
        client.request_total(3)
        wait_for(lambda: len(running_ids(sim, "dashboard")) == 3, what="3 running")
        baseline = scrape_until(
            address,
            lambda s: total(s, "execpods_executors", state="running") == 3,
            "3 running in the metrics",
        )
        with pytest.raises(grpc.RpcError) as refused:
            client.request_total(-1)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        sim.reject_creates(403, count=1)
        client.kill_executors([min(running_ids(sim, "dashboard"))])
        sim.oom_kill(pod_name(sim, "dashboard", max(running_ids(sim, "dashboard"))))
        sim.throttle(1, retry_after=0)  # the next API call gets a 429, for the API panels
        samples = scrape_until(
            address,
            lambda s: (
                total(s, "execpods_executor_removals_total") == 2
                and total(s, "execpods_target_reached_seconds_count") >= 1
                and total(s, "execpods_api_throttled_total") >= 1
                and total(s, "execpods_pods_refused_total", reason="PodAdmissionRejected") >= 1
            ),
            "two removals, the target reached, a 429 and the refused create",
        )
        stream.cancel()
    return baseline, {**scrape(address), **samples}


def test_every_metric_the_dashboard_queries_exists_on_a_live_sidecar(
    sim: KubeSim, make_sidecar: SidecarFactory
) -> None:
    _, samples = dashboard_scenario(sim, make_sidecar)
    served = {name for name, _ in samples}
    missing = sorted(queried_metrics() - served)
    assert not missing, f"the dashboard queries metrics no sidecar serves: {missing}"
    assert total(samples, "grpc_server_handled_total", grpc_code="InvalidArgument") == 1
