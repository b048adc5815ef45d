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
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
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


def _lint_steps() -> list[list[str]]:
    steps: list[list[str | Path]] = [
        [_tool("ruff"), "check", "."],
        [_tool("ruff"), "format", "--check", "."],
        [_tool("mypy"), "packages", "tests", "tools"],
        [_tool("lint-imports")],
    ]
    for generator in ("gen_proto.py", "gen_settings_doc.py"):
        gen_check = ROOT / "tools" / generator
        if gen_check.exists():
            steps.append([_tool("python"), gen_check, "--check"])
    return [[str(a) for a in step] for step in steps]


def lint() -> None:
    """Everything but the tests, in well under a minute: run it before each commit."""
    for step in _lint_steps():
        _run(*step)


class _Lint(threading.Thread):
    """The lint steps run beside the tests, each one's output kept for the end; the first that
    fails calls `on_failure` (which stops the tests: the check has failed already)."""

    def __init__(self, on_failure: Callable[[], None]) -> None:
        super().__init__(name="lint", daemon=True)
        self.output: list[str] = []
        self.failed = ""
        self.seconds = 0.0
        self._on_failure = on_failure

    def run(self) -> None:
        started = time.monotonic()
        for step in _lint_steps():
            done = subprocess.run(step, cwd=ROOT, capture_output=True, text=True, check=False)
            self.output.append(f"==> {' '.join(step)}\n{done.stdout}{done.stderr}")
            if done.returncode != 0:
                self.failed = f"failed ({done.returncode}): {' '.join(step)}"
                self._on_failure()
                break
        self.seconds = time.monotonic() - started


WORKERS_ENV = "EXECPODS_TEST_WORKERS"
DEFAULT_WORKERS = 5
"""pytest-xdist workers: more than the 2 cores, since most tests wait (on simulated latencies,
processes starting, API servers); three of them run the heavy lanes (tests/lanes.py: the real
API server's tests, two of JVMs), the others everything else. Measured in BUILD.md."""


def check() -> None:
    """The fast gate and every test, side by side: the tests mostly wait, so the lint steps'
    CPU (mypy's cold run mostly) fits beside them. A lint failure stops the tests."""
    started = time.monotonic()
    # The real API server tier (tests/realapi) needs etcd, kube-apiserver and
    # kube-controller-manager, the chart's tests helm, the proto checks buf: built from source
    # on the first run (minutes), cached after (execpods.devtools.realserver.gobuild).
    _run(_tool("python"), "-m", "execpods.devtools.realserver", "build")
    # Bytecode is written (into the ignored __pycache__ folders): the tests start a Python
    # process per worker and hundreds more (sidecars, kubesim, documented commands), and each
    # would otherwise compile the workspace's sources and the tests' rewritten modules again.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["EXECPODS_REAL_SERVER"] = "require"
    workers = os.environ.get(WORKERS_ENV) or str(DEFAULT_WORKERS)
    argv = [
        str(_tool("pytest")), "-q", "-p", "no:cacheprovider", "--durations=20",
        "-n", workers, "--dist", "loadgroup", *sys.argv[2:],
    ]  # fmt: skip
    _say(f"{' '.join(argv)}   (beside it: the lint steps)")
    tests = subprocess.Popen(argv, cwd=ROOT, env=env)
    linting = _Lint(on_failure=lambda: tests.send_signal(signal.SIGINT))
    linting.start()
    code = tests.wait()
    linting.join()
    sys.stdout.write("".join(linting.output))
    if linting.failed:
        sys.exit(f"{linting.failed} (so the tests were stopped)")
    _say(f"lint passed in {linting.seconds:.0f} s beside the tests")
    if code != 0:
        sys.exit(f"failed ({code}): pytest")
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    _say(f"check passed in {minutes} min {seconds:02d} s after the bootstrap (load average {load})")


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
