"""Flags, environment variables, properties files: bad ones exit 2 naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings, main

BASE = ["serve", "--app-id", "app", "--api-url", "http://127.0.0.1:1"]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str]) -> str:
    assert main(argv, environ=env) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        ([*BASE, "--conf", "spark.kubernetes.alocation.batch.size=3"], ["alocation"]),
        ([*BASE, "--conf", "spark.kubernetes.allocation.batch.size=0"], ["batch.size", "positive"]),
        ([*BASE, "--conf", "novalue"], ["--conf", "novalue"]),
        ([*BASE, "--listen", "localhost"], ["execpods.sidecar.listen", "--listen"]),
        ([*BASE, "--executor-memory", "lots"], ["spark.executor.memory", "lots"]),
        ([*BASE, "--initial-executors", "-1"], ["spark.executor.instances", "--initial-executors"]),
        (["serve", "--api-url", "http://127.0.0.1:1"], ["spark.app.id", "--app-id"]),
        (
            ["serve", "--app-id", "my app", "--api-url", "http://127.0.0.1:1"],
            ["spark.app.id='my app'", "label value"],
        ),
        (["serve", "--app-id", "a" * 64, "--api-url", "http://127.0.0.1:1"], ["up to 63"]),
        ([*BASE, "--properties-file", "/nonexistent/x.conf"], ["--properties-file"]),
        ([*BASE, "--conf", "spark.kubernetes.executor.deleteOnTermination=maybe"], ["maybe"]),
    ],
)
def test_bad_settings_exit_2_naming_them(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: list[str]
) -> None:
    message = _error(capsys, argv, {})
    assert message.startswith("execpods-sidecar: error: ")
    for name in names:
        assert name in message


def test_unknown_keys_in_a_properties_file_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "sidecar.conf"
    conf.write_text("# comment\nspark.app.id app\nspark.kubernetes.nope true\n", encoding="utf-8")
    assert "spark.kubernetes.nope" in _error(capsys, ["serve", "--properties-file", str(conf)], {})


def test_precedence_file_then_environment_then_conf_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "sidecar.conf"
    conf.write_text(
        "spark.app.id=from-file\n"
        "spark.kubernetes.namespace from-file\n"
        "spark.kubernetes.allocation.batch.size = 7\n"
        "spark.executorEnv.FOO=bar\n"
        "execpods.kubernetes.apiUrl http://127.0.0.1:8\n",
        encoding="utf-8",
    )
    env = {
        "EXECPODS_APP_ID": "from-env",
        "EXECPODS_NAMESPACE": "env-ns",
        "EXECPODS_LISTEN": "unix:/tmp/execpods.sock",
        "EXECPODS_API_URL": "http://127.0.0.1:9",
    }
    args = build_parser().parse_args(
        [
            "serve",
            "--properties-file",
            str(conf),
            "--conf",
            "spark.kubernetes.namespace=conf-ns",
            "--app-id",
            "from-flag",
            "--initial-executors",
            "4",
        ]
    )
    settings = load_settings(args, env)
    assert settings.sidecar.app_id == "from-flag"
    assert settings.kubernetes.namespace == "conf-ns"
    assert settings.sidecar.listen == "unix:/tmp/execpods.sock"
    assert settings.kubernetes.api_url == "http://127.0.0.1:9"  # the environment beats the file
    assert settings.core.batch_size == 7
    assert settings.core.initial_executors == 4
    assert dict(settings.kubernetes.executor_env) == {"FOO": "bar"}


def test_settings_lists_every_property(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings"], environ={}) == 0
    out = capsys.readouterr().out
    for key in (
        "spark.app.id",
        "spark.kubernetes.allocation.batch.size",
        "spark.kubernetes.namespace",
    ):
        assert key in out


def test_a_missing_driver_pod_fails_start_up_naming_the_setting(
    capsys: pytest.CaptureFixture[str], sim: KubeSim
) -> None:
    argv = ["serve", "--app-id", "app", "--api-url", sim.url, "--driver-pod-name", "nosuch"]
    assert main([*argv, "--image", "spark:test"], environ={}) == 1
    assert "spark.kubernetes.driver.pod.name" in capsys.readouterr().err


def test_serving_without_an_executor_image_is_refused_naming_the_setting(
    capsys: pytest.CaptureFixture[str], sim: KubeSim
) -> None:
    assert main(["serve", "--app-id", "app", "--api-url", sim.url], environ={}) == 2
    error = capsys.readouterr().err
    assert "spark.kubernetes.executor.container.image is not set" in error
    assert "--image" in error
    assert sim.pods() == [], "nothing was created"


def test_the_properties_file_may_come_from_the_environment(tmp_path: Path) -> None:
    conf = tmp_path / "sidecar.conf"
    conf.write_text("spark.app.id from-env-file\n", encoding="utf-8")
    args = build_parser().parse_args(["serve"])
    settings = load_settings(args, {"EXECPODS_PROPERTIES_FILE": str(conf)})
    assert settings.sidecar.app_id == "from-env-file"
