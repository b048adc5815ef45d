"""The declarative settings kit: typed settings keyed by Spark's property names (public API).

A settings class is a frozen dataclass deriving from `SettingsBase` whose fields are declared with
`setting(key, default, doc, parse=..., rule=...)` (or `duration_setting`). That one declaration is
everything known about a property: its key, default, parser, rule, meaning, and optionally the
command-line flag and environment variable that set it. `from_properties` reads a Spark-style
mapping and validation runs on construction, so a bad value fails at start-up with a message
naming the property and the rule, never half-way through a run.

Adding a property is one `setting(...)` line in the class that reads it: the CLI's flags, the
`settings` listing, the docs check and the unknown-key checks all read the specs. `CoreSettings`,
the adapter's `KubernetesSettings` and the sidecar's `SidecarSettings` are all declared this way,
importing only this module's public names.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Self, TypeVar

from execpods.core.errors import SettingsError

T = TypeVar("T")

_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")

MAX_DURATION_S = float(2**31 - 1)
"""The longest duration any setting may hold: about 68 years, Spark's own "forever"
(`Int.MaxValue` seconds). Every wait, timer and timeout the code makes can run it, with room for
the multiples it takes of some (five batch delays); beyond it waits overflow and threads die."""
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Integers settings may hold: what a Java long (and the contract's int64 fields) can carry."""


# --- parsers: text -> value; a ValueError names what was wrong --------------------------------


def parse_duration(text: str, *, default_unit: str = "ms") -> float:
    """Seconds in a Spark-style duration ("500ms", "30s", "3min", "1h"; a bare number is ms)."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 30s, 3min or 1h")
    number, unit = match.groups()
    factor = _UNITS.get(unit or default_unit)
    if factor is None:
        raise ValueError(f"{text!r} has unknown unit {unit!r}; use one of {', '.join(_UNITS)}")
    seconds = float(number) * factor
    if not seconds <= MAX_DURATION_S:  # inf too (hundreds of digits)
        raise ValueError(
            f"{text.strip()!r} is longer than the longest duration the sidecar can wait "
            f"({MAX_DURATION_S:.0f}s, about 68 years)"
        )
    return seconds


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def parse_int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{text.strip()[:40]!r} does not fit in 64 bits")
    return value


def parse_float(text: str) -> float:
    """A finite number: `inf` and `nan` parse as floats but no rate or factor can run on them."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text.strip()!r} is not a finite number")
    return value


def parse_str(text: str) -> str:
    return text


def parse_optional_str(text: str) -> str | None:
    """A string setting where an empty value means unset."""
    return text.strip() or None


# --- rules: value -> None when valid, else what it must be ("must be positive") --------------


def positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def non_negative(value: float) -> str | None:
    return None if value >= 0 else "must not be negative"


MAX_RATE = 1_000_000
"""The highest rate (calls a second) or burst a setting may hold: far above what any API server
answers, low enough that every product the code takes of it (rate x delay x rounds) stays
finite."""


def rate(value: float) -> str | None:
    """A positive rate (or bucket size) the code can run: at most `MAX_RATE`."""
    if not value > 0:
        return "must be positive"
    return None if value <= MAX_RATE else f"must be at most {MAX_RATE:,} a second"


def any_value(_value: object) -> str | None:
    return None


def if_set(rule: Callable[[T], str | None]) -> Callable[[T | None], str | None]:
    """`rule` for an optional setting: an unset (None) value passes."""
    return lambda value: None if value is None else rule(value)


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_value(value: str) -> str | None:
    """A non-empty Kubernetes label value: the API refuses pods labelled with anything else."""
    if _LABEL_NAME.match(value):
        return None
    return "must be a label value: up to 63 letters, digits, '-', '_' or '.', alphanumeric ends"


def label_key(value: str) -> str | None:
    """A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a label name."""
    prefix, _, name = value.rpartition("/")
    if _LABEL_NAME.match(name) and (
        not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix))
    ):
        return None
    return "must be a label key: [prefix/]name, the name up to 63 letters, digits, '-', '_', '.'"


# --- the declaration --------------------------------------------------------------------------


def render_value(value: object) -> str:
    """A value as a property string: booleans lower-case, None empty, the rest as `str`."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def render_duration(seconds: float) -> str:
    """A duration held in seconds as a property string, in ms (Spark's default unit)."""
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingSpec:
    """How one property is read, checked, documented and (optionally) set from the command line.

    `default_text` is the default as a user writes it ("1s", "true", "" when unset); `flag` and
    `env` are the dedicated command-line flag and environment variable, when the property has them.
    """

    key: str
    parse: Callable[[str], Any]
    rule: Callable[[Any], str | None]
    doc: str
    default_text: str
    flag: str | None = None
    env: str | None = None
    render: Callable[[Any], str] = render_value


def setting(
    key: str,
    default: T,
    doc: str,
    *,
    parse: Callable[[str], T],
    rule: Callable[[T], str | None] = any_value,
    flag: str | None = None,
    env: str | None = None,
    default_text: str | None = None,
    render: Callable[[T], str] = render_value,
) -> T:
    """Declare a settings field: its property key, default, parser, rule, meaning, and maybe the
    flag (`--app-id`) and environment variable (`EXECPODS_APP_ID`) that set it."""
    spec = SettingSpec(
        key=key,
        parse=parse,
        rule=rule,
        doc=doc,
        default_text=render(default) if default_text is None else default_text,
        flag=flag,
        env=env,
        render=render,
    )
    return dataclasses.field(default=default, metadata={"setting": spec})


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilySpec:
    """An open-ended family of properties: `<prefix><NAME>=value` for any NAME.

    Spark has several (`spark.executorEnv.NAME`, `spark.kubernetes.executor.label.NAME`, ...); the
    field holds them as a read-only `{NAME: value}` mapping, and `name_rule` checks each NAME.
    """

    prefix: str
    doc: str
    name_rule: Callable[[str], str | None] = any_value

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"


def setting_family(
    prefix: str, doc: str, *, name_rule: Callable[[str], str | None] = any_value
) -> Mapping[str, str]:
    """Declare a field holding every `<prefix><NAME>` property as `{NAME: value}`."""
    spec = FamilySpec(prefix=prefix, doc=doc, name_rule=name_rule)
    return dataclasses.field(
        default_factory=lambda: MappingProxyType({}), metadata={"family": spec}
    )


def duration_setting(
    key: str,
    default: str,
    doc: str,
    rule: Callable[[float], str | None] = positive,
    *,
    flag: str | None = None,
    env: str | None = None,
    unit: str = "ms",
) -> float:
    """A duration field: declared with Spark's spelling ("1s"), held in seconds. `unit` is what a
    bare number means: Spark's `timeConf` unit of the property ("ms" or "s")."""
    return setting(
        key,
        parse_duration(default),
        doc,
        parse=functools.partial(parse_duration, default_unit=unit),
        rule=rule,
        flag=flag,
        env=env,
        default_text=default,
        render=render_duration,
    )


class SettingsBase:
    """Parsing and validation shared by every settings dataclass."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for spec, value in self._specs_and_values():
            problem = spec.rule(value)
            if problem is not None:
                raise SettingsError(f"{spec.key}={value!r} is invalid: it {problem}")
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            family: FamilySpec | None = f.metadata.get("family")
            if family is None:
                continue
            members = getattr(self, f.name)
            for name in members:
                problem = family.name_rule(name)
                if problem is not None:
                    raise SettingsError(f"{family.key(name)} is invalid: {name!r} {problem}")
            if not isinstance(members, MappingProxyType):  # frozen from the outside, too
                object.__setattr__(self, f.name, MappingProxyType(dict(members)))

    def _specs_and_values(self) -> list[tuple[SettingSpec, Any]]:
        return [
            (f.metadata["setting"], getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if "setting" in f.metadata
        ]

    @classmethod
    def _declared(cls, kind: str) -> list[Any]:
        """The `setting` or `family` specs of the fields, in declaration order."""
        return [
            f.metadata[kind]
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if kind in f.metadata
        ]

    @classmethod
    def specs(cls) -> dict[str, SettingSpec]:
        """Every property this class reads, by key, in declaration order."""
        return {spec.key: spec for spec in cls._declared("setting")}

    @classmethod
    def key_of(cls, field_name: str) -> str:
        """The property key of a field, for messages that name it (never written twice)."""
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name == field_name and "setting" in f.metadata:
                return str(f.metadata["setting"].key)
        raise AttributeError(f"{cls.__name__} has no setting field {field_name!r}")

    @classmethod
    def families(cls) -> dict[str, FamilySpec]:
        """Every family of properties this class reads, by prefix."""
        return {family.prefix: family for family in cls._declared("family")}

    @classmethod
    def reads(cls, key: str) -> bool:
        """Whether this class reads `key`: a declared key, or a member of a declared family."""
        return key in cls.specs() or any(
            key.startswith(prefix) and len(key) > len(prefix) for prefix in cls.families()
        )

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: Any) -> Self:
        """Read the properties this class knows (others are ignored: see `unknown_keys`)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            family: FamilySpec | None = f.metadata.get("family")
            if family is not None:
                values[f.name] = {
                    key[len(family.prefix) :]: value
                    for key, value in properties.items()
                    if key.startswith(family.prefix) and len(key) > len(family.prefix)
                }
                continue
            spec = f.metadata.get("setting")
            if spec is None or spec.key not in properties:
                continue
            try:
                values[f.name] = spec.parse(properties[spec.key])
            except ValueError as error:
                raise SettingsError(f"{spec.key}: {error}") from None
        values.update(overrides)
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """The settings as property strings (durations in ms); unset optional ones are left out."""
        rendered = {
            spec.key: spec.render(value)
            for spec, value in self._specs_and_values()
            if value is not None
        }
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            family: FamilySpec | None = f.metadata.get("family")
            if family is not None:
                rendered.update(
                    (family.key(name), value) for name, value in getattr(self, f.name).items()
                )
        return rendered


def unknown_keys(properties: Mapping[str, str], *classes: type[SettingsBase]) -> list[str]:
    """The keys none of `classes` reads: almost always a typo worth refusing."""
    return sorted(key for key in properties if not any(cls.reads(key) for cls in classes))


def nearest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` is most likely a misspelling of, if any is close enough."""
    matches = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DURATION_S",
    "MAX_RATE",
    "FamilySpec",
    "SettingSpec",
    "SettingsBase",
    "any_value",
    "duration_setting",
    "if_set",
    "label_key",
    "label_value",
    "nearest_key",
    "non_negative",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_optional_str",
    "parse_str",
    "positive",
    "rate",
    "render_duration",
    "render_value",
    "setting",
    "setting_family",
    "unknown_keys",
]
