"""Required node affinity: which nodes a pod may be scheduled on.

The scheduler honours `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`:
the pod fits a node when any of its `nodeSelectorTerms` matches the node's labels, and a term
matches when all of its `matchExpressions` do (operators In, NotIn, Exists, DoesNotExist, Gt, Lt).
A simulated node carries the well-known labels `kubernetes.io/hostname` (its name),
`kubernetes.io/os` and `kubernetes.io/arch`. Preferred affinity, `nodeSelector` and
`matchFields` are not modelled (a pod using only those fits any node, as before).
"""

from __future__ import annotations

from typing import Any

from execpods.kubesim.store import Obj

__all__ = ["fits_node", "node_labels"]


def node_labels(node: str) -> dict[str, str]:
    """The labels every simulated node carries."""
    return {
        "kubernetes.io/hostname": node,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }


def _matches(expression: Any, labels: dict[str, str]) -> bool:
    if not isinstance(expression, dict):
        return False
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    value = labels.get(str(key), "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def fits_node(pod: Obj, node: str) -> bool:
    """Whether the pod's required node affinity lets it run on `node`."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, dict):
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    if not terms:
        return True
    labels = node_labels(node)
    # An empty term matches no node, as in the API.
    return any(
        bool(term.get("matchExpressions"))
        and all(_matches(e, labels) for e in term["matchExpressions"])
        for term in terms
    )
