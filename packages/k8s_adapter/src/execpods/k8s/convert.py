"""Pods as the API spells them in JSON -> the core's `ExecutorPod`.

This is the hot path: every watch event and every listed pod goes through `pod_from_dict`. It reads
the raw JSON (parsed by orjson) directly, because the client's model deserialisation costs about a
millisecond per pod and dominated CPU at scale. A malformed pod (no name, wrong types) is logged
at WARNING and skipped: one bad object must never take a source loop down.

`pod_from_model` (the client's `V1Pod` path) exists only so the benchmark can compare the two.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from execpods.core import (
    SPARK_LABELS,
    ContainerRunning,
    ContainerState,
    ContainerStatus,
    ContainerTerminated,
    ContainerWaiting,
    ExecutorPod,
    PodCondition,
    parse_executor_id,
)

logger = logging.getLogger(__name__)


class MalformedPod(ValueError):
    """The object is not a pod the core can use; the message says which field is wrong."""


def parse_timestamp(value: object, field_name: str) -> datetime | None:
    """An RFC 3339 timestamp ("2026-01-01T00:00:00Z", maybe fractional) as an aware time."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedPod(f"{field_name} is not a string: {value!r}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedPod(f"{field_name} is not an RFC 3339 time: {value!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _mapping(value: object, field_name: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPod(f"{field_name} is not an object: {type(value).__name__}")
    return value


def _opt_str(value: object, field_name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedPod(f"{field_name} is not a string: {value!r}")


def _int(value: object, field_name: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise MalformedPod(f"{field_name} is not an integer: {value!r}")


def _labels(value: object, executor_id_label: str) -> tuple[Mapping[str, str], int | None]:
    """The labels, checked, and the executor id they carry (parsed here, once, for everyone
    after); `ExecutorPod` makes its own read-only copy of the labels, so none is made here.

    An executor id label beyond int64 is a valid label value but no executor id the contract can
    carry (protobuf would refuse it on every stream): such a pod is malformed.
    """
    labels = _mapping(value, "metadata.labels")
    for key, label in labels.items():
        if not isinstance(label, str):
            raise MalformedPod(f"label {key!r} is not a string: {label!r}")
    raw_id = labels.get(executor_id_label)
    executor_id = parse_executor_id(raw_id)
    if (
        executor_id is None
        and raw_id is not None
        and raw_id.isascii()
        and raw_id.isdigit()
        and raw_id[0] != "0"  # leading zeros: the core's label parser skips such a pod (issue 20)
    ):
        raise MalformedPod(
            f"label {executor_id_label}={raw_id[:40]!r} is beyond 64 bits: not an executor id"
        )
    return labels, executor_id


# The container helpers name fields relative to their container (".image"): the full path is
# prefixed only when one is malformed, so no error text is formatted for the pods that are fine.


def _container_state(raw: Mapping[str, Any]) -> ContainerState | None:
    terminated = raw.get("terminated")
    if terminated is not None:
        t = _mapping(terminated, ".terminated")
        signal = t.get("signal")
        return ContainerTerminated(
            exit_code=_int(t.get("exitCode"), ".terminated.exitCode"),
            reason=_opt_str(t.get("reason"), ".terminated.reason"),
            message=_opt_str(t.get("message"), ".terminated.message"),
            signal=None if signal is None else _int(signal, ".terminated.signal"),
            started_at=parse_timestamp(t.get("startedAt"), ".terminated.startedAt"),
            finished_at=parse_timestamp(t.get("finishedAt"), ".terminated.finishedAt"),
        )
    running = raw.get("running")
    if running is not None:
        r = _mapping(running, ".running")
        return ContainerRunning(
            started_at=parse_timestamp(r.get("startedAt"), ".running.startedAt")
        )
    waiting = raw.get("waiting")
    if waiting is not None:
        w = _mapping(waiting, ".waiting")
        return ContainerWaiting(
            reason=_opt_str(w.get("reason"), ".waiting.reason"),
            message=_opt_str(w.get("message"), ".waiting.message"),
        )
    return None


def _container_status(item: object) -> ContainerStatus:
    raw = _mapping(item, "")
    name = raw.get("name")
    if not isinstance(name, str):
        raise MalformedPod(".name is missing or not a string")
    return ContainerStatus(
        name=name,
        state=_container_state(_mapping(raw.get("state"), ".state")),
        ready=raw.get("ready") is True,
        restart_count=_int(raw.get("restartCount"), ".restartCount", 0),
        image=_opt_str(raw.get("image"), ".image"),
    )


def _container_statuses(
    value: object, field_name: str = "status.containerStatuses"
) -> tuple[ContainerStatus, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise MalformedPod(f"{field_name} is not a list")
    statuses = []
    for index, item in enumerate(value):
        try:
            statuses.append(_container_status(item))
        except MalformedPod as error:
            raise MalformedPod(f"{field_name}[{index}]{error}") from None
    return tuple(statuses)


def _conditions(value: object) -> tuple[PodCondition, ...]:
    """`status.conditions`; an entry without a string type and status is left out (a condition
    is advisory: an odd one must not make the whole pod malformed)."""
    if not isinstance(value, list):
        return ()
    conditions = []
    for raw in value:
        if not isinstance(raw, dict):
            continue
        kind, status = raw.get("type"), raw.get("status")
        if not isinstance(kind, str) or not isinstance(status, str):
            continue
        reason, message = raw.get("reason"), raw.get("message")
        conditions.append(
            PodCondition(
                type=kind,
                status=status,
                reason=reason if isinstance(reason, str) and reason else None,
                message=message if isinstance(message, str) and message else None,
            )
        )
    return tuple(conditions)


def pod_from_dict_strict(
    obj: object, *, executor_id_label: str = SPARK_LABELS.executor_id
) -> ExecutorPod:
    """Convert one pod, raising `MalformedPod` on anything the core could not use.

    `executor_id_label` is the label key holding the executor id (execpods.labels.executorId).
    """
    pod = _mapping(obj, "pod")
    metadata = _mapping(pod.get("metadata"), "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedPod("metadata.name is missing")
    spec = _mapping(pod.get("spec"), "spec")
    status = _mapping(pod.get("status"), "status")
    namespace = _opt_str(metadata.get("namespace"), "metadata.namespace")
    labels, executor_id = _labels(metadata.get("labels"), executor_id_label)
    return ExecutorPod(
        name=name,
        namespace=namespace or "default",
        labels=labels,
        executor_id=executor_id,
        uid=_opt_str(metadata.get("uid"), "metadata.uid"),
        phase=_opt_str(status.get("phase"), "status.phase"),
        reason=_opt_str(status.get("reason"), "status.reason"),
        message=_opt_str(status.get("message"), "status.message"),
        creation_timestamp=parse_timestamp(
            metadata.get("creationTimestamp"), "metadata.creationTimestamp"
        ),
        deletion_timestamp=parse_timestamp(
            metadata.get("deletionTimestamp"), "metadata.deletionTimestamp"
        ),
        container_statuses=_container_statuses(status.get("containerStatuses")),
        node_name=_opt_str(spec.get("nodeName"), "spec.nodeName"),
        pod_ip=_opt_str(status.get("podIP"), "status.podIP"),
        resource_version=_opt_str(metadata.get("resourceVersion"), "metadata.resourceVersion"),
        restart_policy=_opt_str(spec.get("restartPolicy"), "spec.restartPolicy"),
        claim_names=volume_claim_names(spec.get("volumes")),
        disruption=_disruption(status.get("conditions")),
        conditions=_conditions(status.get("conditions")),
        init_container_statuses=_container_statuses(
            status.get("initContainerStatuses"), "status.initContainerStatuses"
        ),
    )


def _disruption(value: object) -> str | None:
    """The reason of a True `DisruptionTarget` condition (Kubernetes 1.26+ marks pods it evicts,
    preempts or removes from a tainted node), else None; odd conditions are ignored, never fatal."""
    if not isinstance(value, list):
        return None
    for condition in value:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "DisruptionTarget"
            and condition.get("status") == "True"
        ):
            reason = condition.get("reason")
            return reason if isinstance(reason, str) and reason else "DisruptionTarget"
    return None


def volume_claim_names(volumes: object) -> tuple[str, ...]:
    """The claims a pod's volumes name (anything else in `spec.volumes` is not ours to judge)."""
    if not isinstance(volumes, list):
        return ()
    names = []
    for volume in volumes:
        source = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        name = source.get("claimName") if isinstance(source, dict) else None
        if isinstance(name, str):
            names.append(name)
    return tuple(names)


def _name_of(obj: object) -> str:
    if isinstance(obj, dict):
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            return repr(metadata.get("name"))
    return "<unnamed>"


def pod_from_dict(
    obj: object, *, executor_id_label: str = SPARK_LABELS.executor_id
) -> ExecutorPod | None:
    """Convert one pod; a malformed one is logged at WARNING (with the reason) and gives None."""
    try:
        return pod_from_dict_strict(obj, executor_id_label=executor_id_label)
    except MalformedPod as error:
        logger.warning("Skipping malformed pod %s: %s", _name_of(obj), error)
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodPage:
    """One answer of a (possibly paginated) list: its pods, its resourceVersion, and the token
    that asks for the next page (None on the last page or an unpaginated list)."""

    pods: list[ExecutorPod]
    resource_version: str | None
    continue_token: str | None


def pod_page(obj: object, *, executor_id_label: str = SPARK_LABELS.executor_id) -> PodPage:
    """The pods of a parsed `PodList` (malformed ones skipped), its resourceVersion and its
    `metadata.continue`."""
    body = _mapping(obj, "pod list")
    items = body.get("items") or []
    if not isinstance(items, list):
        raise MalformedPod("items of the pod list is not a list")
    metadata = _mapping(body.get("metadata"), "list metadata")
    version = _opt_str(metadata.get("resourceVersion"), "list metadata.resourceVersion")
    token = _opt_str(metadata.get("continue"), "list metadata.continue")
    pods = [
        pod
        for item in items
        if (pod := pod_from_dict(item, executor_id_label=executor_id_label)) is not None
    ]
    return PodPage(pods=pods, resource_version=version, continue_token=token or None)


def pods_from_list(
    obj: object, *, executor_id_label: str = SPARK_LABELS.executor_id
) -> tuple[list[ExecutorPod], str | None]:
    """The pods of a parsed `PodList` (malformed ones skipped) and its resourceVersion."""
    page = pod_page(obj, executor_id_label=executor_id_label)
    return page.pods, page.resource_version


def pods_from_list_json(data: bytes) -> tuple[list[ExecutorPod], str | None]:
    """`pods_from_list` straight from the response bytes of a list call."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise MalformedPod(f"the pod list is not JSON: {error}") from None
    return pods_from_list(parsed)
