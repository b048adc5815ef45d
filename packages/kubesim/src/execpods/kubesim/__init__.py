"""kubesim: an embedded Kubernetes API simulator for core/v1 pods.

Start one with ``with KubeSim(deterministic=True) as sim:`` and point any Kubernetes client at
``sim.url`` or ``sim.kubeconfig_path``. See docs/kubesim.md.
"""

from execpods.kubesim.api import KubeSim
from execpods.kubesim.bodies import Pod, PodList, Status, WatchEvent
from execpods.kubesim.cluster import ANNOTATION_PREFIX, ClusterConfig, NodeInfo
from execpods.kubesim.errors import ApiError
from execpods.kubesim.faults import RequestRecord

__all__ = [
    "ANNOTATION_PREFIX",
    "ApiError",
    "ClusterConfig",
    "KubeSim",
    "NodeInfo",
    "Pod",
    "PodList",
    "RequestRecord",
    "Status",
    "WatchEvent",
]
