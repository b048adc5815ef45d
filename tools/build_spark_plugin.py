#!/usr/bin/env python3
"""Build the execpods Spark plugin jar (integrations/spark) against the installed pyspark.

    .venv/bin/python tools/build_spark_plugin.py          # prints the jar's path
    python3 tools/dev.py plugin                           # the same, after the bootstrap

There is no Maven here: the pyspark wheel ships every Spark jar, including the relocated gRPC and
protobuf runtimes of spark-connect, and Debian's JDK brings `javac`. So:

1. `grpc_tools.protoc --descriptor_set_out` compiles proto/execpods/v1/allocator.proto into a
   descriptor set (data, not code: the plugin speaks the contract through protobuf's
   DynamicMessage, so no Java code generator and no gencode/runtime version pairing is needed);
2. `javac --release 17` compiles integrations/spark/src/main/java against pyspark's jars/;
3. the classes and the descriptor set go into one jar with fixed timestamps (same inputs, same
   bytes), under build/spark-plugin/ (gitignored).

A jar newer than every input is kept as it is. The plugin is built for, and tested with, the
pinned pyspark below; another version is refused rather than built against silently.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "integrations" / "spark" / "src" / "main" / "java"
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "execpods" / "v1" / "allocator.proto"
OUT = ROOT / "build" / "spark-plugin"
PYSPARK_VERSION = "4.3.0"
"""The Spark the plugin is compiled against and tested with (the `spark` dependency group)."""
JAR = OUT / f"execpods-spark-plugin-{PYSPARK_VERSION}.jar"
DESCRIPTORS = "io/execpods/spark/allocator.desc"
FIXED_TIME = (2026, 1, 1, 0, 0, 0)
MANIFEST = (
    "Manifest-Version: 1.0\r\n"
    "Created-By: execpods tools/build_spark_plugin.py\r\n"
    "Implementation-Title: execpods Spark pods allocator\r\n"
    f"Spark-Version: {PYSPARK_VERSION}\r\n"
    "\r\n"
)


class BuildError(RuntimeError):
    """The plugin cannot be built here; the message says what is missing."""


def pyspark_jars() -> Path:
    """pyspark's jars/ folder, after checking it is the pinned version."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise BuildError("pyspark is not installed (the 'spark' dependency group)")
    version = importlib.metadata.version("pyspark")
    if version != PYSPARK_VERSION:
        raise BuildError(f"pyspark {version} is installed; the plugin is for {PYSPARK_VERSION}")
    jars = Path(spec.origin).parent / "jars"
    if not (jars / f"spark-kubernetes_2.13-{PYSPARK_VERSION}.jar").exists():
        raise BuildError(f"{jars} holds no spark-kubernetes jar")
    return jars


def _inputs() -> list[Path]:
    return [Path(__file__), PROTO, *sorted(SOURCES.rglob("*.java"))]


def up_to_date() -> bool:
    return JAR.exists() and all(p.stat().st_mtime <= JAR.stat().st_mtime for p in _inputs())


def _descriptor_set(target: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--descriptor_set_out={target}",
        "--include_imports",
        str(PROTO.relative_to(PROTO_ROOT)),
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"protoc failed on {PROTO}:\n{done.stderr}")


def _javac(jars: Path, classes: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise BuildError("javac is not installed (python3 tools/dev.py installs openjdk-17-jdk)")
    sources = [str(p) for p in sorted(SOURCES.rglob("*.java"))]
    command = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8"]
    command += ["-cp", f"{jars}/*", "-d", str(classes), *sources]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BuildError(f"javac failed:\n{done.stdout}{done.stderr}")


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def _write_jar(classes: Path, descriptors: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    partial = JAR.with_suffix(".jar.part")
    with zipfile.ZipFile(partial, "w") as jar:
        jar.writestr(_entry("META-INF/MANIFEST.MF"), MANIFEST)
        jar.writestr(_entry(DESCRIPTORS), descriptors.read_bytes())
        for path in sorted(classes.rglob("*.class")):
            jar.writestr(_entry(path.relative_to(classes).as_posix()), path.read_bytes())
    partial.replace(JAR)


def build(*, force: bool = False) -> Path:
    """The plugin jar, built unless it is already newer than its inputs."""
    if not force and up_to_date():
        return JAR
    jars = pyspark_jars()
    with tempfile.TemporaryDirectory(prefix="execpods-plugin-") as tmp:
        work = Path(tmp)
        descriptors = work / "allocator.desc"
        _descriptor_set(descriptors)
        classes = work / "classes"
        classes.mkdir()
        _javac(jars, classes)
        _write_jar(classes, descriptors)
    return JAR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    try:
        jar = build(force=args.force)
    except BuildError as error:
        print(f"build_spark_plugin: {error}", file=sys.stderr)
        return 1
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
