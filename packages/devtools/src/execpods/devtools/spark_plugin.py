"""Build the Spark pods-allocator plugin (integrations/spark) with javac against pyspark's jars.

    python -m execpods.devtools.spark_plugin [--out DIR]     # prints the jar's path

There is no Maven here: the classpath is the jars the pinned pyspark wheel ships (Spark's
Kubernetes backend, fabric8, and spark-connect's relocated gRPC and protobuf), and the jar is
written with zipfile, so only ``javac`` (openjdk-17-jdk-headless) is needed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["JAR_NAME", "SOURCES", "build", "main", "pyspark_jars"]

ROOT = Path(__file__).resolve().parents[5]
SOURCES = ROOT / "integrations" / "spark" / "src" / "main" / "java"
JAR_NAME = "execpods-spark.jar"


def pyspark_jars() -> Path:
    """The directory of jars inside the installed pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed (the 'spark' dependency group)")
    return Path(spec.origin).parent / "jars"


def build(out_dir: Path) -> Path:
    """Compile the plugin and write ``out_dir/execpods-spark.jar``; returns its path."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is missing (python3 tools/dev.py installs a JDK)")
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    out_dir.mkdir(parents=True, exist_ok=True)
    jar = out_dir / JAR_NAME
    with tempfile.TemporaryDirectory(prefix="execpods-spark-") as classes:
        command = [
            javac, "--release", "17",
            "-Xlint:all", "-Xlint:-classfile", "-Xlint:-processing", "-Xlint:-path",
            "-d", classes, "-cp", f"{pyspark_jars()}{os.sep}*", *sources,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed:\n{done.stdout}{done.stderr}")
        with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
    return jar


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT / "integrations" / "spark" / "build"
    parser.add_argument("--out", type=Path, default=default, help="output directory")
    args = parser.parse_args(argv)
    print(build(args.out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
