"""Errors the core understands.

The adapter maps every failure of the Kubernetes API onto these, so the reconcilers can decide
what to do (retry next round, give up on this batch, wait) without knowing any client library.
"""

from __future__ import annotations


class ExecpodsError(Exception):
    """Base of every error execpods raises on purpose."""


class SettingsError(ExecpodsError, ValueError):
    """A setting has an invalid value; the message names the property and the rule."""


class PodOperationError(ExecpodsError):
    """A pod operation failed. `status` is the HTTP status when the API answered."""

    status: int | None = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def outcome_unknown(self) -> bool:
        """True when the request may have taken effect even though it failed (a lost answer)."""
        return False


class PodConflict(PodOperationError):
    """409: the pod already exists or was changed concurrently."""

    status = 409


class PodNotFound(PodOperationError):
    """404: no such pod."""

    status = 404


class PodForbidden(PodOperationError):
    """403 from authorization: this identity may not do that."""

    status = 403


class PodAdmissionRejected(PodOperationError):
    """An admission controller refused the request (a quota exceeded, a policy)."""


class PodInvalid(PodOperationError):
    """422: the API found the pod itself invalid; retrying the same pod will not help."""

    status = 422


class ApiUnavailable(PodOperationError):
    """The API could not be reached or answered 5xx; the request may or may not have applied."""

    @property
    def outcome_unknown(self) -> bool:
        return True


class ApiThrottled(PodOperationError):
    """429: the API asks us to slow down; `retry_after` is its hint in seconds, if it gave one."""

    status = 429

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message, status=429)
        self.retry_after = retry_after
