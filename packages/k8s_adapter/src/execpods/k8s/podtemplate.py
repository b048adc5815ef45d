"""Executor pod templates: read from the settings' file or parsed from a caller's text, checked.

Split from `builder` (it had grown past 600 lines): the template arrives before any pod is built,
from a file the operator names or as text a gRPC caller sends, so its parsing carries the guards
against hostile input (size, nesting, YAML aliases) and the shape checks `build` relies on. The
builder only ever receives a template that passed here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from execpods.core import PodManifest, SettingsError
from execpods.k8s.claims import take_claim_templates


def load_template(path: str | Path) -> PodManifest:
    """A pod template from a YAML file; a missing or non-pod file is a `SettingsError`."""
    key = "spark.kubernetes.executor.podTemplateFile"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SettingsError(f"{key}: cannot read {str(path)!r}: {error.strerror}") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SettingsError(f"{key}: {str(path)!r} is not valid YAML: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict) or loaded.get("kind", "Pod") != "Pod":
        raise SettingsError(f"{key}: {str(path)!r} is not a Pod manifest")
    return loaded


MAX_TEMPLATE_BYTES = 256 * 1024
"""Largest pod template a caller may send: Spark's executor pod is a few KiB; a megabyte-sized
template costs the sidecar per create and is no pod anybody means."""


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors' aliases: a few hundred bytes of nested aliases expand into gigabytes
    (the "billion laughs"), and no pod template needs them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                "YAML aliases (*name) are not allowed in a pod template",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _load_untrusted(text: str) -> object:
    """JSON (what the Spark plugin sends, parsed fast) or alias-free YAML."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML's flow style also starts with "{": let the YAML parser judge it
    return yaml.load(text, Loader=_NoAliasLoader)


MAX_TEMPLATE_DEPTH = 64
"""The deepest a pod template may nest (a Pod's deepest field is about 15 levels down): deeper
ones would exhaust the interpreter's stack in whatever walks them later, on another thread."""


def nesting_depth(value: object, limit: int = MAX_TEMPLATE_DEPTH) -> int:
    """How deep `value` nests lists and mappings, counted without recursion, up to `limit` + 1."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        if not children:
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_pod_template(text: str, *, what: str) -> PodManifest:
    """A pod template given as a JSON or YAML string (a resource profile's own template).

    The text comes from a gRPC caller, so it is bounded (`MAX_TEMPLATE_BYTES`, nested at most
    `MAX_TEMPLATE_DEPTH` deep) and parsed without YAML aliases."""
    size = len(text.encode("utf-8"))
    if size > MAX_TEMPLATE_BYTES:
        raise SettingsError(
            f"{what}: the pod template is {size} bytes, more than the {MAX_TEMPLATE_BYTES} allowed"
        )
    too_deep = SettingsError(
        f"{what}: the pod template nests deeper than {MAX_TEMPLATE_DEPTH} levels; no Pod does"
    )
    try:
        loaded = _load_untrusted(text)
    except yaml.YAMLError as error:
        raise SettingsError(
            f"{what}: the pod template is not valid JSON or YAML: {error}"
        ) from None
    except RecursionError:  # the parsers recurse: a template nested thousands deep
        raise too_deep from None
    if nesting_depth(loaded) > MAX_TEMPLATE_DEPTH:
        raise too_deep
    if loaded is None:
        return {}
    if not isinstance(loaded, dict) or loaded.get("kind", "Pod") != "Pod":
        raise SettingsError(f"{what}: the pod template is not a Pod manifest")
    check_template(loaded, key=what)
    take_claim_templates(copy.deepcopy(loaded), what=what)  # refuse a bad claims annotation now
    return loaded


def check_template(
    template: Mapping[str, Any], *, key: str = "spark.kubernetes.executor.podTemplateFile"
) -> None:
    """Refuse at start-up a template whose shape `build` could not work on."""
    for section in ("metadata", "spec"):
        if template.get(section) is not None and not isinstance(template[section], dict):
            raise SettingsError(f"{key}: the template's {section} is not a mapping")
    spec = template.get("spec") or {}
    containers = spec.get("containers")
    if containers is not None and (
        not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers)
    ):
        raise SettingsError(f"{key}: the template's spec.containers is not a list of mappings")
    for container in containers or []:
        if container.get("env") is not None and not isinstance(container["env"], list):
            raise SettingsError(
                f"{key}: the env of container {container.get('name')!r} is not a list"
            )
