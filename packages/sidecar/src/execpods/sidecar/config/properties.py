"""A real `spark-defaults.conf`: reading Spark's properties format, and judging every key in it.

A Spark configuration holds far more than the sidecar reads (`spark.driver.memory`, SQL settings,
...). Refusing all of them would stop the sidecar on any real file; accepting every key would let a
typo fall back to a default in silence. So each key is judged by where it lives:

- honoured: a settings class declares it (the specs are the one list of what the sidecar reads);
- a Spark 4.3 key listed in `sparkkeys` as not implemented: accepted, and named once in a WARNING
  with why (it changes executor pods in Spark);
- any other `spark.*` key (listed as not applicable, or of another namespace such as
  `spark.sql.*`): accepted, and named once at INFO with why;
- an unknown key in a namespace the sidecar owns (`spark.kubernetes.allocation.*`,
  `spark.kubernetes.executor.*`, `execpods.*`, or a near-miss spelling of one): refused, with the
  nearest key *of that namespace* suggested, since a typo there silently falls back to a default;
- anything else is not a Spark property: ignored with a WARNING, as `spark-submit` does.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from execpods.core import SettingsError
from execpods.core.settingkit import nearest_key
from execpods.sidecar.config.sparkkeys import (
    DEPRECATED_ALIASES,
    KeyStatus,
    listed_keys,
    listed_status,
)

OWNED_NAMESPACES = ("spark.kubernetes.allocation.", "spark.kubernetes.executor.", "execpods.")
"""Namespaces the sidecar owns: an unknown key in one of them is refused."""

NAMESPACE_TYPO_RATIO = 0.92
"""A namespace this close to an owned one (`spark.kubernetes.alocation`) is a misspelling of it."""

OTHER_SPARK_KEYS = "configures the engine, the driver or the executor process, not executor pods"
"""Why a Spark key of an uncatalogued namespace (`spark.sql.*`, ...) does not apply."""

logger = logging.getLogger(__name__)


def owned_namespace(key: str) -> str | None:
    """The owned namespace `key` is in, or is a near-miss spelling of; None when neither."""
    for namespace in OWNED_NAMESPACES:
        if key.startswith(namespace):
            return namespace
    for namespace in OWNED_NAMESPACES:
        head = ".".join(key.split(".")[: namespace.count(".")]) + "."
        if difflib.SequenceMatcher(None, head, namespace).ratio() >= NAMESPACE_TYPO_RATIO:
            return namespace
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyReview:
    """What the sidecar makes of each key of a property mapping."""

    read: tuple[str, ...]
    not_implemented: tuple[tuple[str, str], ...]
    """(key, why) of Spark keys that change executor pods in Spark and are not implemented."""
    not_applicable: tuple[tuple[str, str], ...]
    """(key, why) of Spark keys that do not apply to a sidecar."""
    not_spark: tuple[str, ...]
    """Keys outside `spark.*` and execpods' namespaces: ignored, as spark-submit does."""
    refused: tuple[tuple[str, str | None], ...]
    """(key, the nearest known key of its namespace, or None)."""

    @property
    def not_used(self) -> tuple[str, ...]:
        """Every accepted key the sidecar does not act on."""
        return tuple(sorted(k for k, _ in (*self.not_implemented, *self.not_applicable)))

    def refusal(self) -> str | None:
        """The message refusing the unknown keys, or None when there is none."""
        if not self.refused:
            return None
        named = ", ".join(
            key + (f" (did you mean {near}?)" if near else "") for key, near in self.refused
        )
        plural = "s" if len(self.refused) > 1 else ""
        return (
            f"unknown setting{plural}: {named} (see `execpods-sidecar settings` for the known ones)"
        )

    def log(self, log: logging.Logger = logger) -> None:
        """One line per kind of accepted key the sidecar does not act on (nothing when none)."""
        if self.not_implemented:
            log.warning(
                "Spark properties execpods does not implement yet (accepted, ignored): %s",
                _grouped(self.not_implemented),
            )
        if self.not_applicable:
            log.info(
                "Spark properties that do not apply to the sidecar (accepted, ignored): %s",
                _grouped(self.not_applicable),
            )
        if self.not_spark:
            log.warning("Ignoring non-Spark properties: %s", ", ".join(self.not_spark))


def _grouped(keys: Iterable[tuple[str, str]]) -> str:
    """`a, b (why); c (why)`: keys that share a reason are named together."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in keys:
        by_reason.setdefault(reason, []).append(key)
    return "; ".join(f"{', '.join(ks)} ({reason})" for reason, ks in by_reason.items())


def review(
    properties: Iterable[str], *, reads: Callable[[str], bool], known: Iterable[str]
) -> PropertyReview:
    """Judge every key (see the module's docstring); `known` feeds the suggestions."""
    candidates = sorted({*known, *listed_keys()})
    read: list[str] = []
    not_implemented: list[tuple[str, str]] = []
    not_applicable: list[tuple[str, str]] = []
    not_spark: list[str] = []
    refused: list[tuple[str, str | None]] = []
    for key in sorted(properties):
        listed = listed_status(key)
        if reads(key):
            read.append(key)
        elif listed is not None and listed[0] is KeyStatus.NOT_IMPLEMENTED:
            not_implemented.append((key, listed[1]))
        elif listed is not None:
            not_applicable.append((key, listed[1]))
        elif (namespace := owned_namespace(key)) is not None:
            near = nearest_key(key, [c for c in candidates if c.startswith(namespace)])
            refused.append((key, near))
        elif key.startswith("spark."):
            not_applicable.append((key, OTHER_SPARK_KEYS))
        else:
            not_spark.append(key)
    return PropertyReview(
        read=tuple(read),
        not_implemented=tuple(not_implemented),
        not_applicable=tuple(not_applicable),
        not_spark=tuple(not_spark),
        refused=tuple(refused),
    )


def apply_aliases(properties: Mapping[str, str], log: logging.Logger = logger) -> dict[str, str]:
    """The properties with deprecated names moved to their execpods names (a warning for each;
    when both are given, the new name wins)."""
    renamed = dict(properties)
    for old, new in DEPRECATED_ALIASES.items():
        if old not in renamed:
            continue
        value = renamed.pop(old)
        if new in renamed:
            log.warning("%s is deprecated and ignored: %s is set too, and wins.", old, new)
            continue
        log.warning("%s is deprecated (it is not a Spark property): use %s.", old, new)
        renamed[new] = value
    return renamed


# --- Spark's properties file format (java.util.Properties, values trimmed as Spark does) -------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_UNICODE = re.compile(r"u([0-9a-fA-F]{4})")


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Lines joined where one ends in an odd number of backslashes; comments and blanks dropped."""
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line.startswith(("#", "!")):
                continue
            start = number
        joined = line if pending is None else pending + line
        trailing = len(joined) - len(joined.rstrip("\\"))
        if trailing % 2 == 1:
            pending = joined[:-1]
            continue
        pending = None
        yield start, joined
    if pending is not None:
        yield start, pending


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        unicode = _UNICODE.match(text, i + 1)
        if unicode is not None:
            out.append(chr(int(unicode.group(1), 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(following, following))
        i += 2
    return "".join(out)


def split_property(line: str) -> tuple[str, str]:
    """`key=value`, `key:value` or `key value` (the first unescaped separator ends the key)."""
    i = 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return _unescape(key), _unescape(rest.lstrip(" \t\f")).strip()


def parse_properties_lines(text: str, *, source: str = "properties") -> dict[str, tuple[str, int]]:
    """Each property in `text` with the line it starts on (Spark's `spark-defaults.conf` format;
    the last one wins)."""
    properties: dict[str, tuple[str, int]] = {}
    for number, line in _logical_lines(text):
        key, value = split_property(line)
        if not key:
            raise SettingsError(f"{source}:{number}: no key in {line!r}")
        properties[key] = (value, number)
    return properties


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """The properties in `text`, in Spark's `spark-defaults.conf` format; the last one wins."""
    return {key: value for key, (value, _) in parse_properties_lines(text, source=source).items()}


def read_properties_file_lines(path: str | Path) -> dict[str, tuple[str, int]]:
    """Read a `spark-defaults.conf`: each property with its line. An unreadable file is a
    `SettingsError` naming it; a malformed line, one naming the file and the line."""
    source = f"--properties-file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SettingsError(f"{source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise SettingsError(f"{source}: not UTF-8 text ({error.reason})") from None
    return parse_properties_lines(text, source=str(path))


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Read a `spark-defaults.conf`; errors name the file (and the line)."""
    return {key: value for key, (value, _) in read_properties_file_lines(path).items()}
