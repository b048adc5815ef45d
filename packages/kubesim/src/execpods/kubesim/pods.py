"""Pod admission: validation (422 with causes), defaulting, names and timestamps.

Kept apart from the HTTP layer so the in-process API and the server admit pods the same way.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable

from execpods.kubesim.bodies import JsonValue, StatusCause
from execpods.kubesim.defaults import admit_pod_spec, default_pod_spec
from execpods.kubesim.errors import ApiError
from execpods.kubesim.quantities import check_resources
from execpods.kubesim.selectors import valid_label_key, valid_label_value
from execpods.kubesim.store import Obj

__all__ = [
    "SERVER_META",
    "TERMINAL_PHASES",
    "admit_new_pod",
    "default_spec",
    "rfc3339",
    "valid_namespace_name",
    "validate_pod",
    "validate_status",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def valid_namespace_name(name: str) -> bool:
    """A namespace's name is a DNS-1123 label: at most 63 lowercase alphanumerics or '-'."""
    return len(name) <= 63 and _DNS_LABEL.match(name) is not None


def rfc3339(t: float) -> str:
    """RFC 3339 UTC with a ``Z``, to the second, as the API server writes timestamps."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _cause(field: str, message: str, reason: str = "FieldValueInvalid") -> StatusCause:
    return {"reason": reason, "message": message, "field": field}


def validate_pod(pod: Obj) -> None:
    """Raise 422 (with one cause per problem) if ``pod`` is not a valid pod."""
    causes: list[StatusCause] = []
    meta = pod.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        causes.append(
            _cause("metadata.name", "name or generateName is required", "FieldValueRequired")
        )
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        causes.append(
            _cause(
                "metadata.name",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
                "case alphanumeric characters, '-' or '.'",
            )
        )
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(_cause("metadata.labels", "must be a map of strings"))
    else:
        for k, v in labels.items():
            if not valid_label_key(k):
                causes.append(_cause("metadata.labels", f"Invalid value: {k!r}: bad label key"))
            if not isinstance(v, str) or not valid_label_value(v):
                causes.append(_cause(f"metadata.labels.{k}", f"Invalid value: {v!r}"))
    causes.extend(_metadata_shape(meta))
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not containers or not isinstance(containers, list):
        causes.append(_cause("spec.containers", "Required value", "FieldValueRequired"))
    else:
        seen: set[str] = set()
        for i, c in enumerate(containers):
            if isinstance(c, dict):
                causes.extend(check_resources(c, f"spec.containers[{i}]"))
            cname = c.get("name") if isinstance(c, dict) else None
            if not cname or not isinstance(cname, str) or not _DNS_LABEL.match(cname):
                causes.append(_cause(f"spec.containers[{i}].name", f"Invalid value: {cname!r}"))
            elif cname in seen:
                causes.append(_cause(f"spec.containers[{i}].name", f"Duplicate value: {cname!r}"))
            else:
                seen.add(cname)
            if not isinstance(c, dict) or not c.get("image"):
                causes.append(
                    _cause(f"spec.containers[{i}].image", "Required value", "FieldValueRequired")
                )
            causes.extend(_privilege(c, f"spec.containers[{i}]"))
    if isinstance(spec, dict):
        policy = spec.get("restartPolicy", "Always")
        if policy not in ("Always", "OnFailure", "Never"):
            causes.append(
                _cause(
                    "spec.restartPolicy", f"Unsupported value: {policy!r}", "FieldValueNotSupported"
                )
            )
    if causes:
        raise ApiError.invalid(name or meta.get("generateName") or "", causes)


def _privilege(container: object, path: str) -> list[StatusCause]:
    """A privileged container always may escalate: kube-apiserver refuses the contradiction
    (found by running the sidecar against a real API server)."""
    context = container.get("securityContext") if isinstance(container, dict) else None
    if (
        isinstance(context, dict)
        and context.get("privileged") is True
        and context.get("allowPrivilegeEscalation") is False
    ):
        message = "Invalid value: cannot set `allowPrivilegeEscalation` to false and "
        return [_cause(f"{path}.securityContext", message + "`privileged` to true")]
    return []


def _metadata_shape(meta: Obj) -> list[StatusCause]:
    """Annotations must be a map of strings and finalizers a list of strings: the simulated
    cluster reads both, so a malformed value is refused here rather than breaking it later."""
    causes: list[StatusCause] = []
    annotations = meta.get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict)
        or not all(isinstance(v, str) for v in annotations.values())
    ):
        causes.append(_cause("metadata.annotations", "must be a map of strings"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        causes.append(_cause("metadata.finalizers", "must be a list of strings"))
    return causes


def validate_status(name: str, status: object) -> None:
    """Raise 422 if a ``/status`` write's status is not shaped like a pod status.

    The kubelet simulation reads the stored status (phase, conditions, container statuses), so
    a status of the wrong shape must be refused at the API rather than break it afterwards.
    """
    causes: list[StatusCause] = []
    if not isinstance(status, dict):
        causes.append(_cause("status", "must be an object"))
    else:
        if not isinstance(status.get("phase", ""), str):
            causes.append(_cause("status.phase", "must be a string"))
        for field in (
            "conditions",
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ):
            value = status.get(field)
            if value is not None and (
                not isinstance(value, list) or not all(isinstance(v, dict) for v in value)
            ):
                causes.append(_cause(f"status.{field}", "must be a list of objects"))
    if causes:
        raise ApiError.invalid(name, causes)


def default_spec(spec: Obj) -> Obj:
    """Fill in the defaults the API server sets (`defaults.py`), so that updates compare like
    with like and clients read what a cluster would store."""
    return default_pod_spec(spec)


def admit_new_pod(
    body: JsonValue,
    namespace: str,
    *,
    now: float,
    rng: random.Random,
    name_taken: Callable[[str], bool],
) -> Obj:
    """Turn a create request body into a stored pod: check, name, default, reset status."""
    if not isinstance(body, dict):
        raise ApiError.bad_request("the request body must be a JSON object")
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if kind not in (None, "Pod") or api_version not in (None, "v1"):
        raise ApiError.bad_request(f"the API version in the data ({api_version}) does not match")
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    body_ns = meta.get("namespace")
    if body_ns not in (None, "", namespace):
        raise ApiError.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    name = meta.get("name") or ""
    generate = meta.get("generateName") or ""
    if not isinstance(name, str) or not isinstance(generate, str):
        raise ApiError.bad_request(
            "metadata.name and metadata.generateName must be strings in the request body"
        )
    if not name and generate:
        for _ in range(100):
            candidate = generate + "".join(rng.choice(_SUFFIX_CHARS) for _ in range(5))
            if not name_taken(candidate):
                name = candidate
                break
    pod: Obj = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {k: v for k, v in meta.items() if k not in SERVER_META},
        "spec": dict(given) if isinstance(given := body.get("spec"), dict) else given,
    }
    pod["metadata"]["name"] = name
    validate_pod(pod)
    spec = admit_pod_spec(default_spec(pod["spec"]))
    pod["metadata"].update(
        namespace=namespace,
        uid=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        creationTimestamp=rfc3339(now),
    )
    pod["status"] = {"phase": "Pending", "qosClass": _qos(spec["containers"])}
    return pod


SERVER_META = frozenset(
    {
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "selfLink",
        "generation",
        "managedFields",
    }
)


def _qos(containers: list[Obj]) -> str:
    requests_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            requests_any = True
        if not limits or any(
            requests.get(k, limits.get(k)) != limits.get(k) for k in ("cpu", "memory")
        ):
            guaranteed = False
        if "cpu" not in limits or "memory" not in limits:
            guaranteed = False
    if guaranteed and requests_any:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def qos_class(containers: list[Obj]) -> str:
    """The pod's QoS class from its containers' resources (Guaranteed, Burstable, BestEffort)."""
    return _qos(containers)
