"""execpods.sidecar: the allocator as a gRPC service beside a driver in any language.

`execpods-sidecar serve` runs it (see docs/sidecar.md); `EmbeddedSidecar` runs one in process on
its own event-loop thread; `Settings` is the one settings object (core, Kubernetes, sidecar).
"""

from execpods.sidecar.config.settings import Settings, SidecarSettings
from execpods.sidecar.embedded import EmbeddedSidecar
from execpods.sidecar.server import SidecarServer
from execpods.sidecar.wiring import Runtime, assemble, connect

__all__ = [
    "EmbeddedSidecar",
    "Runtime",
    "Settings",
    "SidecarServer",
    "SidecarSettings",
    "assemble",
    "connect",
]
