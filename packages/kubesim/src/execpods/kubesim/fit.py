"""Whether a pod fits a node, and the message the scheduler writes when it fits none.

Pure functions, shared by every node simulation (kubesim in process, and
:mod:`execpods.kubesim.nodesim` over any API server). The wording and the order follow
kube-scheduler (checked against Kubernetes v1.36's sources):

- per node, the filters run in the default profile's order and stop at the first that fails:
  an unready node has the ``node.kubernetes.io/unreachable`` taint (``node(s) had untolerated
  taint(s)``), then required node affinity (``node(s) didn't match Pod's node affinity/selector``),
  then NodeResourcesFit, which reports every shortage at once (``Too many pods``,
  ``Insufficient cpu``, ``Insufficient memory``);
- the message is the ``FitError``'s: ``0/N nodes are available: `` then ``<count> <reason>``
  for each reason, sorted as strings, joined by ``, `` and ended with ``.``;
- then the default preemption plugin's verdict after ``preemption: ``: a pod whose
  ``preemptionPolicy`` is ``Never`` is ``not eligible due to preemptionPolicy=Never.``; otherwise
  the nodes that failed only on resources the node could hold were searched for lower-priority
  victims (none here: the simulation does not preempt, so ``No preemption victims found for
  incoming pod``) and the others are ``Preemption is not helpful for scheduling``, in the same
  ``0/N nodes are available: ...`` form.

So three full nodes give ``0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are
available: 3 No preemption victims found for incoming pod.``
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from execpods.kubesim.quantities import parse_quantity
from execpods.kubesim.store import Obj

__all__ = [
    "AFFINITY",
    "NO_VICTIMS",
    "NOT_HELPFUL",
    "TAINTED",
    "TOO_MANY_PODS",
    "NodeFit",
    "Request",
    "node_reasons",
    "pod_request",
    "quantity_request",
    "unschedulable_message",
]

TAINTED = "node(s) had untolerated taint(s)"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
_NEVER = "not eligible due to preemptionPolicy=Never."


@dataclass(frozen=True, slots=True)
class Request:
    """What a pod asks of a node: millicores and bytes (0 when it asks nothing)."""

    milli_cpu: int = 0
    memory: int = 0

    def __add__(self, other: Request) -> Request:
        return Request(self.milli_cpu + other.milli_cpu, self.memory + other.memory)

    def __sub__(self, other: Request) -> Request:
        return Request(self.milli_cpu - other.milli_cpu, self.memory - other.memory)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFit:
    """One node as the scheduler weighs it: ready, and its allocatable against what is bound.
    ``allocatable`` None means unbounded cpu and memory (kubesim's default)."""

    ready: bool
    affinity: bool
    pods: int
    max_pods: int
    used: Request
    allocatable: Request | None


def _container_request(container: object) -> Request:
    if not isinstance(container, dict):
        return Request()
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        return Request()
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}  # a limit alone is the request (API defaulting)

    def amount(name: str, scale: int) -> int:
        raw = requests.get(name) if isinstance(requests, dict) else None
        if raw is None and isinstance(limits, dict):
            raw = limits.get(name)
        if raw is None:
            return 0
        try:
            return int((parse_quantity(raw) * scale).to_integral_value(rounding="ROUND_CEILING"))
        except (ValueError, ArithmeticError):
            return 0

    return Request(amount("cpu", 1000), amount("memory", 1))


def pod_request(pod: Obj) -> Request:
    """The pod's effective request, as the scheduler computes it: its containers and native
    sidecars summed, or an init container's peak if larger, plus the pod overhead."""
    spec = pod.get("spec") or {}
    total = Request()
    for c in spec.get("containers") or []:
        total = total + _container_request(c)
    sidecars = Request()
    peak = Request()
    for c in spec.get("initContainers") or []:
        request = _container_request(c)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":
            sidecars = sidecars + request
            continue
        at_init = request + sidecars
        peak = Request(max(peak.milli_cpu, at_init.milli_cpu), max(peak.memory, at_init.memory))
    total = total + sidecars
    total = Request(max(total.milli_cpu, peak.milli_cpu), max(total.memory, peak.memory))
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        total = total + _container_request({"resources": {"requests": overhead}})
    return total


def node_reasons(node: NodeFit, request: Request) -> tuple[list[str], bool]:
    """Why the pod cannot go to this node (empty: it fits), and whether preemption could help
    (False for a taint, affinity, or a request beyond the node's whole allocatable)."""
    if not node.ready:
        return [TAINTED], False
    if not node.affinity:
        return [AFFINITY], False
    reasons: list[str] = []
    if node.pods + 1 > node.max_pods:
        reasons.append(TOO_MANY_PODS)
    resolvable = True
    if node.allocatable is not None:
        free = node.allocatable - node.used
        for name, asked, left, whole in (
            ("cpu", request.milli_cpu, free.milli_cpu, node.allocatable.milli_cpu),
            ("memory", request.memory, free.memory, node.allocatable.memory),
        ):
            if asked > 0 and asked > left:
                reasons.append(f"Insufficient {name}")
                resolvable = resolvable and asked <= whole
    return reasons, resolvable


def _histogram(total: int, reasons: Iterable[str]) -> str:
    counts = Counter(reasons)
    listed = sorted(f"{n} {reason}" for reason, n in counts.items())
    text = f"0/{total} nodes are available:"
    return f"{text} {', '.join(listed)}." if listed else text


def unschedulable_message(verdicts: Sequence[tuple[list[str], bool]], pod: Obj) -> str:
    """The scheduler's message for a pod that fits none of the nodes (``verdicts`` from
    :func:`node_reasons`, one per node)."""
    total = len(verdicts)
    text = _histogram(total, (r for reasons, _ in verdicts for r in reasons))
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return f"{text} preemption: {_NEVER}"
    helpful = sum(1 for _, resolvable in verdicts if resolvable)
    after = [NO_VICTIMS] * helpful + [NOT_HELPFUL] * (total - helpful)
    return f"{text} preemption: {_histogram(total, after)}"


def quantity_request(cpu: str | float | None, memory: str | int | None) -> Request | None:
    """A node's allocatable from two quantities (None, None: unbounded)."""
    if cpu is None and memory is None:
        return None
    milli = int(parse_quantity(str(cpu)) * 1000) if cpu is not None else 10**12
    mem = int(parse_quantity(str(memory))) if memory is not None else 2**62
    return Request(milli, mem)
