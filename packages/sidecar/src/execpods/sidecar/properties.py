"""A real `spark-defaults.conf`: reading Spark's properties format, and judging every key in it.

A Spark configuration holds far more than the sidecar reads (`spark.driver.memory`, SQL settings,
...). Refusing all of them would stop the sidecar on any real file; accepting every key would let a
typo fall back to a default in silence. So each key is judged by where it lives:

- read: a settings class declares it (the specs are the one list of what the sidecar reads);
- owned namespaces (`spark.kubernetes.allocation.*`, `spark.kubernetes.executor.*`, `execpods.*`,
  and a near-miss spelling of one): any other key there is refused, with the nearest known key
  suggested, except Spark's own keys there that execpods does not implement, which are accepted
  and named in one WARNING (they change executor pods in Spark, so ignoring them is worth a word);
- any other `spark.*` key: accepted, and listed once at INFO as not used by the sidecar;
- anything else is not a Spark property: refused, as a typo is the likely cause.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from execpods.core import SettingsError
from execpods.core.settingkit import nearest_key

OWNED_NAMESPACES = ("spark.kubernetes.allocation.", "spark.kubernetes.executor.", "execpods.")
"""Namespaces the sidecar owns: an unknown key in one of them is refused."""

NAMESPACE_TYPO_RATIO = 0.92
"""A namespace this close to an owned one (`spark.kubernetes.alocation`) is a misspelling of it."""

SPARK_ONLY_KEYS = frozenset(
    {
        "spark.kubernetes.allocation.driver.readinessTimeout",
        "spark.kubernetes.allocation.pods.allocator",
        "spark.kubernetes.executor.decommissionLabel",
        "spark.kubernetes.executor.decommissionLabelValue",
        "spark.kubernetes.executor.disableConfigMap",
        "spark.kubernetes.executor.lostCheck.maxAttempts",
        "spark.kubernetes.executor.minTasksPerExecutorBeforeRolling",
        "spark.kubernetes.executor.pod.featureSteps",
        "spark.kubernetes.executor.rollInterval",
        "spark.kubernetes.executor.rollPolicy",
        "spark.kubernetes.executor.useDriverPodIP",
    }
)
"""Spark's own keys in the owned namespaces (a key a settings class reads counts as read first)."""

SPARK_ONLY_FAMILIES: tuple[str, ...] = ()
"""Spark's open-ended key families in `spark.kubernetes.executor.*` execpods does not implement
(none today: labels, annotations, node selectors, secrets and volumes are all read)."""

logger = logging.getLogger(__name__)


def _in_owned_namespace(key: str) -> bool:
    if key.startswith(OWNED_NAMESPACES):
        return True
    for namespace in OWNED_NAMESPACES:
        head = ".".join(key.split(".")[: namespace.count(".")]) + "."
        if difflib.SequenceMatcher(None, head, namespace).ratio() >= NAMESPACE_TYPO_RATIO:
            return True
    return False


def _spark_only(key: str) -> bool:
    return key in SPARK_ONLY_KEYS or key.startswith(SPARK_ONLY_FAMILIES)


@dataclass(frozen=True, slots=True, kw_only=True)
class PropertyReview:
    """What the sidecar makes of each key of a property mapping."""

    read: tuple[str, ...]
    not_implemented: tuple[str, ...]
    not_used: tuple[str, ...]
    refused: tuple[tuple[str, str | None], ...]
    """(key, the nearest known key or None)."""

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
        """One line for the accepted keys the sidecar does not act on (nothing when none)."""
        if self.not_implemented:
            log.warning(
                "Spark properties execpods does not implement (accepted, ignored): %s",
                ", ".join(self.not_implemented),
            )
        if self.not_used:
            log.info("Spark properties not used by the sidecar: %s", ", ".join(self.not_used))


def review(
    properties: Iterable[str], *, reads: Callable[[str], bool], known: Iterable[str]
) -> PropertyReview:
    """Judge every key (see the module's docstring); `known` feeds the suggestions."""
    candidates = sorted({*known, *SPARK_ONLY_KEYS})
    read: list[str] = []
    not_implemented: list[str] = []
    not_used: list[str] = []
    refused: list[tuple[str, str | None]] = []
    for key in sorted(properties):
        if reads(key):
            read.append(key)
        elif _in_owned_namespace(key):
            if _spark_only(key):
                not_implemented.append(key)
            else:
                refused.append((key, nearest_key(key, candidates)))
        elif key.startswith("spark."):
            not_used.append(key)
        else:
            refused.append((key, nearest_key(key, candidates)))
    return PropertyReview(
        read=tuple(read),
        not_implemented=tuple(not_implemented),
        not_used=tuple(not_used),
        refused=tuple(refused),
    )


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


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """The properties in `text`, in Spark's `spark-defaults.conf` format; the last one wins."""
    properties: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = split_property(line)
        if not key:
            raise SettingsError(f"{source}:{number}: no key in {line!r}")
        properties[key] = value
    return properties


def read_properties_file(path: str | Path) -> dict[str, str]:
    """Read a `spark-defaults.conf`; an unreadable file is a `SettingsError` naming it."""
    source = f"--properties-file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SettingsError(f"{source}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise SettingsError(f"{source}: not UTF-8 text ({error.reason})") from None
    return parse_properties(text, source=source)
