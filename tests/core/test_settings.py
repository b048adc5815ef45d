"""Settings: Spark's property names, defaults, durations, and errors that name the property."""

from __future__ import annotations

import re

import pytest
from execpods.core import CoreSettings, SettingsError
from execpods.core.settingkit import parse_duration, unknown_keys


def test_defaults_are_sparks() -> None:
    settings = CoreSettings()
    assert settings.batch_size == 20
    assert settings.executor_timeout == 600.0
    assert settings.pod_creation_timeout == 600.0
    assert settings.max_pending_pods == 2**31 - 1
    assert settings.max_pending_pods_per_rp == settings.max_pending_pods
    assert settings.allocation_maximum == 2**31 - 1
    assert settings.executor_idle_timeout == 60.0
    assert settings.batch_delay == 1.0
    assert settings.api_polling_interval == 30.0
    assert settings.event_processing_interval == 1.0
    assert settings.delete_on_termination is True
    assert settings.labels.executor_id == "spark-exec-id"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("30s", 30.0), ("3min", 180.0), ("2m", 120.0), ("1h", 3600.0), ("250", 0.25)],
)
def test_spark_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_properties_are_read_by_their_spark_names() -> None:
    settings = CoreSettings.from_properties(
        {
            "spark.kubernetes.allocation.batch.size": "20",
            "spark.kubernetes.allocation.batch.delay": "500ms",
            "spark.kubernetes.executor.deleteOnTermination": "False",
            "execpods.labels.executorId": "my-exec-id",
        }
    )
    assert (settings.batch_size, settings.batch_delay) == (20, 0.5)
    assert settings.delete_on_termination is False
    assert settings.labels.executor_id == "my-exec-id"
    assert CoreSettings.from_properties(settings.to_properties()) == settings


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "spark.kubernetes.allocation.batch.size",
            "0",
            "batch.size=0 is invalid: it must be positive",
        ),
        ("spark.kubernetes.allocation.batch.size", "five", "batch.size: 'five' is not an integer"),
        ("spark.kubernetes.allocation.batch.delay", "-1s", "batch.delay: '-1s' is not a duration"),
        ("spark.kubernetes.allocation.batch.delay", "0s", "batch.delay=0.0 is invalid"),
        ("spark.kubernetes.executor.deleteOnTermination", "yes", "'yes' is not a boolean"),
        ("execpods.labels.appId", " ", "appId=' ' is invalid: it must be a label key"),
        ("execpods.labels.executorId", "Bad_Prefix/id", "it must be a label key"),
        ("execpods.labels.executorRole", "exec utor", "it must be a label value"),
        ("execpods.labels.executorRole", "x" * 64, "it must be a label value"),
    ],
)
def test_invalid_values_name_the_property_and_the_rule(key: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        CoreSettings.from_properties({key: value})


def test_prefixed_label_keys_are_accepted() -> None:
    settings = CoreSettings.from_properties({"execpods.labels.executorId": "example.com/exec-id"})
    assert settings.labels.executor_id == "example.com/exec-id"


def test_constructing_in_code_is_validated_too() -> None:
    with pytest.raises(SettingsError, match=r"spark\.executor\.instances=-1"):
        CoreSettings(executor_instances=-1)


def test_unset_optional_settings_are_left_out_of_properties() -> None:
    from dataclasses import dataclass

    from execpods.core.settings import SettingsBase, parse_str, setting

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Optional(SettingsBase):
        name: str | None = setting("x.name", None, "optional", parse=parse_str)

    assert Optional().to_properties() == {}
    assert Optional(name="a").to_properties() == {"x.name": "a"}


def test_unknown_keys_are_found() -> None:
    properties = {
        "spark.kubernetes.allocation.batch.size": "3",
        "spark.kubernetes.alocation.typo": "1",
    }
    assert unknown_keys(properties, CoreSettings) == ["spark.kubernetes.alocation.typo"]
