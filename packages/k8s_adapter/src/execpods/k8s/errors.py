"""API failures -> the typed errors the core understands.

The reconcilers decide from the type alone: retry next round (`ApiUnavailable`), wait
(`ApiThrottled.retry_after`), give up on this pod (`PodInvalid`, `PodAdmissionRejected`), or treat
it as done (`PodNotFound` on delete). Nothing outside this package ever sees an `ApiException`.
"""

from __future__ import annotations

import http.client
import re
from typing import Any

import orjson
import urllib3
from execpods.core import (
    AdmissionPolicyRefused,
    ApiThrottled,
    ApiUnavailable,
    ExecpodsError,
    PodAdmissionRejected,
    PodConflict,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    QuotaExceeded,
)
from kubernetes.client.exceptions import ApiException


class ResourceExpired(PodOperationError):
    """410 Gone: the resourceVersion is too old; a watcher must re-list (the core never sees it)."""

    status = 410


class ResourceVersionTooLarge(ResourceExpired):
    """504 "Too large resource version": the server has not reached the version asked for (a
    cache behind, another API server, a restore). As client-go's reflector: re-list from scratch
    (a consistent read) instead of asking again for a version that may never come."""

    status = 504


class ApiUnauthorized(PodOperationError):
    """401 Unauthorized: the API server did not accept the credential (none was sent, it expired,
    it belongs to another cluster). Nothing will succeed until the credential is fixed; the
    sidecar fails its start on it and reports NOT_SERVING while it lasts."""

    status = 401


TOO_LARGE_CAUSE = "ResourceVersionTooLarge"


def _is_too_large(code: int, status: dict[str, Any], message: str) -> bool:
    """client-go's `isTooLargeResourceVersionError`: the cause, or (older servers) the message."""
    if code != 504:
        return False
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == TOO_LARGE_CAUSE for cause in causes
    ):
        return True
    return "too large resource version" in message.lower()


class DriverPodNotFound(ExecpodsError):
    """The configured driver pod does not exist, so executors could not be owned by it."""

    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(
            f"Driver pod {name!r} was not found in namespace {namespace!r}; check "
            "spark.kubernetes.driver.pod.name and spark.kubernetes.namespace."
        )
        self.name = name
        self.namespace = namespace


_ADMISSION_WORDS = ("quota", "admission", "webhook")

_EXCEEDED_QUOTA = re.compile(
    r"exceeded quota: (?P<quota>[^,\s]+), requested: (?P<requested>\S*), "
    r"used: (?P<used>\S*), limited: (?P<limited>\S*)"
)
"""The ResourceQuota admission plugin's refusal (k8s.io/apiserver's resourcequota `CheckRequest`:
"exceeded quota: %s, requested: %s, used: %s, limited: %s", each list `name=quantity` joined by
commas, sorted), inside `pods "<name>" is forbidden: ...`."""

_QUOTA_POLICY = re.compile(
    r"failed quota: \S+: must specify|status unknown for quota: |insufficient quota to consume: "
)
"""The quota plugin's other refusals: the pod names no request or limit a quota needs, the quota
controller has not computed usage yet, or the server's configuration limits a resource only to
namespaces with a covering quota."""

_LIMIT_RANGE = re.compile(
    r"(minimum|maximum) \S+ usage per \S+ is |max limit to request ratio per \S+ is "
)
"""The LimitRanger admission plugin's refusals ("maximum cpu usage per Container is 2, but limit
is 4"): a namespace's per-container or per-pod bound."""


def _resource_list(text: str) -> dict[str, str]:
    """`pods=1,requests.cpu=500m` as {"pods": "1", "requests.cpu": "500m"}."""
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {name: value for name, _, value in pairs}


def admission_refusal(message: str, text: str) -> PodAdmissionRejected | None:
    """The capacity or namespace-policy error a 403's message stands for, or None (`text` is the
    message to keep: what was attempted and the API's words)."""
    exceeded = _EXCEEDED_QUOTA.search(message)
    if exceeded is not None:
        return QuotaExceeded(
            text,
            quota=exceeded["quota"],
            requested=_resource_list(exceeded["requested"]),
            used=_resource_list(exceeded["used"]),
            limited=_resource_list(exceeded["limited"]),
        )
    if _QUOTA_POLICY.search(message) is not None:
        return AdmissionPolicyRefused(text, policy="ResourceQuota")
    if _LIMIT_RANGE.search(message) is not None:
        return AdmissionPolicyRefused(text, policy="LimitRange")
    return None


def _status_body(body: object) -> dict[str, Any]:
    """The v1 Status of an error response, or {} when the body is not one."""
    if not body:
        return {}
    try:
        parsed = orjson.loads(body if isinstance(body, bytes | str) else str(body))
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _retry_after(headers: object, status: dict[str, Any]) -> float | None:
    """Retry-After (seconds) from the header, else from the Status details."""
    raw: object = None
    if headers is not None and hasattr(headers, "get"):
        raw = headers.get("Retry-After")
    if raw is None:
        details = status.get("details")
        if isinstance(details, dict):
            raw = details.get("retryAfterSeconds")
    try:
        return None if raw is None else max(0.0, float(str(raw)))
    except ValueError:
        return None


def error_from_status(
    code: int, message: str, *, what: str, retry_after: float | None = None
) -> PodOperationError:
    """The typed error for an HTTP status code and the API's message."""
    text = f"{what} failed: {code} {message}".strip()
    lowered = message.lower()
    if code == 404:
        return PodNotFound(text)
    if code == 409:
        return PodConflict(text)
    if code == 410:
        return ResourceExpired(text)
    if code == 401:
        return ApiUnauthorized(text)
    if code == 403:
        refusal = admission_refusal(message, text)
        if refusal is not None:
            return refusal
        if any(word in lowered for word in _ADMISSION_WORDS):
            return PodAdmissionRejected(text, status=403)
        return PodForbidden(text)
    if code == 422:
        if "exceeded quota" in lowered:
            return PodAdmissionRejected(text, status=422)
        return PodInvalid(text)
    if code == 429:
        return ApiThrottled(text, retry_after=retry_after)
    if code >= 500 or code == 0:
        return ApiUnavailable(text, status=code or None)
    return PodOperationError(text, status=code)


def map_api_exception(error: ApiException, *, what: str) -> PodOperationError:
    """The typed error for an `ApiException` the client raised."""
    status = _status_body(getattr(error, "body", None))
    code = int(getattr(error, "status", 0) or 0)
    message = status.get("message")
    if not isinstance(message, str):
        message = str(getattr(error, "reason", "") or "")
    if _is_too_large(code, status, message):
        return ResourceVersionTooLarge(f"{what} failed: {code} {message}")
    return error_from_status(
        code, message, what=what, retry_after=_retry_after(error.headers, status)
    )


def error_of_answer(
    code: int, body: bytes, *, retry_after: str | None, what: str
) -> PodOperationError:
    """The typed error for an error answer the create transport read (status, body, header)."""
    status = _status_body(body)
    message = status.get("message")
    if not isinstance(message, str):
        message = body[:200].decode("utf-8", "replace")
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return error_from_status(code, message, what=what, retry_after=_retry_after(headers, status))


def map_error(error: BaseException, *, what: str) -> PodOperationError | None:
    """Any failure of a call -> a typed error; None when it is not an API/transport failure."""
    if isinstance(error, PodOperationError):
        return error
    if isinstance(error, ApiException):
        return map_api_exception(error, what=what)
    if isinstance(error, urllib3.exceptions.HTTPError | http.client.HTTPException | OSError):
        return ApiUnavailable(f"{what} failed: {type(error).__name__}: {error}")
    return None


def status_event_error(obj: object, *, what: str) -> PodOperationError:
    """The typed error for a watch ERROR event, whose object is a v1 Status."""
    status = obj if isinstance(obj, dict) else {}
    code = status.get("code")
    message = status.get("message")
    if isinstance(code, int) and isinstance(message, str) and _is_too_large(code, status, message):
        return ResourceVersionTooLarge(f"{what} failed: {code} {message}")
    return error_from_status(
        code if isinstance(code, int) else 500,
        message if isinstance(message, str) else repr(obj),
        what=what,
        retry_after=_retry_after(None, status),
    )
