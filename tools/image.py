"""`python3 tools/dev.py image`: build the sidecar's image with buildah, run it, check its health.

No container registry is reachable from this machine, so the base image is made from Debian's
packages: debootstrap (`--variant=minbase`, plus python3 and python3-venv) writes a root
filesystem that becomes `localhost/execpods-base:bookworm` (made once, then reused). The
Dockerfile's `PYTHON_IMAGE` is pointed at it. The wheels the build installs are gathered first
into `build/wheelhouse` (the lock's hash-pinned wheels, uv and hatchling: `pip download`, once),
so the build itself runs with `PIP_NO_INDEX=1`.

Then the image runs as its own non-root user, on the host's network (buildah's chroot isolation):
`execpods-sidecar --version`, a check that no build tool is on its PATH, and `serve` against a
kubesim on 127.0.0.1, whose gRPC health must say SERVING and which must create the executor pods
asked for. It prints the image's size and how long each step took.

Everything runs as root (`--storage-driver vfs --isolation chroot`, as buildah does without
overlay support); buildah and debootstrap come from Debian (`apt-get install`) when missing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = ROOT / "build" / "wheelhouse"
BASE = "localhost/execpods-base:bookworm"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = "python3,python3-venv"
BUILD_TOOLS = ("gcc", "cc", "c++", "make", "pip", "pip3", "uv", "hatchling")
"""None may be on the image's PATH (Debian's apt and dpkg stay, as in python:slim images)."""
JAR_IN_IMAGE = "/opt/execpods/share/spark/execpods-spark.jar"
"""Where the Dockerfile puts the Spark plugin (the driver template's init container copies it)."""
UV_VERSION = "0.13.9"
"""The uv the Dockerfile installs to export the lock (`pip install uv==...` there)."""


def _say(message: str) -> None:
    print(f"==> {message}", flush=True)


def _run(*argv: str | Path, capture: bool = False, env: dict[str, str] | None = None) -> str:
    command = [str(a) for a in argv]
    _say(" ".join(command))
    completed = subprocess.run(
        command, cwd=ROOT, check=False, text=True, capture_output=capture, env=env
    )
    if completed.returncode != 0:
        detail = (completed.stderr or "") if capture else ""
        sys.exit(f"failed ({completed.returncode}): {' '.join(command)}\n{detail}")
    return completed.stdout if capture else ""


def buildah(*argv: str | Path, capture: bool = False) -> str:
    return _run("buildah", "--storage-driver", "vfs", *argv, capture=capture)


def version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return str(tomllib.loads(text)["project"]["version"])


def install_tools() -> None:
    """buildah and debootstrap from Debian, as the project's other system tools are."""
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit(f"{', '.join(missing)} missing: install them (Debian: apt-get install buildah)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run("apt-get", "update", "-qq", env=env)
    _run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing, env=env)


def _image_exists(name: str) -> bool:
    probe = ["buildah", "--storage-driver", "vfs", "inspect", "--type", "image", name]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def base_image(*, rebuild: bool) -> None:
    """Debian bookworm (minbase) with python3 and python3-venv, as a local image."""
    if _image_exists(BASE) and not rebuild:
        _say(f"{BASE} exists (--rebuild-base makes it again)")
        return
    with tempfile.TemporaryDirectory(prefix="execpods-rootfs-") as folder:
        rootfs = Path(folder) / "rootfs"
        _run(
            "debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", SUITE, rootfs, MIRROR
        )
        # What an image does not need: apt's lists and caches, documentation, manuals, locales.
        for junk in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
            (rootfs / junk).mkdir(parents=True, exist_ok=True)
        container = buildah("from", "scratch", capture=True).strip()
        try:
            buildah("copy", container, rootfs, "/")
            buildah("config", "--env", "LANG=C.UTF-8", "--cmd", "/bin/sh", container)
            buildah("commit", "--quiet", container, BASE)
        finally:
            buildah("rm", container)


def _host_tool(module: str) -> list[str]:
    """uv or pip as tools/dev.py finds them: on PATH, else a module of the Python on PATH (the
    project's .venv, which runs this, has neither)."""
    if module == "uv" and shutil.which("uv"):
        return [str(shutil.which("uv"))]
    return [shutil.which("python3") or "python3", "-m", module]


def wheelhouse() -> None:
    """The wheels the build installs, so it needs no index: the lock's, uv's and hatchling's."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    requirements = WHEELHOUSE / "requirements.txt"
    exported = _run(
        *_host_tool("uv"), "export", "--frozen", "--no-dev", "--no-emit-workspace",
        "--package", "execpods-sidecar", "--quiet", capture=True,
    )  # fmt: skip
    if requirements.exists() and requirements.read_text() == exported:
        _say(f"{WHEELHOUSE.relative_to(ROOT)} is up to date with uv.lock")
        return
    download = [*_host_tool("pip"), "download", "--quiet", "--disable-pip-version-check"]
    download += ["--only-binary", ":all:", "--dest", str(WHEELHOUSE)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pinned:
        pinned.write(exported)
        pinned.flush()
        _run(*download, "--require-hashes", "--no-deps", "-r", pinned.name)
    _run(*download, f"uv=={UV_VERSION}", "hatchling>=1.27")
    requirements.write_text(exported)


def plugin_jar() -> Path:
    """The Spark plugin's jar the image carries (built with javac when missing or stale)."""
    from execpods.devtools.spark_plugin import build as build_jar

    return build_jar(ROOT / "integrations" / "spark" / "build")


def revision() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def build(tag: str) -> None:
    buildah(
        "build", "--isolation", "chroot", "--layers", "--quiet",
        "--build-arg", f"PYTHON_IMAGE={BASE}", "--build-arg", "PIP_NO_INDEX=1",
        "--build-arg", f"VERSION={version()}", "--build-arg", f"REVISION={revision()}",
        "-f", ROOT / "Dockerfile", "-t", tag, ROOT,
    )  # fmt: skip


def check_labels(tag: str, *, built_now: bool) -> None:
    """The OCI annotations: this version, the licence, and this commit when built now."""
    import json

    inspected = json.loads(buildah("inspect", "--type", "image", tag, capture=True))
    labels = inspected["OCIv1"]["config"].get("Labels") or {}
    wanted = {
        "org.opencontainers.image.version": version(),
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    if built_now:
        wanted["org.opencontainers.image.revision"] = revision()
    wrong = {k: labels.get(k) for k, v in wanted.items() if labels.get(k) != v}
    if wrong:
        sys.exit(f"the image's labels are not what the build says: {wrong}")
    _say(f"labels: {', '.join(f'{k}={v}' for k, v in sorted(labels.items()))}")


def image_size(tag: str) -> str:
    """The image's size as buildah reports it (its layers' uncompressed content)."""
    return buildah("images", "--format", "{{.Size}}", tag, capture=True).strip()


@contextmanager
def working_container(tag: str) -> Iterator[str]:
    container = buildah("from", "--quiet", tag, capture=True).strip()
    try:
        yield container
    finally:
        buildah("rm", container)


def run_in(container: str, *argv: str) -> list[str]:
    """`buildah run` as the image's user, on the host's network."""
    return [
        "buildah", "--storage-driver", "vfs", "run", "--isolation", "chroot",
        "--network", "host", container, "--", *argv,
    ]  # fmt: skip


def run_checks(tag: str) -> None:
    """The image's sidecar: its version, no build tool, and serving against kubesim."""
    import grpc
    from execpods.kubesim import KubeSim
    from grpc_health.v1 import health_pb2

    with working_container(tag) as container:
        said = _run(*run_in(container, "execpods-sidecar", "--version"), capture=True).strip()
        if said != f"execpods-sidecar {version()}":
            sys.exit(f"the image's sidecar says {said!r}, not version {version()}")
        found = _run(
            *run_in(container, "python3", "-c",
                    f"import shutil; print([t for t in {BUILD_TOOLS!r} if shutil.which(t)])"),
            capture=True,
        ).strip()  # fmt: skip
        if found != "[]":
            sys.exit(f"build tools in the image: {found}")
        whoami = _run(
            *run_in(container, "python3", "-c", "import os; print(os.getuid())"), capture=True
        )
        if whoami.strip() != "10001":
            sys.exit(f"the image runs as uid {whoami.strip()}, not 10001")
        # The driver pod template's init container: cp the jar, as the image's user, into a
        # folder it may write (the emptyDir there).
        script = f'd=$(mktemp -d) && cp {JAR_IN_IMAGE} "$d/" && wc -c < "$d/execpods-spark.jar"'
        copied = _run(*run_in(container, "sh", "-c", script), capture=True).strip()
        size = plugin_jar().stat().st_size
        if copied != str(size):
            sys.exit(f"the image's plugin jar copies out as {copied!r} bytes, not {size}")
        _say(f"the plugin jar copies out of the image as uid 10001: {copied} bytes")
        with KubeSim() as sim:
            serve = run_in(
                container, "execpods-sidecar", "serve", "--app-id", "image-check",
                "--api-url", sim.url, "--listen", "127.0.0.1:0", "--image", "spark:4.3.0",
                "--initial-executors", "2", "--log-format", "json",
            )  # fmt: skip
            _say(" ".join(serve))
            with subprocess.Popen(serve, stdout=subprocess.PIPE, text=True) as process:
                try:
                    assert process.stdout is not None
                    line = process.stdout.readline()
                    if "listening on" not in line:
                        sys.exit(f"the image's sidecar did not start: {line!r}")
                    address = line.split("listening on ", 1)[1].split('"', 1)[0].strip()
                    with grpc.insecure_channel(address) as channel:
                        check = channel.unary_unary(
                            "/grpc.health.v1.Health/Check",
                            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                            response_deserializer=health_pb2.HealthCheckResponse.FromString,
                        )
                        answer = check(health_pb2.HealthCheckRequest(), timeout=10)
                    if answer.status != health_pb2.HealthCheckResponse.SERVING:
                        sys.exit(f"health says {answer.status}, not SERVING")
                    _say(f"health of the image's sidecar at {address}: SERVING")
                    deadline = time.monotonic() + 30
                    while len(sim.pods()) < 2 and time.monotonic() < deadline:
                        time.sleep(0.1)
                    if len(sim.pods()) < 2:
                        sys.exit("the image's sidecar created no executor pods")
                    _say(f"it created {len(sim.pods())} executor pods on kubesim")
                finally:
                    # buildah run kills its child on SIGTERM: signal the sidecar itself, which
                    # must stop cleanly (delete its pods, exit 0) as under a kubelet.
                    for pid in _descendants(process.pid, "execpods-sidecar"):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGTERM)
                    process.wait(60)
            if process.returncode != 0:
                sys.exit(f"the image's sidecar exited with {process.returncode}")
            deadline = time.monotonic() + 30  # deleted pods go once their grace period ends
            while sim.pods() and time.monotonic() < deadline:
                time.sleep(0.1)
            if sim.pods():
                sys.exit("the image's sidecar left executor pods behind when it stopped")
            _say("SIGTERM: it deleted its executor pods and exited 0")


def _descendants(root: int, named: str) -> list[int]:
    """The leaf processes under `root` (from /proc) whose command line mentions `named`: the
    container's own process, not buildah's helpers between (they carry the same arguments)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    leaves = [pid for pid in found if not children.get(pid)]
    return [pid for pid in leaves if named.encode() in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/dev.py image", description=__doc__)
    parser.add_argument("--rebuild-base", action="store_true", help="debootstrap the base again")
    parser.add_argument("--no-run", action="store_true", help="build only")
    parser.add_argument("--no-build", action="store_true", help="run the image built last")
    args = parser.parse_args(argv)
    tag = f"localhost/execpods/sidecar:{version()}"
    started = time.monotonic()
    steps: list[tuple[str, float]] = []

    def step(name: str, since: float) -> float:
        now = time.monotonic()
        steps.append((name, now - since))
        return now

    mark = started
    install_tools()
    mark = step("tools", mark)
    base_image(rebuild=args.rebuild_base)
    mark = step("base image", mark)
    wheelhouse()
    mark = step("wheelhouse", mark)
    if not args.no_build:
        plugin_jar()
        mark = step("plugin jar", mark)
        build(tag)
        mark = step("image build", mark)
    check_labels(tag, built_now=not args.no_build)
    if not args.no_run:
        run_checks(tag)
        mark = step("run and health", mark)
    buildah("rmi", "--prune")  # the previous builds' layers, now untagged (vfs copies them whole)
    timings = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in steps)
    print(f"image {tag}: {image_size(tag)}; {timings}; total {mark - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
