"""What one run did to executor pods, read from the simulator's request log and normalized.

A run is one scenario under one allocator (Spark's own, or the execpods plugin and sidecar). Its
recording holds every executor pod created (the body the client sent, in full) and every API call
on executor pods and their claims (verb, target, selectors, body, grace), each tagged with the
scenario step it happened in. Values that differ from run to run whatever the allocator (the
driver's port, a random ConfigMap name, the executor ids themselves) are replaced by placeholders,
so that what is left differs only where the two allocators differ; the executor id is kept as a
field of its own, so that ids are compared too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from execpods.kubesim import RequestRecord

__all__ = [
    "Call",
    "CreatedPod",
    "Recording",
    "flatten",
    "record_run",
    "who",
]

_POD_PATH = re.compile(
    r"^/api(?:/v1|s/metrics\.k8s\.io/v1beta1)/(?:watch/)?namespaces/[^/]+/"
    r"(pods|persistentvolumeclaims)(?:/([^/]+))?(/[a-z]+)?$"
)
_EXEC_NAME = re.compile(r"^(.*)-exec-(\d+)$")
_RESOURCE_VERSION = re.compile(r'"resourceVersion": "\d+"')
_DRIVER_PORT = re.compile(r"((?:spark\.driver\.port|spark\.driver\.blockManager\.port)=)\d+")
_DRIVER_URL = re.compile(r"(spark://CoarseGrainedScheduler@[^:]+:)\d+")
_CONFIG_MAP = re.compile(r"spark-exec-[0-9a-f]+-conf-map")
_LOCAL_DIR = re.compile(r"/spark-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID_LIST = re.compile(r"(spark-exec-id(?: in |=)\(?)([0-9, ]+)")

HARNESS_AGENT = "execpods-harness"
"""The User-Agent of the harness's own reads, which are never part of a recording."""


def who(user_agent: str) -> str:
    """Who made a call, by its User-Agent: "spark" (fabric8), "sidecar", or the agent itself."""
    if user_agent.startswith("fabric8-kubernetes-client"):
        return "spark"
    if user_agent.startswith("execpods-sidecar"):
        return "sidecar"
    return user_agent or "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatedPod:
    """One executor pod as its creator sent it, normalized, with its executor id apart."""

    ordinal: int
    """1 for the run's first executor pod, 2 for the next, ...: how two runs' pods are paired."""
    executor_id: int
    step: str
    fields: Mapping[str, str]
    """The pod flattened to path -> JSON value, after normalization."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One API call on executor pods (or their claims), normalized."""

    step: str
    who: str
    verb: str
    resource: str
    target: str
    """The object ("pod #2": the run's second executor pod; "claim #1") or "" for a collection."""
    label_selector: str
    field_selector: str
    grace: str
    """The grace period asked for ("" when none was given)."""
    body: str
    """A patch's or an update's normalized body ("" for others: a create's pod is compared
    field by field, a delete's options are its grace)."""
    status: int

    def key(self) -> str:
        """What two runs' calls must agree on (the status too: a 404 is a call that missed)."""
        parts = [self.verb, self.resource, self.target]
        if self.label_selector:
            parts.append(f"labels={self.label_selector}")
        if self.field_selector:
            parts.append(f"fields={self.field_selector}")
        if self.grace:
            parts.append(f"grace={self.grace}")
        if self.body:
            parts.append(f"body={self.body}")
        parts.append(str(self.status))
        return " ".join(p for p in parts if p)

    @property
    def reads(self) -> bool:
        return self.verb in ("get", "list", "watch")


@dataclass(slots=True)
class Recording:
    """One run's executor pods and calls, in the order the server served them."""

    mode: str
    pods: list[CreatedPod] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    failure: str = ""
    """Why the run did not finish its script (a wait that timed out), or ""."""

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "failure": self.failure,
            "pods": [
                {
                    "ordinal": p.ordinal,
                    "executorId": p.executor_id,
                    "step": p.step,
                    "fields": dict(p.fields),
                }
                for p in self.pods
            ],
            "calls": [{"step": c.step, "who": c.who, "call": c.key()} for c in self.calls],
        }


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """``value`` as leaf path -> JSON text. Lists of objects with a ``name`` (containers, env,
    volumes, mounts, ports) are keyed by it, so that an order change is not a difference."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = "{}"
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        if not value:
            out[prefix] = "[]"
        named = all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value)
        for index, item in enumerate(value):
            label = f"[{item['name']}]" if named else f"[{index}]"
            out.update(flatten(item, prefix + label))
    else:
        out[prefix] = json.dumps(value, sort_keys=True)
    return out


class _Names:
    """Executor pods and claims of one run as ordinals. A pod's ordinal is fixed by the sorted
    creates (`ordinals`); a name or an id then means the pod created last under it, so that a
    restarted driver reusing a name (Spark's own does) means the new pod."""

    def __init__(self, ordinals: Mapping[int, int]) -> None:
        self._ordinals = ordinals
        self.pods: dict[str, int] = {}
        self.ids: dict[int, int] = {}
        self.claims: dict[str, int] = {}

    def created(self, index: int, name: str, executor_id: int) -> int:
        ordinal = self._ordinals[index]
        self.pods[name] = ordinal
        self.ids[executor_id] = ordinal
        return ordinal

    def pod(self, name: str) -> str:
        return f"pod #{self.pods[name]}" if name in self.pods else f"pod {name}"

    def claim(self, name: str) -> str:
        ordinal = self.claims.setdefault(name, len(self.claims) + 1)
        return f"claim #{ordinal}"

    def id_list(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            ids = [s.strip() for s in match.group(2).split(",") if s.strip()]
            named = sorted(f"#{self.ids.get(int(i), '?' + i)}" for i in ids)
            return match.group(1) + ",".join(named)

        return _ID_LIST.sub(one, text)


def _normalize_text(text: str, executor_id: int | None = None) -> str:
    text = _DRIVER_URL.sub(r"\1{port}", text)
    text = _DRIVER_PORT.sub(r"\1{port}", text)
    text = _CONFIG_MAP.sub("spark-exec-{hex}-conf-map", text)
    text = _LOCAL_DIR.sub("/spark-{uuid}", text)
    text = _RESOURCE_VERSION.sub('"resourceVersion": "{rv}"', text)
    if executor_id is not None:
        text = re.sub(rf"-exec-{executor_id}\b", "-exec-{id}", text)
    return text


def _normalize_pod(pod: dict[str, Any], executor_id: int) -> dict[str, Any]:
    """The pod with run-to-run values replaced (the id in names, env, labels and hostname)."""
    text = json.dumps(pod, sort_keys=True)
    normalized: dict[str, Any] = json.loads(_normalize_text(text, executor_id))
    labels = normalized.get("metadata", {}).get("labels", {})
    if labels.get("spark-exec-id") == str(executor_id):
        labels["spark-exec-id"] = "{id}"
    for container in normalized.get("spec", {}).get("containers", []):
        for env in container.get("env", []):
            if env.get("name") == "SPARK_EXECUTOR_ID" and env.get("value") == str(executor_id):
                env["value"] = "{id}"
    return normalized


def _grace(record: RequestRecord, body: Any) -> str:
    if "gracePeriodSeconds" in record.query:
        return record.query["gracePeriodSeconds"]
    if isinstance(body, dict) and "gracePeriodSeconds" in body:
        return str(body["gracePeriodSeconds"])
    return ""


def _body(record: RequestRecord) -> Any:
    if not record.body:
        return None
    try:
        return json.loads(record.body)
    except ValueError:
        return record.body.decode("utf-8", "replace")


def _created(record: RequestRecord) -> tuple[str, int] | None:
    """The executor pod's name and id when ``record`` created one."""
    if record.verb != "create" or record.status != 201 or record.user_agent == HARNESS_AGENT:
        return None
    match = _POD_PATH.match(record.path)
    body = _body(record)
    if match is None or match.group(1) != "pods" or not isinstance(body, dict):
        return None
    name = str(body.get("metadata", {}).get("name", ""))
    id_match = _EXEC_NAME.match(name)
    return (name, int(id_match.group(2))) if id_match else None


def record_run(
    mode: str,
    records: Sequence[RequestRecord],
    steps: Sequence[tuple[str, float]],
) -> Recording:
    """The recording of one run from the simulator's request log. ``steps`` are the scenario's
    steps and when each began (the log's clock), oldest first.

    Pods get their ordinals by step, then by executor id: creates of one batch go out
    concurrently, so the order the server saw them in is not the allocator's.
    """
    recording = Recording(mode=mode)
    order = [name for name, _ in steps]

    def step_at(at: float) -> str:
        current = steps[0][0] if steps else ""
        for name, began in steps:
            if at >= began:
                current = name
        return current

    created = [
        (order.index(step) if (step := step_at(r.at)) in order else -1, made[1], index)
        for index, r in enumerate(records)
        if (made := _created(r)) is not None
    ]
    names = _Names({index: n + 1 for n, (_, _, index) in enumerate(sorted(created))})

    for index, record in enumerate(records):
        match = _POD_PATH.match(record.path)
        if match is None or record.user_agent == HARNESS_AGENT:
            continue
        resource, name, subresource = match.group(1), unquote(match.group(2) or ""), match.group(3)
        body = _body(record)
        step = step_at(record.at)
        target = ""
        made = _created(record)
        if made is not None and isinstance(body, dict):
            pod_name, executor_id = made
            ordinal = names.created(index, pod_name, executor_id)
            fields = flatten(_normalize_pod(body, executor_id))
            recording.pods.append(
                CreatedPod(ordinal=ordinal, executor_id=executor_id, step=step, fields=fields)
            )
            target = f"pod #{ordinal}"
        elif resource == "persistentvolumeclaims" and isinstance(body, dict) and not name:
            name = str(body.get("metadata", {}).get("name", ""))
        if name and not target:
            target = names.pod(name) if resource == "pods" else names.claim(name)
        if subresource:
            target += f" {subresource.lstrip('/')}"
        call_body = ""
        if record.verb in ("patch", "update") and body is not None:
            text = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
            call_body = _normalize_text(text)
        kind = "pod" if resource == "pods" else "claim"
        if record.path.startswith("/apis/metrics.k8s.io/"):
            kind = "podmetrics"
        recording.calls.append(
            Call(
                step=step,
                who=who(record.user_agent),
                verb=record.verb,
                resource=kind,
                target=target,
                label_selector=names.id_list(record.query.get("labelSelector", "")),
                field_selector=record.query.get("fieldSelector", ""),
                grace=_grace(record, body),
                body=call_body,
                status=record.status,
            )
        )
    recording.pods.sort(key=lambda pod: pod.ordinal)
    return recording


def steps_of(calls: Iterable[Call]) -> list[str]:
    seen: dict[str, None] = {}
    for call in calls:
        seen.setdefault(call.step, None)
    return list(seen)
