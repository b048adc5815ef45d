"""Flags, environment variables, properties files: bad ones exit 2 naming what is wrong."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings, main
from execpods.sidecar.config.settings import flagged_specs

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
        (  # a failure rule that does not parse: its property, the rule and what is wrong
            [*BASE, "--conf", "execpods.executor.failureRules.2=FailJob onExitCodes In 127"],
            ["execpods.executor.failureRules.2='FailJob onExitCodes In 127'", "FailApplication"],
        ),
        (
            [*BASE, "--conf", "execpods.executor.failureRules.x=Ignore onPodConditions A"],
            ["execpods.executor.failureRules.x", "rule number"],
        ),
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
    """Inside the namespaces the sidecar owns; other spark.* keys are accepted (see
    test_properties.py, which also checks the suggestions)."""
    conf = tmp_path / "sidecar.conf"
    conf.write_text(
        "# comment\nspark.app.id app\nspark.kubernetes.executor.nope true\nexecpods.nope 1\n",
        encoding="utf-8",
    )
    message = _error(capsys, ["serve", "--properties-file", str(conf)], {})
    assert "unknown settings: execpods.nope" in message
    assert "spark.kubernetes.executor.nope" in message


@pytest.fixture
def root_level() -> Iterator[None]:
    """`main` sets the root logger's level; put it back for the other tests."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.mark.usefixtures("root_level")
@pytest.mark.parametrize(
    ("argv", "env", "level"),
    [
        ([], {}, logging.INFO),  # as Kubernetes controllers: decisions are logged by default
        (["--log-level", "debug"], {}, logging.DEBUG),
        ([], {"EXECPODS_LOG_LEVEL": "warning"}, logging.WARNING),
        (["--log-level", "error"], {"EXECPODS_LOG_LEVEL": "debug"}, logging.ERROR),
    ],
)
def test_the_log_level_is_info_unless_told(
    argv: list[str], env: dict[str, str], level: int
) -> None:
    logging.getLogger().setLevel(logging.CRITICAL)
    assert main([*argv, "settings"], environ=env) == 0
    assert logging.getLogger().level == level


@pytest.mark.usefixtures("root_level")
def test_a_bad_log_level_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--log-level 'LOUD'" in _error(capsys, ["--log-level", "loud", "settings"], {})


def flags_help(parser: argparse.ArgumentParser, flag: str) -> str:
    return next(a.help or "" for a in parser._actions if flag in a.option_strings)


def test_every_flag_comes_from_a_setting_spec() -> None:
    """Flag, help, variable and default are the spec's: no property key written twice."""
    commands = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    serve = commands.choices["serve"]
    flags = {
        option: action
        for action in serve._actions
        for option in action.option_strings
        if option.startswith("--")
        and option
        not in (
            "--help",
            "--conf",
            "--properties-file",
            "--log-level",
            "--log-format",
            "--insecure",
        )
    }
    # --insecure is a switch (no value) for execpods.sidecar.insecure, a setting spec's key.
    assert "execpods.sidecar.insecure" in flags_help(serve, "--insecure")
    specs = {spec.flag: spec for spec in flagged_specs()}
    assert set(flags) == set(specs)
    assert {"--app-id", "--image", "--listen", "--initial-executors"} <= set(flags)
    for flag, spec in specs.items():
        help_text = flags[flag].help or ""
        assert spec.key in help_text
        assert spec.doc in help_text.replace("%%", "%")
        if spec.env:
            assert spec.env in help_text
        if spec.default_text:
            assert f"default {spec.default_text}" in help_text


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
        "spark.executorEnv.NAME",
        "spark.kubernetes.executor.label.NAME",
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
