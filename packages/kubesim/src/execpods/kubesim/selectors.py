"""Label and field selectors, parsed and matched the way the API server does.

Bad syntax raises :class:`SelectorError`, which the server turns into HTTP 400, because a client
that sends a malformed selector must learn about it rather than silently match everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "FIELD_GETTERS",
    "FieldSelector",
    "LabelSelector",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
    "valid_label_key",
    "valid_label_value",
]


class SelectorError(ValueError):
    """A selector that cannot be parsed."""


_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|[A-Za-z0-9_./-]+)")
_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """One clause of a label selector; ``op`` is one of = != in notin exists !exists."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # != and notin also match objects that lack the label, as in Kubernetes.
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: Mapping[str, object]) -> bool:
        if not self.requirements:
            return True
        meta = obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        present = labels if isinstance(labels, Mapping) else {}
        return all(r.matches(present) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SelectorError(f"unable to parse requirement: invalid character at {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def valid_label_key(key: str) -> bool:
    """A label key: an optional DNS subdomain prefix and ``/``, then a name of at most 63."""
    return _KEY.match(key) is not None and len(key.rsplit("/", 1)[-1]) <= 63


def valid_label_value(value: str) -> bool:
    """A label value: empty, or at most 63 alphanumerics with ``-_.`` inside."""
    return _VALUE.match(value) is not None and len(value) <= 63


def _check_key(key: str) -> str:
    if not valid_label_key(key):
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if not valid_label_value(value):
        raise SelectorError(f"invalid label value {value!r}")
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (f,g),h notin (i),j,!k``."""
    if text is None or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(toks):
            raise SelectorError(f"unexpected end of selector {text!r}")
        i += 1
        return toks[i - 1]

    while i < len(toks):
        tok = take()
        if tok == "!":
            reqs.append(Requirement(key=_check_key(take()), op="!exists"))
        else:
            key = _check_key(tok)
            nxt = toks[i] if i < len(toks) else ","
            if nxt == ",":
                reqs.append(Requirement(key=key, op="exists"))
            elif nxt in ("=", "==", "!="):
                take()
                value = take() if i < len(toks) and toks[i] != "," else ""
                op = "!=" if nxt == "!=" else "="
                reqs.append(Requirement(key=key, op=op, values=frozenset({_check_value(value)})))
            elif nxt in ("in", "notin"):
                take()
                if take() != "(":
                    raise SelectorError(f"expected '(' after {nxt} in {text!r}")
                values: set[str] = set()
                expect_value = True
                while True:
                    t = take()
                    if t == ")":
                        break
                    if t == ",":
                        expect_value = True
                        continue
                    if not expect_value:
                        raise SelectorError(f"expected ',' or ')' in {text!r}")
                    values.add(_check_value(t))
                    expect_value = False
                reqs.append(Requirement(key=key, op=nxt, values=frozenset(values)))
            else:
                raise SelectorError(f"unable to parse requirement {text!r}: unexpected {nxt!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise SelectorError(f"expected ',' in {text!r}, found {toks[i]!r}")
            i += 1
            if i >= len(toks):
                raise SelectorError(f"trailing ',' in {text!r}")
    return LabelSelector(requirements=tuple(reqs))


def _path(*keys: str) -> Callable[[Mapping[str, object]], str]:
    def get(obj: Mapping[str, object]) -> str:
        cur: object = obj
        for k in keys:
            if not isinstance(cur, Mapping):
                return ""
            cur = cur.get(k)
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return "" if cur is None else str(cur)

    return get


#: The pod fields the API server indexes for field selectors.
FIELD_GETTERS: dict[str, Callable[[Mapping[str, object]], str]] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
    "status.phase": _path("status", "phase"),
    "spec.nodeName": _path("spec", "nodeName"),
    "spec.restartPolicy": _path("spec", "restartPolicy"),
    "spec.schedulerName": _path("spec", "schedulerName"),
    "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    "status.podIP": _path("status", "podIP"),
    "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    # Events' own fields, which `kubectl describe pod` selects the pod's events by (one table
    # for every kind: a pod selected by these matches nothing rather than being refused).
    "involvedObject.kind": _path("involvedObject", "kind"),
    "involvedObject.name": _path("involvedObject", "name"),
    "involvedObject.namespace": _path("involvedObject", "namespace"),
    "involvedObject.uid": _path("involvedObject", "uid"),
    "reason": _path("reason"),
    "type": _path("type"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldSelector:
    """A conjunction of ``field=value`` / ``field!=value`` terms over indexed pod fields."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    def matches(self, obj: Mapping[str, object]) -> bool:
        return all((FIELD_GETTERS[f](obj) == v) == eq for f, eq, v in self.terms)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        raise SelectorError(f"trailing backslash in {text!r}")
    parts.append("".join(cur))
    return parts


def parse_field_selector(text: str | None) -> FieldSelector:
    """Parse ``metadata.name=x,status.phase!=Running``; unknown fields are an error."""
    if text is None or not text.strip():
        return FieldSelector()
    terms: list[tuple[str, bool, str]] = []
    for raw in _split_unescaped(text, ","):
        part = raw.strip()
        if not part:
            raise SelectorError(f"empty term in field selector {text!r}")
        op = next((o for o in ("!=", "==", "=") if o in part), None)
        if op is None:
            raise SelectorError(f"invalid selector: {part!r}; can't understand {part!r}")
        name, _, value = part.partition(op)
        eq = op != "!="
        name = name.strip()
        if name not in FIELD_GETTERS:
            raise SelectorError(f'field label not supported: "{name}"')
        terms.append((name, eq, value.strip()))
    return FieldSelector(terms=tuple(terms))
