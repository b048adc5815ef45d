"""The public settings kit: one declaration carries key, default, parser, rule, meaning, flag."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from execpods.core import CoreSettings, SettingsError
from execpods.core.settingkit import (
    SettingsBase,
    duration_setting,
    if_set,
    nearest_key,
    parse_bool,
    parse_float,
    parse_int,
    parse_optional_str,
    positive,
    render_duration,
    render_value,
    setting,
    setting_family,
    unknown_keys,
)


def _no_spaces(value: str) -> str | None:
    return "must have no spaces" if " " in value else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Example(SettingsBase):
    size: int = setting(
        "x.size", 3, "How many.", parse=parse_int, rule=positive, flag="--size", env="X_SIZE"
    )
    delay: float = duration_setting("x.delay", "1500ms", "How long.")
    enabled: bool = setting("x.enabled", False, "Whether.", parse=parse_bool)
    name: str | None = setting(
        "x.name", None, "Who.", parse=parse_optional_str, rule=if_set(_no_spaces)
    )
    ratio: float = setting("x.ratio", 0.5, "How much.", parse=parse_float)


def test_a_spec_carries_the_default_as_a_user_writes_it_and_its_flag() -> None:
    specs = Example.specs()
    assert list(specs) == ["x.size", "x.delay", "x.enabled", "x.name", "x.ratio"]
    size = specs["x.size"]
    assert (size.default_text, size.flag, size.env, size.doc) == (
        "3",
        "--size",
        "X_SIZE",
        "How many.",
    )
    assert specs["x.delay"].default_text == "1500ms"  # as declared, not the float of seconds
    assert specs["x.enabled"].default_text == "false"
    assert specs["x.name"].default_text == ""
    assert (specs["x.delay"].flag, specs["x.delay"].env) == (None, None)


def test_values_are_parsed_validated_and_rendered_back() -> None:
    example = Example.from_properties(
        {"x.size": "7", "x.delay": "2s", "x.enabled": "true", "x.name": " ", "x.ratio": "0.25"}
    )
    assert (example.size, example.delay, example.enabled, example.name) == (7, 2.0, True, None)
    assert Example.from_properties(example.to_properties()) == example
    with pytest.raises(SettingsError, match=r"x\.size=0 is invalid: it must be positive"):
        Example.from_properties({"x.size": "0"})
    with pytest.raises(SettingsError, match=r"x\.ratio: 'half' is not a number"):
        Example.from_properties({"x.ratio": "half"})


def test_key_of_names_a_fields_property() -> None:
    assert Example.key_of("delay") == "x.delay"
    assert CoreSettings.key_of("batch_size") == "spark.kubernetes.allocation.batch.size"
    with pytest.raises(AttributeError, match="no setting field 'nope'"):
        Example.key_of("nope")


def test_render_value() -> None:
    assert [render_value(v) for v in (None, True, 0.25, 3, "a")] == ["", "true", "0.25", "3", "a"]
    assert render_duration(0.25) == "250ms"
    with pytest.raises(SettingsError, match=r"x\.name='a b' is invalid: it must have no spaces"):
        Example(name="a b")


def test_reads_and_unknown_keys() -> None:
    assert Example.reads("x.size")
    assert not Example.reads("x.sise")
    assert unknown_keys(
        {"x.size": "1", "x.sise": "1", "spark.executor.instances": "1"}, Example
    ) == [
        "spark.executor.instances",
        "x.sise",
    ]
    assert (
        unknown_keys({"x.size": "1", "spark.executor.instances": "1"}, Example, CoreSettings) == []
    )


def test_nearest_key_suggests_only_a_close_one() -> None:
    known = list(CoreSettings.specs())
    assert (
        nearest_key("spark.kubernetes.allocation.batch.sise", known)
        == "spark.kubernetes.allocation.batch.size"
    )
    assert nearest_key("something.else.entirely", known) is None


def test_core_settings_declare_their_flag_with_the_kit() -> None:
    spec = CoreSettings.specs()["spark.executor.instances"]
    assert (spec.flag, spec.env, spec.default_text) == (
        "--initial-executors",
        "EXECPODS_INITIAL_EXECUTORS",
        "",  # unset, as Spark's: the initial target then follows Spark's rule
    )
    assert CoreSettings.specs()["spark.kubernetes.allocation.batch.delay"].default_text == "1s"


@dataclass(frozen=True, slots=True, kw_only=True)
class WithFamily(SettingsBase):
    size: int = setting("x.size", 3, "How many.", parse=parse_int)
    tags: Mapping[str, str] = setting_family("x.tag.", "Tags.", name_rule=_no_spaces)


def test_a_family_reads_every_member_and_nothing_else() -> None:
    settings = WithFamily.from_properties(
        {"x.size": "4", "x.tag.a": "1", "x.tag.b.c": "2", "x.tag.": "no name", "x.tags": "x"}
    )
    assert dict(settings.tags) == {"a": "1", "b.c": "2"}
    assert WithFamily.reads("x.tag.anything")
    assert not WithFamily.reads("x.tag.")
    assert not WithFamily.reads("x.tags")
    assert list(WithFamily.families()) == ["x.tag."]
    assert WithFamily.from_properties(settings.to_properties()) == settings
    with pytest.raises(TypeError):
        settings.tags["c"] = "3"  # type: ignore[index]


def test_a_family_members_name_is_checked() -> None:
    with pytest.raises(SettingsError, match=r"x\.tag\.a b is invalid: 'a b' must have no spaces"):
        WithFamily.from_properties({"x.tag.a b": "1"})
    with pytest.raises(SettingsError, match="must have no spaces"):
        WithFamily(tags={"a b": "1"})
