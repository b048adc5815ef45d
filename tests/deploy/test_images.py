"""integrations/spark/Containerfile: Spark's image plus the plugin in /opt/spark/jars.

It cannot be built here (apache/spark is in a registry this machine does not reach); what it
relies on is checked: the base is the Spark the plugin is built for, the jar it copies is the one
`tools/dev.py spark-plugin` writes, into the folder every Spark class path includes, owned by
root and readable by Spark's user.
"""

from __future__ import annotations

from pathlib import Path

from execpods.devtools.spark_plugin import JAR_NAME, PYSPARK_VERSION

from tests.deploy.test_dockerfile import parse

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "integrations" / "spark" / "Containerfile"


def test_the_spark_image_adds_the_plugin_jar_to_sparks_own_jars() -> None:
    _, stages = parse(CONTAINERFILE.read_text(encoding="utf-8"))
    (stage,) = stages
    assert stage.base == f"apache/spark:{PYSPARK_VERSION}"
    (copy,) = stage.all("COPY")
    flags, source, target = copy.split()[:-2], copy.split()[-2], copy.split()[-1]
    assert source == f"integrations/spark/build/{JAR_NAME}"
    assert target == f"/opt/spark/jars/{JAR_NAME}"
    assert "--chown=0:0" in flags
    assert "--chmod=0644" in flags
