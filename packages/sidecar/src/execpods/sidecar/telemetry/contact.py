"""Two facts about the API server that the sidecar must say plainly: it never answered, or it
refuses the credential.

- `ApiContact` follows every API call until the server first answers. The first call that could
  not reach it logs one line naming what to check (`--api-url`, the kubeconfig and its context,
  or the in-cluster service's variables), instead of leaving the user to infer it from retries;
  a later answer logs that the server answered. `never_answered()` gives the reason to stop
  retrying at shutdown: no executor pod can have been created by a sidecar whose server never
  answered, and no delete can reach it either.
- `CredentialsWatch` turns a 401 into the one mechanism by which the sidecar says allocation
  cannot progress (`execpods.core.progress`, reason `CredentialsRefused`): gRPC health is
  NOT_SERVING and every stream hears a notice while the API refuses the credential, naming
  where the credential came from; the first answer that is not a 401 resumes.
"""

from __future__ import annotations

import logging
import threading

from execpods.core import CREDENTIALS_REFUSED, ProgressMonitor
from execpods.k8s import ApiCall, ClusterAccess
from execpods.sidecar.telemetry.hub import TelemetryListener

logger = logging.getLogger(__name__)

UNAUTHORIZED = 401

__all__ = ["ApiContact", "CredentialsWatch", "refused_credential"]


def refused_credential(access: ClusterAccess, detail: str) -> str:
    """The sentence for a 401: which server, which credential, what to do."""
    said = f" The API said: {detail}" if detail else ""
    return (
        f"the Kubernetes API server at {access.server} refuses the credential (401 "
        f"Unauthorized): {access.credential}. Fix or renew it, or point the sidecar at the "
        f"cluster it belongs to ({access.via}).{said}"
    )


class ApiContact(TelemetryListener):
    """Whether the API server has ever answered; one line when it has not (see the module)."""

    def __init__(self, access: ClusterAccess) -> None:
        self._access = access
        self._lock = threading.Lock()
        self._answered = False
        self._warned = False
        self._failures = 0
        self._first_failure = ""

    @property
    def answered(self) -> bool:
        return self._answered

    def api_call(self, call: ApiCall) -> None:
        with self._lock:
            if self._answered:
                return
            if call.answered:
                self._answered = True
                warned = self._warned
            else:
                self._failures += 1
                if self._warned:
                    return
                self._warned = True
                self._first_failure = call.detail or call.outcome
                warned = False
        access = self._access
        if call.answered:
            if warned:
                logger.warning("The Kubernetes API server at %s answered.", access.server)
            return
        logger.warning(
            "The Kubernetes API server at %s has not answered (%s): check %s. Retrying; gRPC "
            "health is NOT_SERVING until it answers.",
            access.server,
            self._first_failure,
            access.via,
            extra={"reason": "ApiUnreachable"},
        )

    def never_answered(self) -> str | None:
        """Why stopping need not retry: the server never answered (None once it has)."""
        with self._lock:
            if self._answered or not self._failures:
                return None
            first = self._first_failure
        return f"the Kubernetes API server at {self._access.server} never answered ({first})"


class CredentialsWatch(TelemetryListener):
    """A 401 stalls allocation (`CredentialsRefused`) until an answer that is not a 401."""

    def __init__(self, progress: ProgressMonitor, access: ClusterAccess) -> None:
        self._progress = progress
        self._access = access

    def api_call(self, call: ApiCall) -> None:
        if call.code == UNAUTHORIZED:
            self._progress.stall(CREDENTIALS_REFUSED, refused_credential(self._access, call.detail))
        elif call.answered:
            self._progress.resume(CREDENTIALS_REFUSED)
