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

from execpods.devtools.java_contract import render as render_contract

__all__ = [
    "CONTRACT_JAVA",
    "JAR_NAME",
    "PYSPARK_VERSION",
    "SOURCES",
    "TESTKIT_JAR_NAME",
    "build",
    "build_testkit",
    "main",
    "pyspark_jars",
]

ROOT = Path(__file__).resolve().parents[5]
SOURCES = ROOT / "integrations" / "spark" / "src" / "main" / "java"
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "execpods" / "v1" / "allocator.proto"
JAR_NAME = "execpods-spark.jar"
CONTRACT_JAVA = Path("io") / "execpods" / "spark" / "Contract.java"
"""The contract's names (`java_contract`), generated from the proto at every build."""
TESTKIT_SOURCES = ROOT / "integrations" / "spark" / "src" / "test" / "java"
TESTKIT_JAR_NAME = "execpods-spark-testkit.jar"
"""Test equipment for real Spark on a simulated cluster (never shipped with the plugin)."""
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
    generator = Path(__file__).with_name("java_contract.py")
    return [Path(__file__), generator, PROTO, *sorted(SOURCES.rglob("*.java"))]


def _up_to_date(jar: Path) -> bool:
    return jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in _inputs())


def descriptor_set(target: Path, *, proto_root: Path = PROTO_ROOT) -> None:
    """Compile ``proto_root``'s allocator.proto into a descriptor set at ``target``."""
    proto = proto_root / PROTO.relative_to(PROTO_ROOT)
    command = [
        sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_root}",
        f"--descriptor_set_out={target}", "--include_imports",
        str(proto.relative_to(proto_root)),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed on {proto}:\n{done.stderr}")


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def _javac(sources: list[Path], classes: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is missing (python3 tools/dev.py installs a JDK)")
    command = [
        javac, "--release", "17", "-encoding", "UTF-8",
        "-Xlint:all", "-Xlint:-classfile", "-Xlint:-processing", "-Xlint:-path",
        "-d", str(classes), "-cp", f"{pyspark_jars()}{os.sep}*", *map(str, sources),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")


def _write_jar(jar: Path, classes: Path, extra: dict[str, bytes]) -> None:
    partial = jar.with_suffix(".jar.part")
    with zipfile.ZipFile(partial, "w") as archive:
        archive.writestr(_entry("META-INF/MANIFEST.MF"), _MANIFEST)
        for name, data in sorted(extra.items()):
            archive.writestr(_entry(name), data)
        for path in sorted(classes.rglob("*.class")):
            archive.writestr(_entry(path.relative_to(classes).as_posix()), path.read_bytes())
    partial.replace(jar)


def build(out_dir: Path, *, force: bool = False, proto_root: Path = PROTO_ROOT) -> Path:
    """Compile the plugin into ``out_dir/execpods-spark.jar`` (unless it is already newer than
    every input); returns its path.

    The contract's names (``Contract.java``) are generated from ``proto_root``'s proto here, at
    every build, and compiled with the plugin: a field renamed in the proto is a compile error
    wherever the plugin still names it.
    """
    jar = out_dir / JAR_NAME
    if not force and proto_root == PROTO_ROOT and _up_to_date(jar):
        return jar
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="execpods-spark-") as tmp:
        classes, descriptors = Path(tmp) / "classes", Path(tmp) / "allocator.desc"
        classes.mkdir()
        descriptor_set(descriptors, proto_root=proto_root)
        contract = Path(tmp) / "generated" / CONTRACT_JAVA
        contract.parent.mkdir(parents=True)
        contract.write_text(render_contract(descriptors.read_bytes()))
        _javac([*sorted(SOURCES.rglob("*.java")), contract], classes)
        _write_jar(jar, classes, {DESCRIPTORS: descriptors.read_bytes()})
    return jar


def build_testkit(out_dir: Path, *, force: bool = False) -> Path:
    """Compile the test kit (`integrations/spark/src/test/java`: simulated executors that
    register with a real driver) into ``out_dir/execpods-spark-testkit.jar``."""
    jar = out_dir / TESTKIT_JAR_NAME
    sources = sorted(TESTKIT_SOURCES.rglob("*.java"))
    inputs = [Path(__file__), *sources]
    if not force and jar.exists() and all(p.stat().st_mtime <= jar.stat().st_mtime for p in inputs):
        return jar
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="execpods-spark-testkit-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        _javac(sources, classes)
        _write_jar(jar, classes, {})
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
