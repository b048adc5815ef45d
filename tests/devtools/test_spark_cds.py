"""The class-data sharing archive the real-Spark tests' driver JVMs start from
(execpods.devtools.spark_cds): its options, its key, and that a driver JVM really maps it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from execpods.devtools import spark_cds
from execpods.devtools.spark import spark_available


def test_the_options_are_c1_alone_until_the_archive_exists(tmp_path: Path) -> None:
    assert spark_cds.java_options(None) == "-XX:TieredStopAtLevel=1"
    archive = tmp_path / "spark-driver.jsa"
    assert spark_cds.java_options(archive) == "-XX:TieredStopAtLevel=1"
    archive.write_bytes(b"")
    assert spark_cds.java_options(archive) == (
        f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive}"
    )


def test_the_archive_is_the_environments_and_named_after_its_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JVM maps an archive only for the jars it was made from: another jar (or another size
    of one) is another archive, kept in this environment."""
    if spark_available() is not None:
        pytest.skip(str(spark_available()))
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"one")
    monkeypatch.setattr(spark_cds, "_pyspark_home", lambda: tmp_path)
    first = spark_cds.archive_path()
    assert first is not None
    assert first == spark_cds.archive_path()
    assert first.parent == Path(sys.prefix) / "share" / "execpods"
    (jars / "spark-core.jar").write_bytes(b"other")
    assert spark_cds.archive_path() != first
    monkeypatch.setattr(spark_cds, "_pyspark_home", lambda: None)
    assert spark_cds.archive_path() is None


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.timeout(300)  # it makes the archive if this environment has none yet
def test_spark_submits_jvm_loads_spark_from_the_archive() -> None:
    """Not only options: the JVM spark-submit starts (pyspark's launcher, its class path) maps
    the archive, so Spark's classes come from it (a mismatch would fall back in silence)."""
    if spark_available() is not None:
        pytest.skip(str(spark_available()))
    archive = spark_cds.build()
    assert archive is not None
    assert archive.exists()
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        spark_cds.ENV: f"{spark_cds.java_options(archive)} -Xlog:class+load=info",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [str(bin_dir / "spark-submit"), "--version"],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert "org.apache.spark.deploy.SparkSubmit source: shared objects file (top)" in said, said[
        -3000:
    ]
