"""Issue 32 item 2 (R4, R6, R7): validation at the boundary covers every value's use.

Each of these inputs passed validation on `128638e` and broke the sidecar later:
- R4: a duration beyond what a wait can take killed the scheduler's threads silently (no pod
  ever, health SERVING); `api.maxQps=inf` crashed `serve` with a traceback; an application id
  that is no valid pod-name prefix was sanitized, so two applications could name their pods
  alike;
- R6: a pod template nested 90,000 deep was answered `UNAVAILABLE the sidecar is shutting down`
  (a RecursionError is a RuntimeError);
- R7: a template that parses and passes the policy, but that the Kubernetes client's model
  refuses, failed every create, spent ids and failed the application via maxNumFailures.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
import pytest
from execpods.client import AllocatorClient, ExecutorProfile
from execpods.core import SettingsError
from execpods.core.scheduling import ThreadScheduler
from execpods.devtools.simulated import simulator_properties
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import main
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.wiring import connect

from tests.sidecar.conftest import SidecarFactory, creates, running_ids, wait_for

BASE = ["serve", "--app-id", "app", "--api-url", "http://127.0.0.1:1", "--image", "spark:x"]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("spark.kubernetes.executor.eventProcessingInterval", "100000000000d", "longest duration"),
        ("spark.kubernetes.allocation.batch.delay", "9" * 400, "longest duration"),
        ("spark.kubernetes.executor.apiPollingInterval", "2147483648s", "longest duration"),
        ("execpods.kubernetes.api.maxQps", "inf", "finite"),
        ("execpods.kubernetes.api.minQps", "nan", "finite"),
        ("execpods.kubernetes.api.maxQps", "1e308", "at most 1,000,000"),
        ("execpods.kubernetes.api.qps", "9223372036854775808", "64 bits"),
        ("execpods.kubernetes.api.burst", "10000000", "at most 1,000,000"),
    ],
)
def test_values_beyond_what_the_code_can_run_are_refused_naming_the_key(
    key: str, value: str, says: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_properties({"spark.app.id": "app", key: value})
    assert key in str(caught.value)
    assert says in str(caught.value)


def test_the_longest_duration_still_runs() -> None:
    settings = Settings.from_properties(
        {"spark.app.id": "app", "spark.kubernetes.executor.apiPollingInterval": "2147483647s"}
    )
    assert settings.core.api_polling_interval == 2147483647.0


def test_serve_refuses_an_infinite_rate_with_a_message_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--conf", "execpods.kubernetes.api.maxQps=inf"], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("execpods-sidecar: error: execpods.kubernetes.api.maxQps")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("app_id", "says"),
    [
        ("My_App", "cannot prefix executor pod names"),
        ("my.app", "cannot prefix executor pod names"),
        ("a" * 48, "too long"),
    ],
)
def test_an_app_id_that_cannot_prefix_pod_names_needs_a_prefix(app_id: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_properties({"spark.app.id": app_id})
    assert f"spark.app.id={app_id!r}" in str(caught.value)
    assert says in str(caught.value)
    assert "spark.kubernetes.executor.podNamePrefix" in str(caught.value)
    named = Settings.from_properties(
        {"spark.app.id": app_id, "spark.kubernetes.executor.podNamePrefix": "my-app"}
    )
    assert named.sidecar.app_id == app_id


def test_a_task_due_beyond_what_a_wait_can_take_does_not_end_the_worker() -> None:
    scheduler = ThreadScheduler(workers=1, name="execpods-boundary")
    ran = threading.Event()
    try:
        scheduler.schedule(threading.TIMEOUT_MAX * 4, lambda: None)
        scheduler.submit(ran.set)  # the worker is waiting for the far task: it must wake
        assert ran.wait(5), "the worker died waiting"
        ran.clear()
        scheduler.submit(ran.set)
        assert ran.wait(5)
    finally:
        scheduler.shutdown()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def profile_with(template: object) -> ExecutorProfile:
    text = template if isinstance(template, str) else json.dumps(template)
    return ExecutorProfile(id=1, pod_template=text)


def test_a_template_nested_too_deep_is_invalid_argument_and_the_sidecar_goes_on(
    make_sidecar: SidecarFactory, sim: KubeSim
) -> None:
    sidecar = make_sidecar("deep")
    with AllocatorClient(sidecar.address) as client:
        for template in (nested(90_000), '{"spec":' * 20_000 + "{}" + "}" * 20_000):
            with pytest.raises(grpc.RpcError) as caught:
                client.request_total(0, profiles=[profile_with(template)], profile_totals={1: 1})
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "nest" in (caught.value.details() or "")
        assert client.request_total(2).total == 2
        wait_for(lambda: len(running_ids(sim, "deep")) == 2, what="two running")


SYS_ADMIN_AS_A_STRING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "spec": {
        "containers": [
            {
                "name": "spark-kubernetes-executor",
                "securityContext": {"capabilities": {"add": "SYS_ADMIN"}},
            }
        ]
    },
}


def test_a_template_the_client_would_refuse_is_refused_where_it_is_declared(
    make_sidecar: SidecarFactory, sim: KubeSim
) -> None:
    sidecar = make_sidecar("model", conf={"spark.executor.maxNumFailures": "3"})
    with AllocatorClient(sidecar.address) as client:
        with pytest.raises(grpc.RpcError) as caught:
            client.request_total(
                0, profiles=[profile_with(SYS_ADMIN_AS_A_STRING)], profile_totals={1: 2}
            )
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = caught.value.details() or ""
        assert "spec.containers.0.securityContext.capabilities.add" in details
        assert "valid list" in details
        assert creates(sim) == 0
        assert 1 not in sidecar.runtime.backend.declared_profile_ids()
        # The application is alive: the default profile allocates as before.
        client.request_total(2)
        wait_for(lambda: len(running_ids(sim, "model")) == 2, what="two running")
    assert sidecar.runtime.backend.failed_executors == 0


def test_an_operators_template_the_client_would_refuse_stops_the_start(
    sim: KubeSim, tmp_path: Path
) -> None:
    container = {"name": "spark-kubernetes-executor", "ports": [{"containerPort": "http"}]}
    template = tmp_path / "template.json"
    template.write_text(json.dumps({"spec": {"containers": [container]}}), encoding="utf-8")
    props = simulator_properties(
        sim.url, "operator", **{"spark.kubernetes.executor.podTemplateFile": str(template)}
    )
    with pytest.raises(SettingsError) as caught:
        connect(Settings.from_properties(props))
    assert "spec.containers.0.ports.0.containerPort" in str(caught.value)
    assert sim.pods() == []
