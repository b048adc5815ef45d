"""ResourceQuota: the namespace's hard limits, their usage, and the admission that enforces them.

A real API server runs the ResourceQuota admission plugin on every pod create: for each quota of
the namespace that tracks a resource the pod uses, the pod's usage is added to the quota's
`status.used`, and a create that would take any tracked resource beyond `status.hard` is refused
with 403 Forbidden and the plugin's exact words (k8s.io/apiserver, `resourcequota.CheckRequest`):

    pods "spark-exec-7" is forbidden: exceeded quota: compute, requested: pods=1,
    used: pods=6, limited: pods=6

(the lists name only the exhausted resources, `name=quantity` sorted and joined by commas, each
quantity in the API's canonical form). A quota that tracks `cpu` or `memory` (requests or limits)
also refuses a pod one of whose containers does not name that resource ("failed quota: compute:
must specify limits.cpu for: main"). An admitted pod is charged to `status.used` at once; the
quota controller gives it back when the pod reaches Succeeded or Failed or is deleted, and
recomputes the usage when a quota is created or its `spec.hard` changes (a raised quota admits
more at once).

Modelled: the resources `pods`, `count/pods`, `cpu`, `memory`, `ephemeral-storage` and their
`requests.`/`limits.` forms, `requests.<extended resource>`, and the scopes `BestEffort`,
`NotBestEffort`, `Terminating` and `NotTerminating`. A quota with any other scope (PriorityClass,
CrossNamespacePodAffinity) is not enforced; nor are quotas on objects other than pods.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

from execpods.kubesim.errors import ApiError
from execpods.kubesim.objects import ObjectApi
from execpods.kubesim.quantities import parse_quantity
from execpods.kubesim.store import Event, Obj, PodStore

__all__ = ["Quantity", "ResourceQuotas", "pod_usage"]

_TERMINAL = frozenset({"Succeeded", "Failed"})
_COMPUTE = ("cpu", "memory", "ephemeral-storage")
_POD_RESOURCES = frozenset(
    {
        "count/pods",
        "pods",
        *_COMPUTE,
        *(f"requests.{r}" for r in _COMPUTE),
        *(f"limits.{r}" for r in _COMPUTE),
    }
)
_MUST_SPECIFY = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
"""The API's "backward compatibility requirement": a quota on these makes every container name
them."""
_SIMPLE_SCOPES = frozenset({"BestEffort", "NotBestEffort", "Terminating", "NotTerminating"})
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


@dataclass(frozen=True, slots=True)
class Quantity:
    """A resource quantity and the format it prints in (apimachinery's `Quantity`: a sum keeps
    the format of its first non-zero term)."""

    value: Decimal
    binary: bool = False

    @classmethod
    def parse(cls, text: object) -> Quantity:
        raw = str(text).strip()
        return cls(parse_quantity(raw), binary=raw.endswith("i"))

    def __add__(self, other: Quantity) -> Quantity:
        binary = other.binary if self.value == 0 else self.binary
        return Quantity(self.value + other.value, binary)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.binary)

    def __str__(self) -> str:
        """The canonical form (`Quantity.String()`): the largest suffix that keeps the number
        whole; binary only for whole byte counts from 1Ki, decimal otherwise."""
        value = self.value
        if self.binary and abs(value) >= 1024 and value == value.to_integral_value():
            whole, step = int(value), 0
            while step < len(_BINARY) - 1 and whole % 1024 == 0:
                whole //= 1024
                step += 1
            return f"{whole}{_BINARY[step]}"
        nanos = (value * Decimal(10**9)).to_integral_value(rounding=ROUND_CEILING)
        if nanos == 0:
            return "0"
        exponent = -9
        while exponent < 18 and nanos % 1000 == 0:
            nanos //= 1000
            exponent += 3
        return f"{int(nanos)}{_DECIMAL[exponent]}"


Usage = dict[str, Quantity]


def _add(into: Usage, more: Usage) -> Usage:
    total = dict(into)
    for name, quantity in more.items():
        total[name] = total[name] + quantity if name in total else quantity
    return total


def _container_usage(container: Obj) -> tuple[Usage, Usage]:
    """A container's requests and limits (requests default to limits, as the API defaults)."""
    resources = container.get("resources") or {}
    limits = {k: Quantity.parse(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {k: Quantity.parse(v) for k, v in (resources.get("requests") or {}).items()}
    for name, limit in limits.items():
        requests.setdefault(name, limit)
    return requests, limits


def _compute_usage(requests: Usage, limits: Usage) -> Usage:
    """The quota resources that requests and limits stand for (the pod evaluator's helper)."""
    usage: Usage = {"pods": Quantity(Decimal(1))}
    for name in _COMPUTE:
        if name in requests:
            usage[name] = requests[name]
            usage[f"requests.{name}"] = requests[name]
        if name in limits:
            usage[f"limits.{name}"] = limits[name]
    for name, request in requests.items():
        if name.startswith("hugepages-"):
            usage[name] = request
            usage[f"requests.{name}"] = request
        elif "/" in name:
            usage[f"requests.{name}"] = request
    return usage


def _pod_totals(pod: Obj) -> tuple[Usage, Usage]:
    """The pod's requests and limits: its containers' sums, at least each init container's."""
    spec = pod.get("spec") or {}
    requests: Usage = {}
    limits: Usage = {}
    for container in spec.get("containers") or []:
        r, lim = _container_usage(container)
        requests, limits = _add(requests, r), _add(limits, lim)
    for container in spec.get("initContainers") or []:
        r, lim = _container_usage(container)
        for into, more in ((requests, r), (limits, lim)):
            for name, quantity in more.items():
                if name not in into or quantity.value > into[name].value:
                    into[name] = quantity
    return requests, limits


def pod_usage(pod: Obj) -> Usage:
    """What the pod is charged in quota: its object count always; its compute resources and the
    `pods` count while it is not Succeeded or Failed."""
    usage: Usage = {"count/pods": Quantity(Decimal(1))}
    if (pod.get("status") or {}).get("phase") in _TERMINAL:
        return usage
    return {**usage, **_compute_usage(*_pod_totals(pod))}


def _tracked(name: str) -> bool:
    return name in _POD_RESOURCES or name.startswith(("hugepages-", "requests."))


def _scopes(quota: Obj) -> list[str] | None:
    """The quota's scopes, or None when one of them is not modelled."""
    spec = quota.get("spec") or {}
    scopes = list(spec.get("scopes") or [])
    selector = spec.get("scopeSelector") or {}
    for expression in selector.get("matchExpressions") or []:
        if expression.get("operator") != "Exists":
            return None
        scopes.append(expression.get("scopeName"))
    return scopes if all(s in _SIMPLE_SCOPES for s in scopes) else None


def _in_scope(pod: Obj, scope: str) -> bool:
    spec = pod.get("spec") or {}
    if scope in ("Terminating", "NotTerminating"):
        deadline = spec.get("activeDeadlineSeconds")
        terminating = isinstance(deadline, int) and deadline >= 0
        return terminating == (scope == "Terminating")
    requests, limits = _pod_totals(pod)
    best_effort = not any(
        name in _COMPUTE for name in (*requests, *limits)
    )  # no cpu or memory requests or limits on any container
    return best_effort == (scope == "BestEffort")


def _matches(quota: Obj, pod: Obj) -> bool:
    hard = (quota.get("status") or {}).get("hard") or {}
    scopes = _scopes(quota)
    if scopes is None or not any(_tracked(name) for name in hard):
        return False
    return all(_in_scope(pod, scope) for scope in scopes)


def _pretty(usage: Usage, names: Iterable[str]) -> str:
    return ",".join(f"{name}={usage[name]}" for name in sorted(names) if name in usage)


def _missing(pod: Obj, required: set[str]) -> str | None:
    """ "must specify ..." for containers that do not name a resource a quota needs."""
    missing: dict[str, set[str]] = {}
    spec = pod.get("spec") or {}
    for container in (*(spec.get("containers") or []), *(spec.get("initContainers") or [])):
        named = set(_compute_usage(*_container_usage(container)))
        for resource in required - named:
            missing.setdefault(resource, set()).add(str(container.get("name", "")))
    if not missing:
        return None
    parts = (f"{r} for: {','.join(sorted(missing[r]))}" for r in sorted(missing))
    return "must specify " + "; ".join(parts)


class ResourceQuotas:
    """Keeps the namespace's quotas' `status` and admits pod creates against them."""

    def __init__(self, *, quotas: ObjectApi, pods: PodStore) -> None:
        self._quotas = quotas
        self._pods = pods
        self._lock = threading.RLock()
        quotas.on_create = self._initial_status
        quotas.store.add_listener(self._on_quota_event)
        pods.add_listener(self._on_pod_event)

    # -- the quota controller ------------------------------------------------------------------

    def _usage_of(self, quota: Obj, namespace: str) -> Usage:
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = {name: Quantity(Decimal(0)) for name in hard}
        probe = {**quota, "status": {"hard": hard}}
        pods, _ = self._pods.list(namespace)
        for pod in pods:
            if _matches(probe, pod):
                usage = pod_usage(pod)
                for name in hard:
                    if name in usage:
                        used[name] = used[name] + usage[name]
        return used

    def _status(self, quota: Obj, namespace: str) -> Obj:
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        used = self._usage_of(quota, namespace)
        return {"hard": hard, "used": {name: str(q) for name, q in used.items()}}

    def _initial_status(self, quota: Obj) -> None:
        with self._lock:
            quota["status"] = self._status(quota, quota["metadata"]["namespace"])

    def _on_quota_event(self, event: Event) -> None:
        if event.type != "MODIFIED" or event.old is None:
            return
        spec_hard = (event.new.get("spec") or {}).get("hard")
        if spec_hard == ((event.new.get("status") or {}).get("hard")):
            return
        meta = event.new["metadata"]
        self._sync(meta["namespace"], [meta["name"]])

    def _sync(self, namespace: str, names: Iterable[str]) -> None:
        """Recompute the usage of these quotas from the pods (the controller's full sync)."""
        for name in names:

            def recomputed(quota: Obj) -> Obj:
                quota["status"] = self._status(quota, namespace)
                return quota

            with self._lock:
                try:
                    self._quotas.store.update(namespace, name, recomputed)
                except ApiError as error:  # deleted meanwhile
                    if error.code != 404:
                        raise

    def _on_pod_event(self, event: Event) -> None:
        old_phase = ((event.old or {}).get("status") or {}).get("phase")
        new_phase = (event.new.get("status") or {}).get("phase")
        ended = event.type == "DELETED" or (new_phase in _TERMINAL and old_phase not in _TERMINAL)
        if not ended:
            return
        namespace = event.new["metadata"]["namespace"]
        quotas, _ = self._quotas.store.list(namespace)
        if quotas:  # replenish: what the pod held is free again
            self._sync(namespace, [q["metadata"]["name"] for q in quotas])

    # -- the admission plugin ------------------------------------------------------------------

    @contextlib.contextmanager
    def admission(self, pod: Obj) -> Iterator[None]:
        """Admit a pod about to be created (403 as the API server refuses it), charge it to its
        namespace's quotas, and run the create inside: a create that then fails gives the charge
        back, and no usage is recomputed meanwhile (no other create passes on the same room)."""
        namespace = pod["metadata"]["namespace"]
        quotas, _ = self._quotas.store.list(namespace)
        if not quotas:
            yield
            return
        with self._lock:
            charges = self._admit(pod)
            try:
                yield
            except BaseException:
                for quota_name, requested in charges:
                    self._charge(namespace, quota_name, requested, sign=-1)
                raise

    def _admit(self, pod: Obj) -> list[tuple[str, Usage]]:
        namespace = pod["metadata"]["namespace"]
        name = pod["metadata"]["name"]
        with self._lock:
            quotas, _ = self._quotas.store.list(namespace)
            matching = [q for q in quotas if _matches(q, pod)]
            if not matching:
                return []
            # As the plugin: every matching quota's constraints and usage stats first...
            states: list[tuple[str, Usage, Usage]] = []
            for quota in matching:
                quota_name = quota["metadata"]["name"]
                status = quota.get("status") or {}
                hard = {k: Quantity.parse(v) for k, v in (status.get("hard") or {}).items()}
                used = {k: Quantity.parse(v) for k, v in (status.get("used") or {}).items()}
                missing = _missing(pod, {n for n in hard if _tracked(n)} & _MUST_SPECIFY)
                if missing is not None:
                    raise _forbidden(name, f"failed quota: {quota_name}: {missing}")
                tracked = sorted(n for n in hard if _tracked(n))
                if any(n not in used for n in tracked):
                    raise _forbidden(
                        name,
                        f"status unknown for quota: {quota_name}, resources: {','.join(tracked)}",
                    )
                states.append((quota_name, hard, used))
            # ...then, quota by quota, what the pod would take beyond any hard limit.
            usage = pod_usage(pod)
            charges: list[tuple[str, Usage]] = []
            for quota_name, hard, used in states:
                requested = {n: usage[n] for n in hard if n in usage and usage[n].value != 0}
                exceeded = [n for n in requested if (used[n] + requested[n]).value > hard[n].value]
                if exceeded:
                    raise _forbidden(
                        name,
                        f"exceeded quota: {quota_name}, requested: {_pretty(requested, exceeded)}, "
                        f"used: {_pretty(used, exceeded)}, limited: {_pretty(hard, exceeded)}",
                    )
                charges.append((quota_name, requested))
            for quota_name, requested in charges:
                self._charge(namespace, quota_name, requested, sign=1)
            return charges

    def _charge(self, namespace: str, name: str, requested: Usage, *, sign: int) -> None:
        def charged(quota: Obj) -> Obj:
            used = quota.setdefault("status", {}).setdefault("used", {})
            for resource, quantity in requested.items():
                now = Quantity.parse(used.get(resource, "0"))
                used[resource] = str(now + quantity if sign > 0 else now - quantity)
            return quota

        self._quotas.store.update(namespace, name, charged)


def _forbidden(name: str, reason: str) -> ApiError:
    return ApiError(
        403, "Forbidden", f'pods "{name}" is forbidden: {reason}', name=name, kind="pods"
    )
