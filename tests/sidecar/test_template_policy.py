"""The sidecar as a privilege boundary: the probe's own inputs, each refused before any pod exists.

The probe sent these templates in RequestTotal and all reached the API; now each is refused under
the default policy (Pod Security Standards baseline, the sidecar's namespace and service account),
with INVALID_ARGUMENT naming the field. The YAML alias bomb is refused by the parser, and the
listener and token checks refuse a wildcard plaintext port and a 1-character token.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from execpods.core import SettingsError
from execpods.devtools.simulated import simulator_properties
from execpods.k8s import parse_pod_template
from execpods.sidecar.config.settings import Settings
from execpods.sidecar.guard.templatepolicy import (
    PolicyRefusal,
    TemplatePolicy,
    TemplatePolicyLevel,
)
from execpods.v1 import allocator_pb2 as pb
from execpods.v1 import allocator_pb2_grpc as pb_grpc

from tests.sidecar.conftest import SidecarFactory, app_pods, creates


def _pod(spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    container = {"name": "executor", "image": "apache/spark:4.3.0"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container], **spec},
    }


def _with_container(**fields: Any) -> dict[str, Any]:
    return _pod({"containers": [{"name": "executor", "image": "x", **fields}]})


# The probe's templates, and the field each refusal must name.
PROBE = {
    "privileged": (
        _with_container(securityContext={"privileged": True}),
        "spec.containers[0].securityContext.privileged",
    ),
    "hostPath /": (
        _pod({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        "spec.volumes[0].hostPath",
    ),
    "hostNetwork": (_pod({"hostNetwork": True}), "spec.hostNetwork"),
    "hostPID": (_pod({"hostPID": True}), "spec.hostPID"),
    "hostIPC": (_pod({"hostIPC": True}), "spec.hostIPC"),
    "another service account": (
        _pod({"serviceAccountName": "cluster-admin-sa"}),
        "spec.serviceAccountName",
    ),
    "another namespace": (_pod({}, namespace="kube-system"), "metadata.namespace"),
    "added capability": (
        _with_container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "spec.containers[0].securityContext.capabilities.add[0]",
    ),
    "privileged init container": (
        _pod({"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]}),
        "spec.initContainers[0].securityContext.privileged",
    ),
    "host port": (
        _with_container(ports=[{"containerPort": 80, "hostPort": 80}]),
        "spec.containers[0].ports[0].hostPort",
    ),
}

ALIAS_BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)
"""Nested aliases: a few hundred bytes that expand to 9**9 strings."""

BASELINE = TemplatePolicy(namespace="spark", service_account="spark-executor")


@pytest.mark.parametrize("name", sorted(PROBE))
def test_the_probe_templates_are_refused_under_the_default_policy_naming_the_field(
    name: str,
) -> None:
    template, field = PROBE[name]
    with pytest.raises(PolicyRefusal) as refused:
        BASELINE.check(template)
    assert str(refused.value).startswith(field), refused.value
    assert "execpods.sidecar.templatePolicy=baseline" in str(refused.value)


def test_a_spark_executor_pod_passes_baseline_and_none_lets_anything_through() -> None:
    spark_like = _pod(
        {
            "serviceAccountName": "spark-executor",
            "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}],
            "securityContext": {"fsGroup": 185},
        },
        namespace="spark",
        labels={"spark-app-selector": "app", "spark-role": "executor"},
    )
    BASELINE.check(spark_like)
    BASELINE.check(_pod({"serviceAccountName": ""}))  # empty: the sidecar's own applies
    anything = TemplatePolicy(level=TemplatePolicyLevel.NONE)
    for template, _ in PROBE.values():
        anything.check(template)


def test_restricted_wants_non_root_and_dropped_capabilities_and_refuse_takes_no_template() -> None:
    restricted = TemplatePolicy(level=TemplatePolicyLevel.RESTRICTED)
    with pytest.raises(PolicyRefusal, match=r"allowPrivilegeEscalation must be false"):
        restricted.check(_pod({}))
    hardened = _with_container(
        securityContext={
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    )
    hardened["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    restricted.check(hardened)
    hardened["spec"]["volumes"] = [{"name": "nfs", "nfs": {"server": "x", "path": "/"}}]
    with pytest.raises(PolicyRefusal, match=r"spec.volumes\[0\] of type \['nfs'\]"):
        restricted.check(hardened)
    with pytest.raises(PolicyRefusal, match="templatePolicy=refuse"):
        TemplatePolicy(level=TemplatePolicyLevel.REFUSE).check(_pod({}))


def test_a_yaml_alias_bomb_is_refused_at_once_and_an_oversized_template_too() -> None:
    assert len(ALIAS_BOMB) < 600
    started = time.monotonic()
    with pytest.raises(SettingsError, match="YAML aliases"):
        parse_pod_template(ALIAS_BOMB, what="resource profile 1")
    assert time.monotonic() - started < 1.0  # the probe's took ~3 s and ~70 MiB per attempt
    huge = json.dumps(_pod({"nodeSelector": {f"k{i}": "v" * 100 for i in range(3000)}}))
    with pytest.raises(SettingsError, match="more than the 262144 allowed"):
        parse_pod_template(huge, what="resource profile 1")


def _request_with(stub: Any, template: str) -> tuple[grpc.StatusCode, str]:
    request = pb.RequestTotalRequest(
        total=0,
        profile_totals={1: 2},
        profiles=[pb.ResourceProfile(id=1, cores=1, pod_template=template)],
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.RequestTotal(request, timeout=10)
    return caught.value.code(), caught.value.details() or ""


def test_over_grpc_each_probe_template_is_invalid_argument_and_creates_nothing(
    sim: Any, make_sidecar: SidecarFactory
) -> None:
    sidecar = make_sidecar("policy")
    with grpc.insecure_channel(sidecar.address) as channel:
        stub = pb_grpc.ExecutorAllocatorStub(channel)
        for name, (template, field) in sorted(PROBE.items()):
            code, message = _request_with(stub, json.dumps(template))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, name
            assert f"profiles[id=1].pod_template is refused: {field}" in message, message
        code, message = _request_with(stub, ALIAS_BOMB)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "YAML aliases" in message
        assert 1 not in sidecar.runtime.backend.declared_profile_ids()
    assert creates(sim) == 0
    assert app_pods(sim, "policy") == []


def _settings(**conf: str) -> Settings:
    return Settings.from_properties(simulator_properties("http://127.0.0.1:1", "app", **conf))


def test_a_wildcard_plaintext_listener_does_not_start_without_the_explicit_flag(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for listen in ("0.0.0.0:50551", "[::]:0", "10.0.0.7:50551"):
        with pytest.raises(SettingsError, match=r"--insecure"):
            _settings(**{"execpods.sidecar.listen": listen})
    for listen in ("127.0.0.1:0", "localhost:0", "[::1]:0", "unix:/tmp/x.sock"):
        _settings(**{"execpods.sidecar.listen": listen})
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123", encoding="utf-8")
    token.chmod(0o400)
    _settings(
        **{"execpods.sidecar.listen": "0.0.0.0:0", "execpods.sidecar.auth.tokenFile": str(token)}
    )
    with caplog.at_level(logging.WARNING, logger="execpods.sidecar.guard.security"):
        _settings(**{"execpods.sidecar.listen": "0.0.0.0:0", "execpods.sidecar.insecure": "true"})
    assert any("anonymous" in r.getMessage() for r in caplog.records)


def test_weak_token_files_are_refused_or_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from execpods.sidecar.guard.security import SecuritySettings, read_token

    short = tmp_path / "short"
    short.write_text("x\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="has 1 characters; at least 16"):
        read_token(SecuritySettings(token_file=str(short)))
    shared = tmp_path / "shared"
    shared.write_text("0123456789abcdef-long-enough\n", encoding="utf-8")
    shared.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="execpods.sidecar.guard.security"):
        assert (
            read_token(SecuritySettings(token_file=str(shared))) == b"0123456789abcdef-long-enough"
        )
    assert any("readable by every user" in r.getMessage() for r in caplog.records)
    caplog.clear()
    shared.chmod(0o440)
    with caplog.at_level(logging.WARNING, logger="execpods.sidecar.guard.security"):
        read_token(SecuritySettings(token_file=str(shared)))
    assert not caplog.records


def test_the_cli_refuses_a_wildcard_plaintext_listener_and_serves_it_with_insecure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from execpods.sidecar.cli import build_parser, load_settings, main

    argv = ["serve", "--app-id", "app", "--image", "x", "--listen", "0.0.0.0:0"]
    assert main(argv, environ={}) == 2
    err = capsys.readouterr().err
    assert "execpods.sidecar.listen=0.0.0.0:0 is reachable beyond this host" in err
    assert "--insecure" in err
    settings = load_settings(build_parser().parse_args([*argv, "--insecure"]), {})
    assert settings.security.insecure
