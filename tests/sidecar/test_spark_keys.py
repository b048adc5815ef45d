"""Spark 4.3's own keys: read from the installed jars, every one honoured or listed with why.

Also what a platform team sees: a real Spark 4.3 spark-defaults.conf holding every key of issue 21
plus unrelated Spark keys loads; `settings --effective` prints each value and its source; the
start-up log names the not-applicable and not-implemented keys once; errors name the file and
line; the deprecated `batch.concurrency` alias still works, with a warning.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest
from execpods.core import SettingsError
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings, main
from execpods.sidecar.config.settings import (
    Settings,
    all_families,
    all_specs,
    review_properties,
    spark_key_status,
)
from execpods.sidecar.config.sparkkeys import (
    CATALOGUED_NAMESPACES,
    NOT_APPLICABLE,
    NOT_IMPLEMENTED,
    VOLUMES_PENDING,
    KeyStatus,
    listed_keys,
    parse_key_snapshot,
)

from tests.sidecar.conftest import app_pods, wait_for
from tests.sidecar.serve_process import serve

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tools" / "spark-keys.tsv"
SPARK_43_CONF = ROOT / "docs" / "examples" / "spark-4.3-defaults.conf"
REVIEW_LOGGER = "execpods.sidecar.config.properties"


def _spark_keys_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_keys", ROOT / "tools" / "spark_keys.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["spark_keys"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def jar_keys() -> dict[str, str]:
    if shutil.which("java") is None:
        pytest.skip("java is not installed (python3 tools/dev.py bootstrap installs it)")
    keys: dict[str, str] = _spark_keys_tool().read_jar_keys()
    return keys


def test_every_spark_43_key_in_the_installed_jar_is_honoured_or_listed(
    jar_keys: dict[str, str],
) -> None:
    """The key-coverage test: read from the jars, not from a list kept by hand."""
    assert "spark.kubernetes.allocation.recoveryMode.enabled" in jar_keys, "a 4.3 jar"
    catalogued = [key for key in jar_keys if key.startswith(CATALOGUED_NAMESPACES)]
    assert len(catalogued) > 150
    uncovered = [key for key in catalogued if spark_key_status(key) is None]
    assert uncovered == [], "neither honoured, nor not applicable, nor not implemented"


def test_the_snapshot_the_docs_come_from_is_the_jars(jar_keys: dict[str, str]) -> None:
    assert parse_key_snapshot(SNAPSHOT.read_text(encoding="utf-8")) == jar_keys


def test_every_listed_key_is_a_spark_43_key_and_not_also_honoured() -> None:
    spark = parse_key_snapshot(SNAPSHOT.read_text(encoding="utf-8"))
    invented = [key for key in listed_keys() if key not in spark]
    assert invented == []
    both = [key for key in listed_keys() if key in all_specs() or key in all_families()]
    assert both == [], "declared now: delete its line from execpods.sidecar.config.sparkkeys"
    assert set(NOT_APPLICABLE).isdisjoint(NOT_IMPLEMENTED)


def test_the_volumes_keys_are_accepted_and_listed_as_not_implemented_until_issue_22() -> None:
    for key in VOLUMES_PENDING:
        status = spark_key_status(key)
        assert status is not None
        assert status[0] is KeyStatus.NOT_IMPLEMENTED


def test_honoured_keys_have_sparks_default() -> None:
    """Each honoured Spark key's default is Spark's, compared as parsed values (units too)."""
    spark = parse_key_snapshot(SNAPSHOT.read_text(encoding="utf-8"))
    # Where execpods' default is Spark's effective one spelled differently (Spark resolves these
    # at run time: the namespace from the kube config, the container name from Spark's pods).
    effective_same = {
        "spark.kubernetes.namespace",
        "spark.kubernetes.executor.podTemplateContainerName",
        "spark.kubernetes.allocation.maxPendingPodsPerRp",
        "spark.kubernetes.container.image.pullSecrets",
        "spark.kubernetes.executor.decommissionLabelValue",
        "spark.executor.memoryOverheadFactor",
    }
    checked = 0
    for key, spec in all_specs().items():
        default = spark.get(key)
        if default is None or key in effective_same or default.startswith("<"):
            continue
        assert spec.parse(spec.default_text) == spec.parse(default), key
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize(
    "key",
    [
        "spark.kubernetes.executor.deletedExecutorsCacheTimeout",
        "spark.dynamicAllocation.executorIdleTimeout",
        "spark.kubernetes.dynamicAllocation.deleteGracePeriod",
        "spark.kubernetes.executor.terminationGracePeriodSeconds",
    ],
)
def test_zero_is_accepted_where_spark_accepts_it(key: str) -> None:
    settings = Settings.from_properties({"spark.app.id": "a", key: "0"})
    assert dict(settings.core.to_properties(), **settings.kubernetes.to_properties())[key] in (
        "0ms",
        "0s",
    )


def test_sparks_seconds_units_are_kept() -> None:
    """A bare number is seconds where Spark's timeConf unit is SECONDS."""
    settings = Settings.from_properties(
        {
            "spark.app.id": "a",
            "spark.kubernetes.executor.deletedExecutorsCacheTimeout": "300",
            "spark.dynamicAllocation.executorIdleTimeout": "5",
            "spark.kubernetes.allocation.driver.readinessTimeout": "3",
            "spark.kubernetes.executor.terminationGracePeriodSeconds": "45",
            "spark.kubernetes.allocation.batch.delay": "500",  # MILLISECONDS in Spark
        }
    )
    core, k8s = settings.core, settings.kubernetes
    assert core.deleted_executors_cache_timeout == 300.0
    assert core.executor_idle_timeout == 5.0
    assert k8s.driver_readiness_timeout == 3.0
    assert k8s.termination_grace_period_seconds == 45
    assert core.batch_delay == 0.5


def test_a_real_spark_43_defaults_file_loads_and_logs_each_kind_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    args = build_parser().parse_args(
        ["serve", "--app-id", "etl", "--properties-file", str(SPARK_43_CONF)]
    )
    settings = load_settings(args, {})
    core, k8s = settings.core, settings.kubernetes
    assert core.recovery_mode_enabled is True
    assert (core.decommission_label, core.decommission_label_value) == ("decommissioning", "yes")
    assert core.pod_deletion_cost == -100
    assert core.initial_executors == 3  # dynamic allocation: max(min 3, initial 2, instances 1)
    assert core.deleted_executors_cache_timeout == 0.0
    assert k8s.termination_grace_period_seconds == 60
    assert k8s.executor_privilege_escalation is False
    records = [r for r in caplog.records if r.name == REVIEW_LOGGER]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert len(warnings) == 1, "the not-implemented keys are listed once"
    assert len(info) == 1, "the not-applicable keys are listed once"
    for key in (
        "spark.kubernetes.executor.pvc.resizeInterval",
        "spark.kubernetes.executor.pvc.resizeThreshold",
        "spark.kubernetes.executor.pvc.resizeFactor",
    ):
        assert key in warnings[0]
    assert "claim resize" in warnings[0]
    assert "spark.kubernetes.executor.resizeInterval" not in warnings[0], "honoured (issue 33)"
    for key in (
        "spark.kubernetes.executor.pod.excludedFeatureSteps",
        "spark.sql.adaptive.enabled",
        "spark.driver.memory",
    ):
        assert key in info[0]
    assert "Scala feature-step classes" in info[0], "with why"


def test_settings_effective_prints_every_value_and_its_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "settings",
            "--effective",
            "--properties-file",
            str(SPARK_43_CONF),
            "--conf",
            "spark.kubernetes.allocation.batch.size=7",
        ],
        environ={"EXECPODS_IMAGE": "spark:4.3.0"},
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    for key in all_specs():
        assert any(line.startswith(f"  {key} = ") for line in lines), key
    conf = str(SPARK_43_CONF)
    text = SPARK_43_CONF.read_text(encoding="utf-8").splitlines()
    line_of = next(
        n
        for n, t in enumerate(text, 1)
        if t.startswith("spark.kubernetes.executor.podDeletionCost")
    )
    assert f"  spark.kubernetes.executor.podDeletionCost = -100  [{conf}:{line_of}]" in lines
    assert "  spark.kubernetes.allocation.batch.size = 7  [--conf]" in lines
    assert "  spark.kubernetes.executor.container.image = spark:4.3.0  [$EXECPODS_IMAGE]" in lines
    assert "  spark.kubernetes.allocation.maxPendingPods = 2147483647  [default]" in lines
    assert "  (initial target: 3 executors)" in lines
    assert "Not implemented (accepted, ignored):" in lines
    assert any(line.startswith("  spark.sql.adaptive.enabled  [") for line in lines)


def test_a_bad_value_in_a_properties_file_names_the_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text(
        "spark.driver.memory 2g\n# a comment\nspark.kubernetes.allocation.batch.size 0\n",
        encoding="utf-8",
    )
    assert main(["serve", "--app-id", "a", "--properties-file", str(conf)], environ={}) == 2
    error = capsys.readouterr().err
    assert f"{conf}:3: spark.kubernetes.allocation.batch.size=0 is invalid" in error


def test_an_unknown_key_in_a_file_is_refused_naming_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("spark.kubernetes.executor.podDeletionCosts 5\n", encoding="utf-8")
    assert main(["serve", "--app-id", "a", "--properties-file", str(conf)], environ={}) == 2
    error = capsys.readouterr().err
    assert "did you mean spark.kubernetes.executor.podDeletionCost?" in error
    assert f"spark.kubernetes.executor.podDeletionCosts at {conf}:1" in error


def test_a_malformed_line_names_the_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("spark.a 1\n=orphan\n", encoding="utf-8")
    args = build_parser().parse_args(["serve", "--app-id", "a", "--properties-file", str(conf)])
    with pytest.raises(Exception, match=rf"{conf}:2: no key"):
        load_settings(args, {})


def test_batch_concurrency_is_an_execpods_key_and_the_spark_name_a_deprecated_alias(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=REVIEW_LOGGER):
        old = Settings.from_properties(
            {"spark.app.id": "a", "spark.kubernetes.allocation.batch.concurrency": "3"}
        )
    assert old.core.batch_concurrency == 3
    assert "spark.kubernetes.allocation.batch.concurrency is deprecated" in caplog.text
    assert "use execpods.allocation.batch.concurrency" in caplog.text
    both = Settings.from_properties(
        {
            "spark.app.id": "a",
            "spark.kubernetes.allocation.batch.concurrency": "3",
            "execpods.allocation.batch.concurrency": "5",
        }
    )
    assert both.core.batch_concurrency == 5, "the new name wins"
    with pytest.raises(SettingsError, match=r"batch\.concurrency=0 is invalid"):
        Settings.from_properties(
            {"spark.app.id": "a", "spark.kubernetes.allocation.batch.concurrency": "0"}
        )


def test_the_configuration_doc_shows_every_catalogued_spark_key_with_its_status() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    spark = parse_key_snapshot(SNAPSHOT.read_text(encoding="utf-8"))
    for key in spark:
        if not key.startswith(CATALOGUED_NAMESPACES):
            continue
        shown = f"`{key}NAME`" if key.endswith(".") else f"`{key}`"
        status = spark_key_status(key)
        assert status is not None
        row = next(line for line in doc.splitlines() if line.startswith(f"| {shown} |"))
        assert f"| {status[0].value} |" in row, key
    assert "**missing**" not in doc


def test_settings_effective_names_the_line_of_a_bad_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("spark.a 1\nspark.task.cpus 0\n", encoding="utf-8")
    assert main(["settings", "--effective", "--properties-file", str(conf)], environ={}) == 2
    assert f"{conf}:2: spark.task.cpus=0.0 is invalid" in capsys.readouterr().err


def test_every_key_spark_43_defines_is_accepted() -> None:
    """No key of Spark 4.3's core and Kubernetes modules (a family: one member of it) is
    refused, whatever the sidecar makes of it."""
    spark = parse_key_snapshot(SNAPSHOT.read_text(encoding="utf-8"))
    keys = [f"{key}x" if key.endswith(".") else key for key in spark]
    assert review_properties(dict.fromkeys(keys, "1")).refused == ()


def test_the_sidecar_starts_on_it_and_logs_each_kind_of_key_once(
    sim: KubeSim, tmp_path: Path
) -> None:
    """`execpods-sidecar serve --properties-file` a real process: it serves, allocates the
    dynamic-allocation floor the file asks for, and its start-up log names the keys once."""
    log = tmp_path / "stderr.log"
    with (
        log.open("w", encoding="utf-8") as stderr,
        serve(
            sim,
            "etl",
            "--properties-file",
            str(SPARK_43_CONF),
            "--conf",
            "execpods.sidecar.checkPermissions=false",
            stderr=stderr,
        ) as (process, _address),
    ):
        wait_for(lambda: len(app_pods(sim, "etl")) == 3, what="the floor of three executors")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    lines = log.read_text(encoding="utf-8").splitlines()
    not_implemented = [line for line in lines if "does not implement yet" in line]
    not_applicable = [line for line in lines if "do not apply to the sidecar" in line]
    assert len(not_implemented) == 1
    assert " WARNING " in not_implemented[0]
    assert "spark.kubernetes.executor.pvc.resizeInterval" in not_implemented[0]
    assert len(not_applicable) == 1
    assert " INFO " in not_applicable[0]
    assert "spark.sql.adaptive.enabled" in not_applicable[0]
