"""Pinned, cached builds of the Go programs the proof tiers need: kube-apiserver,
kube-controller-manager and etcd (the real API server), helm (the chart's tests) and buf (the
proto checks).

Nothing here downloads a release binary: each program is built from its source module, fetched
through the Go module proxy, by a small Go module under ``tools/gobuild/<module>/`` whose
``go.mod`` and ``go.sum`` pin every dependency (for Kubernetes, each staging module by a
``replace`` line at the v0.x matching the pinned release). The binary lands in a cache outside
the checkout, in a folder keyed by the program, its version and a digest of the pinning files and
build flags, so a second run (another worktree, a fresh clone in CI on the same machine) reuses
it and a changed pin builds anew. A file lock serialises builds of one key across processes.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHECK_BUILDS",
    "PROGRAMS",
    "REAL_SERVER",
    "BuildRecord",
    "GoProgram",
    "binary",
    "build",
    "cache_root",
    "cached",
]

_log = logging.getLogger(__name__)

GOBUILD_DIR = Path(__file__).resolve().parents[6] / "tools" / "gobuild"
"""The pinning modules, one folder each (the repository's ``tools/gobuild``)."""

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
HELM_VERSION = "v3.22.0"
BUF_VERSION = "v1.75.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class GoProgram:
    """One program: the pinning module that builds it, its main package and its version."""

    name: str
    module_dir: str
    package: str
    version: str
    ldflags: tuple[str, ...] = ()

    def digest(self) -> str:
        """A digest of everything that decides the binary: the pins, the flags, the version."""
        h = hashlib.sha256()
        for part in (self.package, self.version, *self.ldflags):
            h.update(part.encode() + b"\0")
        for pin in ("go.mod", "go.sum"):
            h.update((GOBUILD_DIR / self.module_dir / pin).read_bytes())
        return h.hexdigest()[:12]


def _k8s_version_flags(version: str) -> tuple[str, ...]:
    # Without these the binaries report v0.0.0-master and a client's version skew checks misread.
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        f"-X {pkg}.gitVersion={version}",
        f"-X {pkg}.gitMajor={major}",
        f"-X {pkg}.gitMinor={minor}",
        f"-X {pkg}.gitTreeState=clean",
    )


PROGRAMS: dict[str, GoProgram] = {
    p.name: p
    for p in (
        GoProgram(
            name="kube-apiserver",
            module_dir="kubernetes",
            package="k8s.io/kubernetes/cmd/kube-apiserver",
            version=KUBERNETES_VERSION,
            ldflags=_k8s_version_flags(KUBERNETES_VERSION),
        ),
        GoProgram(
            name="kube-controller-manager",
            module_dir="kubernetes",
            package="k8s.io/kubernetes/cmd/kube-controller-manager",
            version=KUBERNETES_VERSION,
            ldflags=_k8s_version_flags(KUBERNETES_VERSION),
        ),
        GoProgram(
            name="etcd",
            module_dir="etcd",
            package="go.etcd.io/etcd/server/v3",
            version=ETCD_VERSION,
        ),
        GoProgram(
            name="buf",
            module_dir="buf",
            package="github.com/bufbuild/buf/cmd/buf",
            version=BUF_VERSION,
        ),
        GoProgram(
            name="helm",
            module_dir="helm",
            package="helm.sh/helm/v3/cmd/helm",
            version=HELM_VERSION,
            ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
        ),
    )
}
"""Every program this project builds from Go source, by name."""

REAL_SERVER = ("etcd", "kube-apiserver", "kube-controller-manager")
"""The programs the real API server tier runs."""

CHECK_BUILDS = (*REAL_SERVER, "helm", "buf")
"""What ``python3 tools/dev.py check`` builds (or reuses) before the tests: the real server, helm
for the chart's tests (tests/deploy) and buf for the proto checks (tests/contract). A program
added to :data:`PROGRAMS` that the check needs is added here too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildRecord:
    """What one build cost: kept beside the binary and printed, so the docs can quote it."""

    name: str
    version: str
    seconds: float
    size_bytes: int
    go_version: str
    built_at: float


def cache_root() -> Path:
    """Where built binaries live: ``$EXECPODS_GO_CACHE``, else the user's cache folder (outside
    every checkout, so worktrees and fresh clones on one machine share it)."""
    explicit = os.environ.get("EXECPODS_GO_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "execpods" / "gobin"


def _folder(program: GoProgram) -> Path:
    return cache_root() / f"{program.name}-{program.version}-{program.digest()}"


def cached(name: str) -> Path | None:
    """The built binary for ``name`` if the cache has it for today's pins, else None."""
    path = _folder(PROGRAMS[name]) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def record(name: str) -> BuildRecord | None:
    """The record of the build that produced the cached binary, if there is one."""
    path = _folder(PROGRAMS[name]) / "build.json"
    try:
        return BuildRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(
            "the go command is missing: the real API server is built from source with Go "
            "(this project's machines have it; see BUILD.md)"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"  # static binaries: no C toolchain or libc coupling
    env.setdefault("GOFLAGS", "-mod=readonly")
    return env


def build(name: str, *, force: bool = False) -> Path:
    """Build ``name`` into the cache unless it is there already; returns the binary's path.

    Long (minutes on two cores for the Kubernetes programs): progress goes to the log, and the
    go command's own output to stderr. Concurrent callers wait on one lock and reuse the result.
    """
    program = PROGRAMS[name]
    folder = _folder(program)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and cached(name) is not None:
            return target
        go = _go()
        go_version = subprocess.run(
            [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
        ).stdout.strip()
        _log.warning(
            "building %s %s from source (%s; the first build takes minutes)",
            name,
            program.version,
            go_version,
        )
        partial = folder / f".{name}.partial"
        argv = [
            go,
            "build",
            "-trimpath",
            "-ldflags",
            " ".join(("-s", "-w", *program.ldflags)),
            "-o",
            str(partial),
            program.package,
        ]
        started = time.monotonic()
        done = subprocess.run(
            argv, cwd=GOBUILD_DIR / program.module_dir, env=_go_env(), check=False
        )
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"building {name} failed ({done.returncode}): {' '.join(argv)}")
        partial.replace(target)
        result = BuildRecord(
            name=name,
            version=program.version,
            seconds=round(time.monotonic() - started, 1),
            size_bytes=target.stat().st_size,
            go_version=go_version,
            built_at=time.time(),
        )
        (folder / "build.json").write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n")
        _log.warning(
            "built %s in %.0f s (%.1f MiB)", name, result.seconds, result.size_bytes / 2**20
        )
        return target


def binary(name: str) -> Path:
    """The binary for ``name``, building it first when the cache lacks it."""
    return cached(name) or build(name)
