"""A real spark-defaults.conf loads: Spark's file format, and the judgement of every key in it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from execpods.core import SettingsError
from execpods.sidecar.cli import build_parser, load_settings, main
from execpods.sidecar.config.properties import (
    OTHER_SPARK_KEYS,
    OWNED_NAMESPACES,
    parse_properties,
    read_properties_file,
)
from execpods.sidecar.config.settings import Settings, all_families, all_specs, review_properties
from execpods.sidecar.config.sparkkeys import listed_keys

from tests.generators import assert_not_stale

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "examples" / "spark-defaults.conf"
REVIEW_LOGGER = "execpods.sidecar.config.properties"


def test_the_sample_spark_defaults_conf_loads_and_every_setting_in_it_is_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    properties = read_properties_file(SAMPLE)
    settings = Settings.from_properties({**properties, "spark.app.id": "nightly-etl"})
    k8s, core = settings.kubernetes, settings.core
    assert k8s.namespace == "spark-jobs"
    assert k8s.image == "apache/spark:4.0.1"
    assert k8s.pod_name_prefix == "nightly-etl"
    assert k8s.driver_pod_name == "nightly-etl-driver"
    assert (k8s.executor_cores, k8s.executor_memory_mib, k8s.memory_overhead) == (2, 4096, 1024)
    assert (k8s.request_cores, k8s.limit_cores) == ("1500m", "2")
    assert dict(k8s.executor_env) == {"TZ": "UTC"}
    assert dict(k8s.executor_labels) == {"team": "data-platform"}
    assert dict(k8s.executor_annotations) == {"owner": "{{APP_ID}}-exec-{{EXECUTOR_ID}}"}
    assert k8s.node_selectors == {"pool": "spark"}
    assert k8s.executor_scheduler == "default-scheduler"
    assert (k8s.image_pull_policy, k8s.image_pull_secrets) == (
        "Always",
        ("registry-a", "registry-b"),
    )
    assert k8s.service_account == "spark"  # the driver's, as the executors have none of their own
    assert dict(k8s.secrets) == {"etl-credentials": "/etc/etl"}
    assert dict(k8s.secret_key_refs) == {"DB_PASSWORD": "etl-credentials:password"}
    assert dict(k8s.volumes) == {
        "emptyDir.spark-local-dir-1.mount.path": "/data",
        "emptyDir.spark-local-dir-1.options.medium": "Memory",
    }
    assert core.initial_executors == 4
    assert (core.batch_size, core.batch_delay) == (10, 1.0)
    assert (core.api_polling_interval, core.event_processing_interval) == (30.0, 1.0)
    assert core.delete_on_termination
    assert (core.enable_api_watcher, core.enable_api_polling) == (True, True)
    assert core.executor_container_name == "spark-kubernetes-executor"
    assert core.check_all_containers
    assert not core.enable_polling_with_resource_version
    assert (core.missing_pod_detect_delta, core.deleted_executors_cache_timeout) == (30.0, 180.0)
    assert core.delete_grace_period == 5.0
    assert (core.max_executor_failures, core.failures_validity_interval) == (10, 3600.0)

    records = [r for r in caplog.records if r.name == REVIEW_LOGGER]
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(info) == 1, "the unused properties are listed once"
    for key in ("spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions"):
        assert key in info[0]
    assert "spark.kubernetes.executor.rollInterval (executor rolling is" in info[0]
    assert "spark.kubernetes.allocation.batch.size" not in info[0], "read keys are not listed"
    assert "spark.executor.maxNumFailures" not in info[0]
    assert warnings == [
        "Spark properties execpods does not implement yet (accepted, ignored): "
        "spark.kubernetes.hadoop.configMapName (Spark mounts this Hadoop configuration ConfigMap "
        "into executor pods; mount it through the pod template or "
        "spark.kubernetes.executor.volumes.*)"
    ]


def test_the_sample_loads_through_the_cli_with_flags_on_top() -> None:
    args = build_parser().parse_args(
        ["serve", "--properties-file", str(SAMPLE), "--app-id", "nightly", "--namespace", "x"]
    )
    settings = load_settings(args, {})
    assert settings.sidecar.app_id == "nightly"
    assert settings.kubernetes.namespace == "x"  # a flag beats the file
    assert settings.core.batch_size == 10


def test_the_sample_file_format_is_parsed_as_spark_parses_it() -> None:
    properties = read_properties_file(SAMPLE)
    assert properties["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC -Duser.timezone=UTC"
    assert properties["spark.dynamicAllocation.enabled"] == "false"  # `key: value`
    assert properties["spark.kubernetes.executor.eventProcessingInterval"] == "1s"  # key=value
    assert not any(key.startswith(("#", "!")) for key in properties)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a b", {"a": "b"}),
        ("a=b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a = b = c", {"a": "b = c"}),
        ("  a\t  b  \n", {"a": "b"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("# a b\n! c d\n\n", {}),
        ("a 1\na 2", {"a": "2"}),  # the last one wins
        ("a x\\\n   y", {"a": "xy"}),  # continuation: the next line's indentation goes
        ("a x\\\\", {"a": "x\\"}),  # an escaped backslash does not continue the line
        ("a\\=b=c", {"a=b": "c"}),  # an escaped separator belongs to the key
        ("a \\u00e9\\t", {"a": "\u00e9"}),  # \uXXXX and \t, then trimmed as Spark trims
    ],
)
def test_spark_properties_format(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_a_line_with_no_key_is_refused_naming_the_line() -> None:
    with pytest.raises(SettingsError, match=r"conf:2: no key"):
        parse_properties("a b\n=value\n", source="conf")


@pytest.mark.parametrize(
    ("key", "suggested"),
    [
        (
            "spark.kubernetes.executor.apiPolingInterval",
            "spark.kubernetes.executor.apiPollingInterval",
        ),
        ("spark.kubernetes.allocation.batch.sise", "spark.kubernetes.allocation.batch.size"),
        ("spark.kubernetes.alocation.batch.size", "spark.kubernetes.allocation.batch.size"),
        (
            "spark.kubernetes.excutor.deleteOnTermination",
            "spark.kubernetes.executor.deleteOnTermination",
        ),
        ("execpods.sidecar.lisen", "execpods.sidecar.listen"),
        (
            "sprak.kubernetes.allocation.batch.size",
            "spark.kubernetes.allocation.batch.size",
        ),
        (
            "spark.kubernetes.executor.podDeletionCosts",
            "spark.kubernetes.executor.podDeletionCost",
        ),
        (
            "spark.kubernetes.allocation.recoveryMode.enable",
            "spark.kubernetes.allocation.recoveryMode.enabled",
        ),
    ],
)
def test_an_unknown_key_in_an_owned_namespace_is_refused_with_the_nearest_key(
    key: str, suggested: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_properties({"spark.app.id": "app", key: "1"})
    assert f"{key} (did you mean {suggested}?)" in str(raised.value)


def test_a_refusal_names_every_unknown_key_and_nothing_is_read() -> None:
    judged = review_properties(
        {"execpods.nope": "1", "spark.kubernetes.executor.zzzzzzzzzzzz": "1", "spark.x": "1"}
    )
    assert [key for key, _ in judged.refused] == [
        "execpods.nope",
        "spark.kubernetes.executor.zzzzzzzzzzzz",
    ]
    message = judged.refusal()
    assert message is not None
    assert message.startswith("unknown settings: execpods.nope")
    assert judged.not_used == ("spark.x",)


def test_suggestions_come_from_the_namespace_of_the_misspelled_key() -> None:
    """A typo under spark.kubernetes.executor.* is never told it meant another namespace's key
    (spark.kubernetes.allocation.batch.size is closer, but of another namespace)."""
    judged = review_properties(
        {"spark.kubernetes.executor.batch.size": "1", "execpods.allocation.batchsize": "1"}
    )
    assert dict(judged.refused) == {
        "execpods.allocation.batchsize": "execpods.allocation.batch.concurrency",
        "spark.kubernetes.executor.batch.size": "spark.kubernetes.executor.pvc.resizeFactor",
    }


def test_a_key_outside_spark_is_ignored_with_a_warning_as_spark_submit_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    settings = Settings.from_properties({"spark.app.id": "app", "sprak.executor.memory": "8g"})
    assert settings.kubernetes.executor_memory_mib == 1024
    messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == REVIEW_LOGGER]
    assert messages == [(logging.WARNING, "Ignoring non-Spark properties: sprak.executor.memory")]


def test_other_spark_properties_are_accepted_and_listed_once_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    settings = Settings.from_properties(
        {"spark.app.id": "app", "spark.driver.memory": "8g", "spark.kubernetes.nope": "true"}
    )
    assert settings.sidecar.app_id == "app"
    messages = [r.getMessage() for r in caplog.records if r.name == REVIEW_LOGGER]
    assert messages == [
        "Spark properties that do not apply to the sidecar (accepted, ignored): "
        f"spark.driver.memory, spark.kubernetes.nope ({OTHER_SPARK_KEYS})"
    ]


def test_nothing_is_logged_when_every_key_is_read(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=REVIEW_LOGGER)
    Settings.from_properties({"spark.app.id": "app", "spark.executorEnv.A": "b"})
    assert [r for r in caplog.records if r.name == REVIEW_LOGGER] == []


def test_every_listed_spark_key_is_accepted_and_none_is_refused() -> None:
    listed = [key for key in listed_keys() if not key.endswith(".")]
    listed += [f"{key}x" for key in listed_keys() if key.endswith(".")]
    judged = review_properties(dict.fromkeys(listed, "1"))
    assert judged.refused == ()
    assert judged.read == ()
    assert sorted(judged.not_used) == sorted(listed)


def test_every_read_key_outside_spark_is_in_an_owned_namespace() -> None:
    """execpods' own keys live under `execpods.`: a typo there can always be refused."""
    own = [key for key in all_specs() if not key.startswith("spark.")]
    assert own
    assert all(key.startswith(OWNED_NAMESPACES) for key in own)


def test_the_cli_refuses_a_typo_in_the_file_with_a_suggestion(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text(
        SAMPLE.read_text(encoding="utf-8") + "spark.kubernetes.allocation.batch.dely 2s\n",
        encoding="utf-8",
    )
    assert main(["serve", "--app-id", "a", "--properties-file", str(conf)], environ={}) == 2
    error = capsys.readouterr().err
    assert error.startswith("execpods-sidecar: error: unknown setting: ")
    assert "spark.kubernetes.allocation.batch.dely (did you mean " in error
    assert "spark.kubernetes.allocation.batch.delay?)" in error


def test_the_configuration_doc_lists_every_setting_as_declared() -> None:
    """docs/configuration.md's tables are generated from the specs and must not be stale."""
    assert_not_stale("gen_settings_doc.py")
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in all_specs():
        assert f"| `{key}` |" in doc
    for prefix in all_families():
        assert f"| `{prefix}NAME` |" in doc
