"""Build the Spark pods-allocator plugin (integrations/spark) with javac against pyspark's jars.

    python -m execpods.devtools.spark_plugin [--out DIR] [--force]   # prints the jar's path
    python3 tools/dev.py spark-plugin                                 # the same, after bootstrap

There is no Maven here: the classpath is the jars the pinned pyspark wheel ships (Spark's
Kubernetes backend, fabric8, and spark-connect's relocated gRPC and protobuf), and the jar is
written with zipfile, so only ``javac`` (openjdk-17-jdk-headless) is needed. The plugin speaks
the contract through protobuf's ``DynamicMessage`` over a descriptor set that
``grpc_tools.protoc --descriptor_set_out`` compiles from proto/ into the jar: there is no Java
code generator here (grpcio-tools' protoc has none), and descriptors are data, so they need no
gencode/runtime version pairing with the relocated protobuf. Entries carry a fixed timestamp
(same inputs, same bytes), and a jar newer than every input is kept as it is.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["JAR_NAME", "PYSPARK_VERSION", "SOURCES", "build", "main", "pyspark_jars"]

ROOT = Path(__file__).resolve().parents[5]
SOURCES = ROOT / "integrations" / "spark" / "src" / "main" / "java"
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "execpods" / "v1" / "allocator.proto"
JAR_NAME = "execpods-spark.jar"
PYSPARK_VERSION = "4.3.0"
"""The Spark the plugin is compiled against and tested with (the `spark` dependency group)."""
DESCRIPTORS = "io/execpods/spark/allocator.desc"
"""Where the plugin's SidecarClient finds the contract's descriptors in the jar."""
_FIXED_TIME = (2026, 1, 1, 0, 0, 0)
_MANIFEST = (
    "Manifest-Version: 1.0\r\n"
    "Implementation-Title: execpods Spark pods allocator\r\n"
    f"Spark-Version: {PYSPARK_VERSION}\r\n"
    "\r\n"
)


def pyspark_jars() -> Path:
    """The directory of jars inside the installed pyspark, which must be the pinned version."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed (the 'spark' dependency group)")
    version = importlib.metadata.version("pyspark")
    if version != PYSPARK_VERSION:
        raise RuntimeError(f"pyspark {version} is installed; the plugin is for {PYSPARK_VERSION}")
    return Path(spec.origin).parent / "jars"


def _inputs() -> list[Path]:
    return [Path(__file__), PROTO, *sorted(SOURCES.rglob("*.java"))]


def _up_to_date(jar: Path) -> bool:
    return jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in _inputs())


def _descriptor_set(target: Path) -> None:
    command = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}",
        f"--descriptor_set_out={target}", "--include_imports",
        str(PROTO.relative_to(PROTO_ROOT)),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed on {PROTO}:\n{done.stderr}")


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def build(out_dir: Path, *, force: bool = False) -> Path:
    """Compile the plugin into ``out_dir/execpods-spark.jar`` (unless it is already newer than
    every input); returns its path."""
    jar = out_dir / JAR_NAME
    if not force and _up_to_date(jar):
        return jar
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is missing (python3 tools/dev.py installs a JDK)")
    jars = pyspark_jars()
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="execpods-spark-") as tmp:
        classes, descriptors = Path(tmp) / "classes", Path(tmp) / "allocator.desc"
        classes.mkdir()
        _descriptor_set(descriptors)
        command = [
            javac, "--release", "17", "-encoding", "UTF-8",
            "-Xlint:all", "-Xlint:-classfile", "-Xlint:-processing", "-Xlint:-path",
            "-d", str(classes), "-cp", f"{jars}{os.sep}*", *sources,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")
        partial = jar.with_suffix(".jar.part")
        with zipfile.ZipFile(partial, "w") as archive:
            archive.writestr(_entry("META-INF/MANIFEST.MF"), _MANIFEST)
            archive.writestr(_entry(DESCRIPTORS), descriptors.read_bytes())
            for path in sorted(classes.rglob("*.class")):
                archive.writestr(_entry(path.relative_to(classes).as_posix()), path.read_bytes())
        partial.replace(jar)
    return jar


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT / "integrations" / "spark" / "build"
    parser.add_argument("--out", type=Path, default=default, help="output directory")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    try:
        jar = build(args.out, force=args.force)
    except RuntimeError as error:
        print(f"spark_plugin: {error}", file=sys.stderr)
        return 1
    print(jar, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
