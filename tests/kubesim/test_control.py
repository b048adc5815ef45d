"""The control endpoint and the CLI: what a driver in another language uses to script scenarios."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from execpods.kubesim import KubeSim

from tests.kubesim.conftest import NS, pod_body


def call(host: str, port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body=None if body is None else orjson.dumps(body))
        resp = conn.getresponse()
        return resp.status, orjson.loads(resp.read())
    finally:
        conn.close()


def test_control_endpoint_scripts_a_scenario(sim: KubeSim) -> None:
    def ctl(method: str, route: str, body: Any = None) -> Any:
        code, data = call(sim.host, sim.port, method, "/_kubesim/" + route, body)
        assert code == 200, data
        return data

    code, _ = call(sim.host, sim.port, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("p"))
    assert code == 201
    assert ctl("POST", "run-until-idle")["ran"] >= 2
    assert ctl("GET", "state")["pods"] == 1
    pod = ctl("POST", f"pods/{NS}/p/oom")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    ctl("POST", "faults/errors", {"code": 503, "count": 1})
    assert call(sim.host, sim.port, "GET", f"/api/v1/namespaces/{NS}/pods")[0] == 503
    assert call(sim.host, sim.port, "GET", f"/api/v1/namespaces/{NS}/pods")[0] == 200
    ctl("POST", "faults/reject-creates", {"code": 422, "count": 1})
    assert (
        call(sim.host, sim.port, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("q"))[0] == 422
    )
    ctl("POST", "kubelet/pause")
    assert ctl("GET", "state")["kubeletPaused"] is True
    ctl("POST", "kubelet/resume")
    node = ctl("GET", "nodes")[0]["name"]
    ctl("POST", f"nodes/{node}/lose")
    assert [n["ready"] for n in ctl("GET", "nodes") if n["name"] == node] == [False]
    before = ctl("GET", "state")["now"]
    ctl("POST", "advance", {"seconds": 2.5})
    assert ctl("GET", "state")["now"] == pytest.approx(before + 2.5)
    reqs = ctl("GET", "requests")
    assert [r["status"] for r in reqs] == [201, 503, 200, 422]
    assert ctl("GET", "requests/counts") == {"create": 2, "list": 2}
    code, err = call(sim.host, sim.port, "POST", "/_kubesim/no-such-route", {})
    assert code == 404
    assert err["kind"] == "Status"
    code, err = call(sim.host, sim.port, "POST", f"/_kubesim/pods/{NS}/missing/fail", {})
    assert code == 404


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "execpods.kubesim.cli",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            "--nodes",
            "2",
            "--node-capacity",
            "5",
            "--start-latency",
            "0.1",
            "0.05",
            "--seed",
            "4",
            "--deterministic",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert proc.stdout.readline().strip() == str(kubeconfig)
        assert url in kubeconfig.read_text()
        port = int(url.rsplit(":", 1)[1])
        code, version = call("127.0.0.1", port, "GET", "/version")
        assert (code, version["major"]) == (200, "1")
        code, state = call("127.0.0.1", port, "GET", "/_kubesim/state")
        assert [n["capacity"] for n in state["nodes"]] == [5, 5]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_benchmark_runs_at_a_small_size(capsys: pytest.CaptureFixture[str]) -> None:
    from execpods.kubesim import bench

    assert bench.main(["--pods", "60", "--requests", "30", "--watchers", "3", "--json"]) == 0
    out = capsys.readouterr().out
    figures = orjson.loads(out[out.index("{") :])
    assert figures["raw_create"] > 0
    assert figures["fanout_events_per_s"] > 0
    assert "every watcher saw every pod after" in out
