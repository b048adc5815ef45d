"""The control endpoint and the CLI: what a driver in another language uses to script scenarios."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from execpods.kubesim import KubeSim
from execpods.kubesim.cli import main as cli_main
from kubernetes import config

from tests.kubesim.conftest import NS, core_api, pod_body
from tests.kubesim.support import http_json, names, raw


def test_control_endpoint_scripts_a_scenario(sim: KubeSim) -> None:
    def ctl(method: str, route: str, body: Any = None) -> Any:
        code, data = raw(sim, method, "/_kubesim/" + route, body)
        assert code == 200, data
        return data

    code, _ = raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("p"))
    assert code == 201
    assert ctl("POST", "run-until-idle")["ran"] >= 2
    assert ctl("GET", "state")["pods"] == 1
    pod = ctl("POST", f"pods/{NS}/p/oom")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    ctl("POST", "faults/errors", {"code": 503, "count": 1})
    assert raw(sim, "GET", f"/api/v1/namespaces/{NS}/pods")[0] == 503
    assert raw(sim, "GET", f"/api/v1/namespaces/{NS}/pods")[0] == 200
    ctl("POST", "faults/reject-creates", {"code": 422, "count": 1})
    assert raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", pod_body("q"))[0] == 422
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
    code, err = raw(sim, "POST", "/_kubesim/no-such-route", {})
    assert code == 404
    assert err["kind"] == "Status"
    code, err = raw(sim, "POST", f"/_kubesim/pods/{NS}/missing/fail", {})
    assert code == 404


@contextlib.contextmanager
def cli(kubeconfig: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``kubesim`` as its own process; yield it and the URL it printed; kill it if the
    test did not stop it."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "execpods.kubesim.cli",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            *flags,
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
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    flags = ["--nodes", "2", "--node-capacity", "5", "--start-latency", "0.1", "0.05"]
    with cli(kubeconfig, *flags, "--seed", "4", "--deterministic") as (proc, url):
        assert url in kubeconfig.read_text()
        port = int(url.rsplit(":", 1)[1])
        code, version = http_json("127.0.0.1", port, "GET", "/version")
        assert (code, version["major"]) == (200, "1")
        code, state = http_json("127.0.0.1", port, "GET", "/_kubesim/state")
        assert [n["capacity"] for n in state["nodes"]] == [5, 5]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_cli_refuses_a_third_start_latency_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli_main(["--start-latency", "1", "0.5", "2"])
    assert exc.value.code == 2
    assert "at most one JITTER" in capsys.readouterr().err


# A driver in "another language": a separate process that knows only HTTP and JSON (here the
# standard library's urllib), scripting a scenario against a standalone simulator.
DRIVER = r"""
import json, sys, urllib.request

base = sys.argv[1]

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())

def pods():
    items = call("GET", "/api/v1/namespaces/default/pods")["items"]
    return {p["metadata"]["name"]: p for p in items}

def phases():
    return {name: p["status"]["phase"] for name, p in pods().items()}

out = {}
for name, image in (("a", "busybox"), ("b", "broken:1"), ("c", "busybox")):
    call("POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": image}]},
    })
call("POST", "/_kubesim/advance", {"seconds": 0.5})
out["bound_before_delay"] = sorted(n for n, p in pods().items() if p["spec"].get("nodeName"))
call("POST", "/_kubesim/advance", {"seconds": 1})
out["bound_after_delay"] = sorted(n for n, p in pods().items() if p["spec"].get("nodeName"))
call("POST", "/_kubesim/advance", {"seconds": 1.4})  # now 2.9: bound at 1.0, start takes 2
out["phases_before_start"] = phases()
call("POST", "/_kubesim/advance", {"seconds": 0.2})
out["phases_after_start"] = phases()
status = pods()
out["b_waiting"] = status["b"]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
out["c_condition"] = [c for c in status["c"]["status"]["conditions"]
                      if c["type"] == "PodScheduled"][0]
oom = call("POST", "/_kubesim/pods/default/a/oom")
out["a_exit"] = oom["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
out["counts"] = call("GET", "/_kubesim/requests/counts")
print(json.dumps(out))
"""


def test_cli_flags_and_a_driver_in_another_process(tmp_path: Path) -> None:
    """The standalone CLI applies its flags and a foreign process scripts it end to end."""
    kubeconfig = tmp_path / "out" / "kubesim.yaml"
    flags = ["--nodes", "2", "--node-capacity", "1", "--schedule-delay", "1"]
    flags += ["--start-latency", "2", "0", "--image-pull-failure", "broken:1", "--seed", "5"]
    with cli(kubeconfig, *flags, "--deterministic") as (proc, url):
        driver = tmp_path / "driver.py"
        driver.write_text(DRIVER)
        ran = subprocess.run(
            [sys.executable, "-I", str(driver), url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        out = orjson.loads(ran.stdout)
        assert out["bound_before_delay"] == []  # --schedule-delay 1
        assert out["bound_after_delay"] == ["a", "b"]  # --node-capacity 1 on --nodes 2
        assert out["phases_before_start"] == {"a": "Pending", "b": "Pending", "c": "Pending"}
        assert out["phases_after_start"] == {"a": "Running", "b": "Pending", "c": "Pending"}
        assert out["b_waiting"] == "ErrImagePull"  # --image-pull-failure broken:1
        assert (out["c_condition"]["status"], out["c_condition"]["reason"]) == (
            "False",
            "Unschedulable",
        )
        assert out["a_exit"] == 137
        assert out["counts"] == {"create": 3, "list": 5}
        # --kubeconfig-out is a kubeconfig the official client loads.
        loader: Any = config.new_client_from_config
        api = loader(config_file=str(kubeconfig))
        try:
            assert names(core_api(api).list_namespaced_pod(NS)) == ["a", "b", "c"]
        finally:
            api.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_benchmark_runs_at_a_small_size(capsys: pytest.CaptureFixture[str]) -> None:
    from execpods.devtools.bench import kubesim as bench

    assert bench.main(["--pods", "60", "--requests", "30", "--watchers", "3", "--json"]) == 0
    out = capsys.readouterr().out
    figures = orjson.loads(out[out.index("{") :])
    assert figures["raw_create"] > 0
    assert figures["fanout_events_per_s"] > 0
    assert "every watcher saw every pod after" in out


def test_cli_nodes_too_small_for_a_pod_leave_it_unschedulable_in_the_schedulers_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--node-cpu`/`--node-memory` give each node an allocatable, so a standalone simulator can
    show issue 30's "nodes too small" (the scheduler's Insufficient cpu); a pod that fits runs."""
    flags = ["--nodes", "1", "--node-cpu", "2", "--node-memory", "4Gi", "--deterministic"]
    with cli(tmp_path / "kc.yaml", *flags) as (proc, url):
        port = int(url.rsplit(":", 1)[1])
        path = f"/api/v1/namespaces/{NS}/pods"
        for name, cpu in (("small", "1"), ("big", "3")):
            body = pod_body(name)
            body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
            assert http_json("127.0.0.1", port, "POST", path, body)[0] == 201
        http_json("127.0.0.1", port, "POST", "/_kubesim/advance", {"seconds": 5})
        listed = http_json("127.0.0.1", port, "GET", path)[1]["items"]
        pods = {p["metadata"]["name"]: p for p in listed}
        assert pods["small"]["status"]["phase"] == "Running"
        (scheduled,) = [
            c for c in pods["big"]["status"]["conditions"] if c["type"] == "PodScheduled"
        ]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert scheduled["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    with pytest.raises(SystemExit):
        cli_main(["--node-memory", "lots"])
    assert "lots" in capsys.readouterr().err
