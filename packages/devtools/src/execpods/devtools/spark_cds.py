"""A class-data sharing archive for the Spark driver JVMs the tests start, so each starts quicker.

    python -m execpods.devtools.spark_cds          # build it if missing; prints its path
    python -m execpods.devtools.spark_cds --opts   # the JVM options that use it

Every real-Spark test starts a driver JVM (pyspark's ``spark-submit``) that loads some ten
thousand classes of Spark, fabric8 and vert.x, verifies them and JIT-compiles code that runs
once: about 10 CPU-seconds a start here, which on 2 cores is most of what the real-Spark tests
cost. An AppCDS archive (``-XX:ArchiveClassesAtExit``, Java 13+) holds those classes parsed and
verified; with C1 alone compiling (``-XX:TieredStopAtLevel=1``) a start costs about 3
CPU-seconds. Neither changes what the JVM runs: the same bytecode, the same Spark.

The archive is made once by a short Spark driver against kubesim (about 15 s) and kept in the
virtual environment (``.venv/share/execpods``), under a key of the Java runtime and the jars it
was made from: a JVM checks that the class path's jars are the ones archived (paths, sizes and
times), so an archive serves only the environment that made it. A JVM given an archive that does
not match runs without it, as before (``-Xshare:auto``, the default); tests then only start
slower. :func:`java_options` is what the test session puts in ``SPARK_SUBMIT_OPTS``, which
``spark-submit`` adds to the driver JVM's options in client mode.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

__all__ = ["ENV", "archive_path", "build", "java_options", "main"]

_log = logging.getLogger(__name__)

ENV = "SPARK_SUBMIT_OPTS"
"""Read by ``spark-submit`` (Spark's launcher) into the options of the JVM it starts."""

_FAST_START = ("-XX:TieredStopAtLevel=1",)
"""C1 only: short-lived drivers spend less CPU compiling code that runs a few times."""

_TRAINING_JOB = textwrap.dedent(
    """
    import json, os, sys, time, urllib.request
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    sc = spark.sparkContext
    url = os.environ["KUBESIM_URL"]
    selector = "spark-app-selector=" + sc.applicationId
    for _ in range(120):  # until Spark's allocator made its executor pods (or 30 s)
        with urllib.request.urlopen(url + "/api/v1/pods?labelSelector=" + selector) as r:
            if len(json.load(r)["items"]) >= 2:
                break
        time.sleep(0.25)
    hosts = sc._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(sc._jvm.java.util.HashMap())
    sc._jsc.sc().requestTotalExecutors(1, 0, hosts)
    spark.stop()
    """
)
"""What the archive is trained on: what the tests' drivers do (start on Kubernetes, allocate,
change the target, stop)."""


def _pyspark_home() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def _java() -> str | None:
    found = shutil.which("java")
    return os.path.realpath(found) if found else None


def archive_path() -> Path | None:
    """Where the archive for this environment's Java and Spark jars lives (it may not exist
    yet), or None when Java or pyspark is missing."""
    java, home = _java(), _pyspark_home()
    if java is None or home is None:
        return None
    digest = hashlib.sha256()
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    for part in (java, version.stderr, *_FAST_START):
        digest.update(part.encode() + b"\0")
    for jar in sorted((home / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return Path(sys.prefix) / "share" / "execpods" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def java_options(archive: Path | None) -> str:
    """The driver JVM's options: C1 only, and the archive when it exists."""
    options = list(_FAST_START)
    if archive is not None and archive.exists():
        options.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(options)


def build(*, timeout: float = 300.0) -> Path | None:
    """Make the archive unless it exists (a file lock makes concurrent callers wait for one
    build); returns its path, or None when Java or pyspark is missing."""
    target = archive_path()
    if target is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        for stale in target.parent.glob("spark-driver-*.jsa"):
            stale.unlink()  # made for jars or a Java that are gone
        started = time.monotonic()
        _train(target, timeout)
        _log.info("Spark driver CDS archive made in %.0f s: %s", time.monotonic() - started, target)
    return target


def _train(target: Path, timeout: float) -> None:
    """Run the training job under ``kubesim -- spark-submit`` with the JVM dumping its classes
    at exit; spark-submit's process is the JVM, so its exit means the archive is written."""
    bin_dir = Path(sys.executable).parent
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    with tempfile.TemporaryDirectory(prefix="execpods-cds-") as tmp:
        job = Path(tmp) / "train.py"
        job.write_text(_TRAINING_JOB, encoding="utf-8")
        argv = [
            str(bin_dir / "kubesim"), "--nodes", "1", "--node-capacity", "4", "--",
            str(bin_dir / "spark-submit"), "--master", "{master}", "--deploy-mode", "client",
            "--conf", "spark.kubernetes.container.image=apache/spark:4.3.0",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.executor.instances=2",
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=0",
            str(job),
        ]  # fmt: skip
        options = f"{' '.join(_FAST_START)} -XX:ArchiveClassesAtExit={partial}"
        env = {
            **os.environ,
            ENV: options,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "TMPDIR": tmp,
        }
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False, env=env
            )
            if done.returncode != 0 or not partial.exists():
                raise RuntimeError(
                    f"the training run exited {done.returncode} without an archive:\n"
                    f"{done.stderr[-3000:]}"
                )
            partial.replace(target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opts", action="store_true", help="print the JVM options instead")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.opts:
        print(java_options(archive_path()))
        return 0
    try:
        archive = build()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        # The tests still run without it, only slower.
        print(f"spark_cds: no archive: {error}", file=sys.stderr)
        return 0
    print(archive or "spark_cds: no Java or pyspark here: nothing to archive", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
