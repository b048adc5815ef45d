"""API errors and the v1 Status bodies that carry them.

Every failure the simulator reports over HTTP is an :class:`ApiError`, so that each one reaches the
client as a proper Status (``code``, ``reason``, ``message``, ``details``), which is what the
official clients map onto their exception classes.
"""

from __future__ import annotations

from execpods.kubesim.bodies import Status, StatusCause, StatusDetails

__all__ = ["ApiError", "status_body"]


class ApiError(Exception):
    """An error with an HTTP code and a Kubernetes ``reason`` (NotFound, Conflict, Gone, ...)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str | None = None,
        causes: list[StatusCause] | None = None,
        retry_after: int | None = None,
        headers: dict[str, str] | None = None,
        kind: str = "pods",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.reason = reason
        self.message = message
        self.name = name
        self.causes = causes
        self.retry_after = retry_after
        self.headers = dict(headers or {})
        if retry_after is not None:
            self.headers["Retry-After"] = str(retry_after)

    def status(self) -> Status:
        details: StatusDetails = {"kind": self.kind}
        if self.name is not None:
            details["name"] = self.name
        if self.causes:
            details["causes"] = self.causes
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        return status_body(self.code, self.reason, self.message, details)

    @classmethod
    def not_found(cls, name: str, kind: str = "pods") -> ApiError:
        return cls(404, "NotFound", f'{kind} "{name}" not found', name=name, kind=kind)

    @classmethod
    def gone(cls, message: str = "too old resource version") -> ApiError:
        return cls(410, "Expired", message)

    @classmethod
    def too_large_resource_version(cls, requested: int, current: int) -> ApiError:
        """What kube-apiserver answers for a resourceVersion it has not reached: 504 ``Timeout``
        with the cause ``ResourceVersionTooLarge`` (client-go's reflector re-lists from scratch
        on it) and a retry after 1 s, as its watch cache does after waiting 3 s to catch up."""
        return cls(
            504,
            "Timeout",
            f"Timeout: Too large resource version: {requested}, current: {current}",
            causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            retry_after=1,
        )

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def conflict(cls, name: str, message: str) -> ApiError:
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{name}": {message}',
            name=name,
        )

    @classmethod
    def invalid(cls, name: str, causes: list[StatusCause]) -> ApiError:
        text = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        return cls(422, "Invalid", f'Pod "{name}" is invalid: {text}', name=name, causes=causes)


def status_body(code: int, reason: str, message: str, details: StatusDetails) -> Status:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }
