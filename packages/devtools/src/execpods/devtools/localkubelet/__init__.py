"""A kubelet that runs chosen pods' containers as local processes (kubelet.py says why)."""

from execpods.devtools.localkubelet.kubelet import SCHEDULER_NAME, LocalKubelet, missing_tools

__all__ = ["SCHEDULER_NAME", "LocalKubelet", "missing_tools"]
