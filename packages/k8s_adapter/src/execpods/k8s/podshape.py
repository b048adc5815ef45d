"""Executor pod names and the edits the builder makes to a copy of the template.

Split from `builder` (it had grown past 600 lines): these are pure functions of their arguments
(no settings, no builder state), each one rule of Spark's executor feature steps or of the API
server: how a pod and its host are named, how the environment merges, how nodes are avoided, who
owns the pod. Keeping them apart leaves `builder` with the decisions of what to write where.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import orjson
from execpods.core import PodManifest

MAX_POD_NAME_LENGTH = 63
MAX_APP_ID_PREFIX = 47
"""The longest application id that prefixes pod names as it is (Spark's rule for a pod name
prefix): `<app id>-exec-<id>` then fits a 63-character label for every id up to ten digits."""

HOSTNAME_LABEL = "kubernetes.io/hostname"


def sanitize_prefix(raw: str) -> str:
    """A DNS-1123 label prefix from any string (an app id may hold `_`, `.` or capitals)."""
    lowered = re.sub(r"[^a-z0-9-]+", "-", raw.lower())
    collapsed = re.sub(r"-{2,}", "-", lowered).strip("-")
    return collapsed or "spark"


def app_id_prefix_problem(app_id: str) -> str | None:
    """Why `app_id` cannot prefix executor pod names as it is (None when it can).

    The prefix must be the id itself: two ids that sanitize alike (`My_App`, `my-app`) or share
    their first 56 characters would name their executors alike, and each application's creates
    would collide with the other's pods (409, ids skipped)."""
    if sanitize_prefix(app_id) != app_id:
        return (
            "cannot prefix executor pod names as it is (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    if len(app_id) > MAX_APP_ID_PREFIX:
        return (
            f"is too long to prefix executor pod names ({len(app_id)} characters; at most "
            f"{MAX_APP_ID_PREFIX}, so that <app id>-exec-<id> fits 63)"
        )
    return None


def executor_pod_name(prefix: str, executor_id: int) -> str:
    """`<prefix>-exec-<id>`, the prefix cut so the name stays a valid 63-character label."""
    suffix = f"-exec-{executor_id}"
    cut = prefix[: MAX_POD_NAME_LENGTH - len(suffix)].rstrip("-")
    return f"{cut}{suffix}"


def executor_hostname(pod_name: str) -> str:
    """The executor's hostname from its pod name, as Spark's `BasicExecutorFeatureStep` derives
    it (the last 63 characters, leading non-word characters dropped), except that a character
    Spark turns into `_` becomes `-`: the API server refuses `_` in `spec.hostname` (a DNS-1123
    label), so Spark's own pods with a dotted podNamePrefix would not be created."""
    tail = pod_name[max(0, len(pod_name) - MAX_POD_NAME_LENGTH) :]
    tail = re.sub(r"^[^\w]+", "", tail)
    return re.sub(r"[^a-z0-9-]+", "-", tail).strip("-")


def substituted(values: Mapping[str, str], ids: Mapping[str, str]) -> dict[str, str]:
    """`{{APP_ID}}` and `{{EXECUTOR_ID}}` in each value replaced, as Spark does."""
    replaced = {}
    for key, value in values.items():
        text = value
        for placeholder, actual in ids.items():
            text = text.replace(placeholder, actual)
        replaced[key] = text
    return replaced


def fresh_copy(template: PodManifest) -> dict[str, Any]:
    """A deep copy of a template, through JSON: about 3x faster than `copy.deepcopy` on Spark's
    4 KB executor pod (the plugin's template), which every create of 1,000 copies. A template
    with values JSON cannot hold (a YAML date) is copied the slow way."""
    try:
        copied: dict[str, Any] = orjson.loads(
            orjson.dumps(template, option=orjson.OPT_NON_STR_KEYS)
        )
    except TypeError:
        return copy.deepcopy(dict(template))
    return copied


def owner_reference(driver_pod: Mapping[str, Any]) -> dict[str, object]:
    """An owner reference to the driver pod (controller, so GC removes executors with it)."""
    metadata = driver_pod.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "controller": True,
    }


def ensure_section(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """`parent[key]` as a mapping to write into: a new one, set there, when absent or not one."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


PER_EXECUTOR_ENV = frozenset({"SPARK_EXECUTOR_ID", "SPARK_EXECUTOR_POD_NAME"})
"""What a pod Spark built for executor 0 says of that executor: replaced for each executor."""


def merge_env(
    existing: object,
    extra: Mapping[str, str],
    *,
    keep_template: bool = False,
    forced: frozenset[str] = PER_EXECUTOR_ENV,
) -> list[dict[str, Any]]:
    """The template's env entries with `extra` set on top (same name: ours wins). With
    ``keep_template`` (a pod Spark's own builder made, from the driver's configuration) the
    template's entries win, except those ``forced`` (the executor's own id, recovery mode's
    cores) and a literal pod name: Spark's `SPARK_EXECUTOR_POD_NAME` reads the pod's name
    (`fieldRef`), and is kept as it is."""
    entries = [e for e in existing if isinstance(e, dict)] if isinstance(existing, list) else []

    def ours(entry: Mapping[str, Any]) -> bool:
        name = entry.get("name")
        if name not in extra:
            return False
        if not keep_template:
            return True
        return name in forced and "valueFrom" not in entry

    kept = [e for e in entries if not ours(e)]
    names = {e.get("name") for e in kept}
    return [*kept, *({"name": k, "value": v} for k, v in extra.items() if k not in names)]


def avoid_nodes(spec: dict[str, Any], nodes: frozenset[str]) -> None:
    """Require that the pod run on none of `nodes`: a `NotIn` on the hostname label, added to
    every node selector term the pod already has (or in a term of its own)."""
    if not nodes:
        return
    expression = {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(nodes)}
    affinity = ensure_section(spec, "affinity")
    node_affinity = ensure_section(affinity, "nodeAffinity")
    required = ensure_section(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        terms = [{"matchExpressions": []}]
        required["nodeSelectorTerms"] = terms
    for term in terms:
        if isinstance(term, dict):
            expressions = term.get("matchExpressions")
            if not isinstance(expressions, list):
                expressions = []
                term["matchExpressions"] = expressions
            expressions.append(dict(expression))


def escalation_problem(pod: PodManifest) -> str | None:
    """A privileged container with `allowPrivilegeEscalation: false` (the sidecar's setting):
    the API server refuses the pair (a privileged container always escalates)."""
    spec = pod.get("spec") or {}
    for index, container in enumerate(spec.get("containers") or []):
        context = container.get("securityContext") or {}
        if context.get("privileged") is True and context.get("allowPrivilegeEscalation") is False:
            return (
                f"spec.containers.{index}.securityContext: privileged is true while "
                "allowPrivilegeEscalation is false (the sidecar's "
                "spark.kubernetes.securityContext.allowPrivilegeEscalation): a privileged "
                "container always escalates"
            )
    return None
