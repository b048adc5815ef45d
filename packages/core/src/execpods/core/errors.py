"""Errors the core understands.

The adapter maps every failure of the Kubernetes API onto these, so the reconcilers can decide
what to do (retry next round, give up on this batch, wait) without knowing any client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


class ExecpodsError(Exception):
    """Base of every error execpods raises on purpose."""


class SettingsError(ExecpodsError, ValueError):
    """A setting has an invalid value; the message names the property and the rule."""


class AllocationStopped(ExecpodsError, ValueError):
    """A request for executors after the driver stopped the application's allocation for good
    (`ExecutorPodsBackend.stop_allocating`)."""


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


class QuotaExceeded(PodAdmissionRejected):
    """403 from the ResourceQuota admission plugin: the namespace's quota admits no more of what
    the pod asks for. Capacity, not a failure: the executor did not fail, the namespace is full.

    `requested`, `used` and `limited` are the API's figures for the exhausted resources only
    (`{"pods": "1"}`, `{"requests.cpu": "6"}`), as its message lists them.
    """

    status = 403

    def __init__(
        self,
        message: str,
        *,
        quota: str,
        requested: Mapping[str, str],
        used: Mapping[str, str],
        limited: Mapping[str, str],
    ) -> None:
        super().__init__(message, status=403)
        self.quota = quota
        self.requested = MappingProxyType(dict(requested))
        self.used = MappingProxyType(dict(used))
        self.limited = MappingProxyType(dict(limited))


class AdmissionPolicyRefused(PodAdmissionRejected):
    """403 from a namespace's admission policy that is no executor failure: a LimitRange's bound,
    a quota the pod does not satisfy (it must name requests or limits), a quota whose usage is
    not computed yet. `policy` names the kind of object (`LimitRange`, `ResourceQuota`)."""

    status = 403

    def __init__(self, message: str, *, policy: str) -> None:
        super().__init__(message, status=403)
        self.policy = policy


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


class LedgerMarkInvalid(PodOperationError):
    """The id ledger holds something that is no executor id: not a plain decimal, or beyond
    `MAX_EXECUTOR_ID` (Spark's executor ids are Java ints). A typo, or a hand that should not
    have written it: the value is not believed (`ids.py` says so and goes by the pods), and the
    next write replaces it."""

    MAX_EXECUTOR_ID = 2**31 - 1
    """The highest executor id there can be: Spark counts them in an `AtomicInteger`."""

    def __init__(self, message: str, *, raw: str, where: str) -> None:
        super().__init__(message)
        self.raw = raw
        self.where = where

    @classmethod
    def parse(cls, raw: object, *, where: str) -> int:
        """The mark `raw` stands for (0 when absent), or raise this error naming `where`."""
        if raw is None:
            return 0
        text = str(raw)
        if (
            isinstance(raw, str)
            and text.isascii()
            and text.isdigit()
            and len(text) <= len(str(cls.MAX_EXECUTOR_ID))
            and int(text) <= cls.MAX_EXECUTOR_ID
        ):
            return int(text)
        raise cls(
            f"{where} holds {text[:40]!r}, which is no executor id (a decimal up to "
            f"{cls.MAX_EXECUTOR_ID}): it is not believed; ids go by the pods and the next write "
            "replaces it",
            raw=text[:40],
            where=where,
        )
