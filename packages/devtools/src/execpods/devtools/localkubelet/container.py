"""One container as a process: its image's files and the pod's volumes at the paths the pod spec
names, in the pod's network, with its command, arguments and environment resolved as the
kubelet resolves them.

The process runs in a mount namespace of its own (`unshare --mount`), where `/opt`, `/var` and
`/run` are folders the kubelet prepared (symbolic links to the image's host files and to the
volumes) and `/etc/hosts` names the pod and the `kubernetes` Service; everything else is the
host's. It joins the pod's network and UTS namespaces (`nsenter`, sandbox.py), so 127.0.0.1 is
the pod's. Volumes are mounted only under those three trees (what Spark's and execpods'
manifests use); another mount path fails the container with a message saying so.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execpods.devtools.localkubelet.images import Image

__all__ = ["ContainerError", "ContainerSpec", "expand", "start_container"]

_TREES = ("/opt", "/var", "/run")
_SETUP = (
    'set -e; v="$1"; w="$2"; shift 2; '
    'mount --bind "$v/opt" /opt; mount --bind "$v/var" /var; mount --bind "$v/run" /run; '
    'mount --bind "$v/hosts" /etc/hosts; cd "$w"; exec "$@"'
)
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\$")


class ContainerError(Exception):
    """The container cannot start (its reason and message go into its status)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` references as the kubelet expands them in command, args and env values."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(one, text)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSpec:
    """What start_container needs: the container, its image, its resolved environment and the
    host folders of the volumes it mounts (mount path -> folder)."""

    container: Mapping[str, Any]
    image: Image
    env: dict[str, str]
    mounts: dict[str, Path]
    hosts: str


def _link(root: Path, path: str, target: Path) -> None:
    if path == "/var/run" or path.startswith("/var/run/"):
        path = path.removeprefix("/var")
    if not path.startswith(tuple(f"{t}/" for t in _TREES)):
        raise ContainerError(
            "CreateContainerConfigError",
            f"the local kubelet mounts only under {', '.join(_TREES)}, not at {path}",
        )
    where = root / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.is_symlink() or where.exists():
        if where.is_symlink():
            where.unlink()
        else:
            raise ContainerError("CreateContainerConfigError", f"{path} is mounted twice")
    where.symlink_to(target)


def _view(folder: Path, spec: ContainerSpec) -> Path:
    """The container's /opt, /var, /run and /etc/hosts, as host folders."""
    for tree in _TREES:
        (folder / tree.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (folder / "var" / "tmp").mkdir(exist_ok=True)
    (folder / "var" / "run").symlink_to("/run")
    for path, target in spec.image.links.items():
        _link(folder, path, target)
    for path in spec.image.folders:
        (folder / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, content in spec.image.files.items():
        where = folder / path.lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(content)
        where.chmod(0o755)
    for path, target in sorted(spec.mounts.items()):
        _link(folder, path, target)
    (folder / "hosts").write_text(spec.hosts)
    return folder


def command_line(spec: ContainerSpec) -> list[str]:
    """The container's process: command (else the image's entrypoint), then args (else the
    image's command when no command was given), with `$(VAR)` expanded."""
    container = spec.container
    command = container.get("command")
    args = container.get("args")
    argv = list(command) if command else list(spec.image.entrypoint)
    if args is not None:
        argv += list(args)
    elif not command:
        argv += list(spec.image.cmd)
    if not argv:
        raise ContainerError("CreateContainerConfigError", "no command and no image entrypoint")
    return [expand(str(a), spec.env) for a in argv]


def start_container(
    spec: ContainerSpec, *, folder: Path, sandbox_pid: int, log: Path
) -> subprocess.Popen[bytes]:
    """Start the container's process in the pod's namespaces; its output goes to `log`."""
    view = _view(folder, spec)
    workdir = str(spec.container.get("workingDir") or spec.image.workdir)
    argv = [
        "nsenter",
        f"--net=/proc/{sandbox_pid}/ns/net",
        f"--uts=/proc/{sandbox_pid}/ns/uts",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        _SETUP,
        "container",
        str(view),
        workdir,
        *command_line(spec),
    ]
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            env=spec.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.sep,
        )
