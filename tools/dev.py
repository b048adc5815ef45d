#!/usr/bin/env python3
"""One entry point for a newcomer and for CI: bootstrap the locked environment, then run a job.

    python3 tools/dev.py demo     # the main job
    python3 tools/dev.py lint     # the fast gate: lint, format, types, layering, codegen drift
    python3 tools/dev.py check    # every check: the fast gate, then every test
    python3 tools/dev.py bench    # the benchmarks (prints figures)
    python3 tools/dev.py gen      # regenerate the gRPC code and the settings doc's tables
    python3 tools/dev.py spark-plugin   # build integrations/spark's jar (javac, pyspark's jars)
    python3 tools/dev.py image    # build the sidecar image (buildah), run it against kubesim
    python3 tools/dev.py gobuild [NAME...]   # build (or reuse) the pinned Go programs (default:
                                             # etcd, kube-apiserver, kube-controller-manager,
                                             # helm, buf)
    python3 tools/dev.py gobuild --path helm # print a program's binary (building it if missing)
    python3 tools/dev.py realserver [--nodes N] [-- CMD...]  # a real kube-apiserver + etcd on
                                             # loopback (N simulated nodes run its pods)

It needs only Python >= 3.11 and pip: it installs uv when it is missing, syncs the environment from
the committed lock (never re-resolving it), and is safe to run again and again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
GENERATED = ROOT / "packages" / "contract" / "src" / "execpods" / "v1"


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> None:
    command = [str(a) for a in argv]
    _say(" ".join(command))
    completed = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if completed.returncode != 0:
        sys.exit(f"failed ({completed.returncode}): {' '.join(command)}")


def _uv() -> list[str]:
    """How to run uv: from PATH, else installed with pip and run as `python -m uv`."""
    found = shutil.which("uv")
    if found:
        return [found]
    probe = [sys.executable, "-m", "uv", "--version"]
    if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return [sys.executable, "-m", "uv"]
    _say("uv is missing: installing it with pip")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # A system Python may refuse global installs (PEP 668): fall back to the user site.
    for extra in ([], ["--user"], ["--user", "--break-system-packages"]):
        if subprocess.run([*pip, *extra, "uv"], check=False).returncode == 0:
            return [sys.executable, "-m", "uv"]
    sys.exit("could not install uv with pip; install it by hand (pip install uv) and retry")


def _java() -> None:
    """Java 17 for real Spark (tests/spark) and javac for its allocator plugin
    (integrations/spark): Debian's openjdk-17-jdk-headless when either is missing, since CI may
    run on a fresh machine. Without root or apt-get, say so; those tests then skip."""
    if shutil.which("java") and shutil.which("javac"):
        return
    if shutil.which("apt-get") and os.geteuid() == 0:
        _say("java or javac is missing: installing openjdk-17-jdk-headless")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get", "update", "-qq", env=env)
        _run("apt-get", "install", "-y", "-qq", "--no-install-recommends",
             "openjdk-17-jdk-headless", env=env)  # fmt: skip
    else:
        _say("java/javac are missing and cannot be installed here: the real-Spark tests will skip")


def _promtool() -> None:
    """promtool for the alert rules' tests (tests/sidecar/test_alert_rules.py): Debian's
    `prometheus` package when it is missing, as Java is installed; without root, those skip."""
    if shutil.which("promtool"):
        return
    if shutil.which("apt-get") and os.geteuid() == 0:
        _say("promtool is missing: installing prometheus (Debian)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get", "update", "-qq", env=env)
        _run("apt-get", "install", "-y", "-qq", "--no-install-recommends", "prometheus", env=env)
    else:
        _say("promtool is missing and cannot be installed here: the alert rule tests will skip")


def bootstrap() -> None:
    """Create .venv from the lock (and make sure Java and promtool are there); a no-op when all
    is in sync."""
    _java()
    _promtool()
    _run(*_uv(), "sync", "--locked", "--all-packages", "--quiet")
    if not (GENERATED / "allocator_pb2.py").exists():
        _say("generated gRPC code is missing: generating it")
        gen()


def _tool(name: str) -> Path:
    return VENV_BIN / name


def lint() -> None:
    """Everything but the tests, in well under a minute: run it before each commit."""
    _run(_tool("ruff"), "check", ".")
    _run(_tool("ruff"), "format", "--check", ".")
    _run(_tool("mypy"), "packages", "tests", "tools")
    _run(_tool("lint-imports"))
    for generator in ("gen_proto.py", "gen_settings_doc.py"):
        gen_check = ROOT / "tools" / generator
        if gen_check.exists():
            _run(_tool("python"), gen_check, "--check")


def check() -> None:
    lint()
    # The real API server tier (tests/realapi) needs etcd, kube-apiserver and
    # kube-controller-manager, the chart's tests helm, the proto checks buf: built from source
    # on the first run (minutes), cached after (execpods.devtools.realserver.gobuild).
    _run(_tool("python"), "-m", "execpods.devtools.realserver", "build")
    env = {**os.environ, "EXECPODS_REAL_SERVER": "require"}
    _run(_tool("pytest"), "-q", "-p", "no:cacheprovider", *sys.argv[2:], env=env)


def demo() -> None:
    _run(_tool("execpods-demo"), *sys.argv[2:])


def bench() -> None:
    _run(_tool("python"), ROOT / "tools" / "bench.py", *sys.argv[2:])


def spark_plugin() -> None:
    """Build integrations/spark/build/execpods-spark.jar (javac against pyspark's jars)."""
    _run(_tool("python"), "-m", "execpods.devtools.spark_plugin", *sys.argv[2:])


def image() -> None:
    """Build the Dockerfile's image with buildah and run its sidecar against kubesim (root)."""
    _run(_tool("python"), ROOT / "tools" / "image.py", *sys.argv[2:])


def gobuild() -> None:
    """Build the pinned Go programs into the cache outside the checkout (tools/gobuild/)."""
    args = sys.argv[2:]
    if args[:1] == ["--path"]:
        _run(_tool("python"), "-m", "execpods.devtools.realserver", "path", *args[1:])
    else:
        _run(_tool("python"), "-m", "execpods.devtools.realserver", "build", *args)


def realserver() -> None:
    """Start etcd + kube-apiserver + kube-controller-manager on loopback (see docs/kubesim.md).

    This process becomes the server's (exec), so a signal sent to it (a supervisor's SIGTERM,
    not only a terminal's Ctrl-C) stops the server: a child would be left running."""
    argv = [str(_tool("python")), "-m", "execpods.devtools.realserver", "start", *sys.argv[2:]]
    _say(" ".join(argv))
    sys.stdout.flush()
    os.execv(argv[0], argv)


def gen() -> None:
    """The gRPC code from proto/, and the settings tables of docs/configuration.md."""
    _run(_tool("python"), ROOT / "tools" / "gen_proto.py")
    _run(_tool("python"), ROOT / "tools" / "gen_settings_doc.py")


JOBS = {
    "lint": lint,
    "check": check,
    "demo": demo,
    "bench": bench,
    "gen": gen,
    "spark-plugin": spark_plugin,
    "image": image,
    "gobuild": gobuild,
    "realserver": realserver,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in JOBS:
        sys.exit(f"usage: python3 tools/dev.py {{{'|'.join(JOBS)}}} [args...]")
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    # uv sync compiles the bytecode (once: later syncs find it fresh, about a second), since every
    # job starts processes (the sidecar, the simulator, test subprocesses) that would otherwise
    # recompile the kubernetes client (63,000 lines in one module) each time.
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")
    bootstrap()
    JOBS[sys.argv[1]]()


if __name__ == "__main__":
    main()
