"""Fault injection and RBAC for the simulator: :class:`FaultControls`.

Split out of :mod:`execpods.kubesim.api` when that module had grown past 600 lines. These are
the verbs a test uses to make the API server misbehave (410s, dropped watches, 429s and 5xx,
latency, refused creates and deletes, forbidden verbs) and to enforce RBAC;
:class:`~execpods.kubesim.api.KubeSim` inherits them and builds the state they act on, declared
here so the checker sees what they use.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping

from execpods.kubesim.apf import ApfConfig, FairQueues
from execpods.kubesim.clock import Clock, Timer
from execpods.kubesim.cluster import Cluster, ClusterConfig
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import Faults
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.resources import PodApi
from execpods.kubesim.store import PodStore

__all__ = ["FaultControls"]


class FaultControls:
    """`KubeSim`'s faults and RBAC: what the API server refuses, delays or cuts."""

    config: ClusterConfig
    apf: FairQueues
    clock: Clock
    store: PodStore
    cluster: Cluster
    faults: Faults
    api: PodApi
    object_apis: dict[str, ObjectApi]
    _lifecycle: threading.RLock
    _dropper: Timer | None

    # -- faults --------------------------------------------------------------------------------

    def expire_next(self, count: int = 1, *, seconds: float | None = None) -> None:
        """The next ``count`` list or watch requests get 410 Gone; with ``seconds``, every list
        and watch for that long of clock time (a storm of 410s)."""
        self.faults.expire_next(count, seconds=seconds)

    def expire_watches(self) -> int:
        """Send an ERROR 410 to every open watch and end it (a 410 mid-watch)."""
        return self.store.close_watchers(error=ApiError.gone().status())

    def drop_watches(self, *, abrupt: bool = True) -> int:
        """End every open watch: ``abrupt`` cuts the connection, otherwise the stream ends."""
        return self.store.close_watchers(abrupt=abrupt)

    def fail_requests(
        self, code: int = 503, *, seconds: float | None = None, count: int | None = None
    ) -> None:
        """Answer API requests with 500 or 503 for a period of clock time or a count."""
        self.faults.fail_requests(code, seconds=seconds, count=count)

    def throttle(
        self, count: int = 1, *, retry_after: int = 1, seconds: float | None = None
    ) -> None:
        """Answer the next ``count`` API requests with 429 and ``Retry-After``; with
        ``seconds``, every API request for that long of clock time."""
        self.faults.throttle(count, retry_after=retry_after, seconds=seconds)

    def drop_watches_every(self, seconds: float, *, abrupt: bool = True) -> None:
        """Cut every open watch every ``seconds`` of clock time from now on (0 stops it), as a
        flaky load balancer does. On the virtual clock the drops are timers like the kubelet's,
        so ``run_until_idle`` runs until its ``max_seconds`` while this is on."""
        with self._lifecycle:
            self._stop_dropping()
            if seconds <= 0:
                return

            def tick() -> None:
                self.store.close_watchers(abrupt=abrupt)
                with self._lifecycle:
                    if self._dropper is timer:
                        self._arm_dropper(seconds, tick)

            timer = self._arm_dropper(seconds, tick)

    def _arm_dropper(self, seconds: float, tick: Callable[[], None]) -> Timer:
        self._dropper = self.clock.call_later(seconds, tick)
        return self._dropper

    def _stop_dropping(self) -> None:
        dropper, self._dropper = self._dropper, None
        if dropper is not None:
            dropper.cancel()

    def set_failures(self, rate: float, *, after: float = 10.0) -> None:
        """From now on, a share ``rate`` of the pods that start fail (exit 1) after an
        exponentially distributed run time with mean ``after`` seconds (0: as they start)."""
        self.config = dataclasses.replace(self.config, failure_rate=rate, failure_after=after)
        self.cluster.config = self.config

    def set_latency(self, seconds: float) -> None:
        """Add this much (real) time to every API request."""
        self.faults.set_latency(seconds)

    def reject_creates(self, code: int = 403, *, count: int = 1, message: str = "") -> None:
        """Fail the next ``count`` creates in admission: 403 forbidden or 422 quota exceeded."""
        self.faults.reject_creates(code, count=count, message=message)

    def forbid(self, plural: str, *verbs: str) -> None:
        """Answer `verbs` (get, create, patch) on `plural` (configmaps...) with 403 from now on,
        as when a Role loses them; no verbs: allow all again. Pods have RBAC (`enable_rbac`)."""
        self.object_apis[plural].forbidden = frozenset(verbs)

    def configure_apf(self, config: ApfConfig) -> None:
        """Set API Priority and Fairness: seats, queues, other tenants (``seats=0``: off)."""
        self.apf.configure(config)

    def deny_deletes(
        self,
        labels: Mapping[str, str],
        *,
        code: int = 403,
        message: str = "",
        count: int | None = None,
    ) -> None:
        """Deny deletes of the pods whose labels include ``labels``, as an admission webhook
        (403) or a policy (400, 422) would, until the faults are cleared (or ``count`` times)."""
        self.faults.deny_deletes(labels, code=code, message=message, count=count)

    def clear_faults(self) -> None:
        """Disarm every fault, the periodic watch drops and forbidden verbs included."""
        self.faults.clear()
        for api in self.object_apis.values():
            api.forbidden = frozenset()
        with self._lifecycle:
            self._stop_dropping()

    # -- RBAC ----------------------------------------------------------------------------------

    def enable_rbac(self, manifests: Iterable[Mapping[str, object]]) -> None:
        """Enforce RBAC from these manifests (parsed ServiceAccounts, Roles, ClusterRoles,
        RoleBindings, ClusterRoleBindings, or a List of them), replacing any earlier policy.

        Every API request must then carry a bearer token (:meth:`token_for`); a request no rule
        allows gets kube-apiserver's 403. The admin token (:attr:`admin_token`, in the kubeconfig
        the simulator writes) is never refused; in-process calls are not checked.
        """
        self.api.authorizer.enable(manifests)

    def disable_rbac(self) -> None:
        self.api.authorizer.disable()

    def token_for(self, name: str, namespace: str = "default", *, token: str | None = None) -> str:
        """A bearer token that authenticates as the service account ``namespace/name``
        (``token`` chooses the string, as a CLI or a mounted secret would)."""
        return self.api.authorizer.token_for(namespace, name, token)

    @property
    def admin_token(self) -> str:
        return self.api.authorizer.admin_token
