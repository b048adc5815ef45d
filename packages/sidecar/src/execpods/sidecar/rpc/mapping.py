"""The contract's messages mapped onto the core's values, and the core's errors onto statuses.

Each function either returns the core's value for a field or raises `InvalidArgument` (a
`ValueError`) naming the field and the value; the servicer answers INVALID_ARGUMENT with it.
RequestTotal's mapping is in `profiles.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import grpc
from execpods.core import (
    INT64_MAX,
    ApiThrottled,
    ApiUnavailable,
    PodAdmissionRejected,
    PodForbidden,
    PodInvalid,
    PodNotFound,
    PodOperationError,
    Position,
)
from execpods.k8s import ApiHeldBack
from execpods.v1 import allocator_pb2 as pb

_DECIMAL = re.compile(r"[0-9]+")


MESSAGE_LIMIT = 1000
"""Most characters of an error's text that go into a gRPC status or a log line."""


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text`, cut to `limit` characters with a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class InvalidArgument(ValueError):
    """A request field is invalid; the message names the field and the value."""


def parse_executor_ids(values: Iterable[str]) -> list[int]:
    """Executor ids as decimal integers ("7"); raises `InvalidArgument` on the first bad one."""
    ids: list[int] = []
    for index, text in enumerate(values):
        # The length first: int() refuses (ValueError) strings of over 4,300 digits.
        if (
            _DECIMAL.fullmatch(text) is None
            or len(text.lstrip("0")) > len(str(INT64_MAX))
            or int(text.lstrip("0") or "0") > INT64_MAX
        ):
            raise InvalidArgument(
                f"executor_ids[{index}]={clip(repr(text), 100)} is not an executor id (a "
                'decimal integer such as "7" up to 2^63-1); nothing was deleted'
            )
        ids.append(int(text))
    return ids


def check_driver_ids(field: str, values: Iterable[int]) -> list[int]:
    ids = list(values)
    for index, value in enumerate(ids):
        if value < 1:
            raise InvalidArgument(
                f"{field}[{index}]={value} is not an executor id (ids start at 1); "
                "nothing was changed"
            )
    return ids


def status_of(error: PodOperationError) -> grpc.StatusCode:
    """The gRPC status code that best tells a client what a failed pod operation means.

    A call the back-off gate held after 5xx answers or refused connections is an outage
    (UNAVAILABLE, which drivers retry), not a quota (RESOURCE_EXHAUSTED, for 429s)."""
    if isinstance(error, ApiHeldBack) and error.outage:
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, ApiThrottled):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(error, ApiUnavailable):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(error, PodForbidden):
        return grpc.StatusCode.PERMISSION_DENIED
    if isinstance(error, PodNotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, PodInvalid | PodAdmissionRejected):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


def stream_interval(request: pb.StreamSnapshotsRequest, *, default: float, longest: float) -> float:
    """A stream's batch interval in seconds: the request's, else `default`; at most `longest`
    (execpods.sidecar.stream.maxBatchInterval)."""
    longest_ms = round(longest * 1000)
    if not 0 <= request.batch_interval_ms <= longest_ms:
        raise InvalidArgument(
            f"batch_interval_ms={request.batch_interval_ms} is invalid: it must be between 0 "
            f"(the server's default) and {longest_ms} (execpods.sidecar.stream.maxBatchInterval)"
        )
    return request.batch_interval_ms / 1000 if request.batch_interval_ms else default


def resume_position(request: pb.StreamSnapshotsRequest) -> Position | None:
    """Where a stream resumes (None: a new stream)."""
    if not request.HasField("resume_from"):
        return None
    return Position(
        incarnation=request.resume_from.incarnation, sequence=request.resume_from.sequence
    )
