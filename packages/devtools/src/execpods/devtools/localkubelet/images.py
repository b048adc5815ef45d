"""What the local kubelet runs for an image name: the image's files, entrypoint and environment,
made from this machine's own installs (no registry is reachable here).

An image is a set of paths under `/opt` (the only image-owned tree the pods here use), each a
symbolic link to a host file or folder, plus the image's ENTRYPOINT, CMD, ENV and WORKDIR as
its Containerfile sets them:

- the execpods sidecar image (`execpods/sidecar:*`, the repository's Dockerfile): a virtual
  environment at `/opt/execpods` (this checkout's `.venv`), the Spark plugin's jar at
  `/opt/execpods/share/spark/execpods-spark.jar`, entrypoint `execpods-sidecar`, command `serve`;
- Spark's image (`apache/spark:4.3.0`, and `execpods/spark:4.3.0`, which is it plus the plugin in
  `/opt/spark/jars`, `integrations/spark/Containerfile`): `/opt/spark` from the pinned pyspark
  (its `bin`, `jars`, `examples`...), `/opt/entrypoint.sh` as below, `WORKDIR /opt/spark/work-dir`.

The entrypoint of Spark's image (apache/spark-docker's `entrypoint.sh`) turns `driver ARGS` into
`spark-submit --conf spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS --conf
spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS --deploy-mode client ARGS`
(and anything else into itself); `SPARK_ENTRYPOINT` below does that, without tini.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from execpods.devtools.spark_plugin import JAR_NAME, ROOT, pyspark_jars

__all__ = ["SPARK_ENTRYPOINT", "Image", "ImageCatalogue"]

SPARK_ENTRYPOINT = """#!/bin/bash
# The driver/executor dispatch of Spark's image entrypoint (apache/spark-docker), for the
# local kubelet: no tini, no passwd entry for an anonymous uid (the processes run as the caller).
set -eo pipefail
case "$1" in
  driver)
    shift 1
    exec "$SPARK_HOME/bin/spark-submit" \\
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \\
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \\
      --deploy-mode client "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
"""

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _built_jar() -> Path | None:
    jar = ROOT / "integrations" / "spark" / "build" / JAR_NAME
    return jar if jar.is_file() else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """An image as the local kubelet runs it."""

    name: str
    #: container path (under /opt) -> host path its symbolic link points to
    links: dict[str, Path] = field(default_factory=dict)
    #: container path -> file content written there (an entrypoint script)
    files: dict[str, str] = field(default_factory=dict)
    folders: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageCatalogue:
    """The images this machine can run, from its virtual environment and the plugin jar."""

    venv: Path = field(default_factory=lambda: Path(sys.prefix))
    #: Default: the jar `tools/dev.py spark-plugin` builds in this checkout, when it is there.
    plugin_jar: Path | None = field(default_factory=_built_jar)

    def _pyspark(self) -> Path:
        return pyspark_jars().parent

    def _java_home(self) -> str:
        java = shutil.which("java")
        if java is None:
            return ""
        return str(Path(os.path.realpath(java)).parent.parent)

    def resolve(self, reference: str) -> Image | None:
        """The image a pod names, or None: this kubelet cannot pull it."""
        repository = reference.rsplit("@", 1)[0]
        name, _, tag = (
            repository.rpartition(":")
            if ":" in repository.split("/")[-1]
            else (
                repository,
                "",
                "",
            )
        )
        short = name.split("/", 1)[-1] if name.count("/") > 1 else name
        if short.endswith(("execpods/sidecar", "execpods-sidecar")):
            return self._sidecar(reference)
        if short in ("apache/spark", "spark", "execpods/spark") and tag.startswith("4.3"):
            return self._spark(reference, with_plugin=short == "execpods/spark")
        return None

    def _sidecar(self, reference: str) -> Image:
        links = {
            "/opt/execpods/bin": self.venv / "bin",
            "/opt/execpods/lib": self.venv / "lib",
            "/opt/execpods/pyvenv.cfg": self.venv / "pyvenv.cfg",
        }
        if self.plugin_jar is not None:
            links["/opt/execpods/share/spark/execpods-spark.jar"] = self.plugin_jar
        return Image(
            name=reference,
            links=links,
            entrypoint=("execpods-sidecar",),
            cmd=("serve",),
            env={
                "PATH": f"/opt/execpods/bin:{_PATH}",
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )

    def _spark(self, reference: str, *, with_plugin: bool) -> Image:
        pyspark = self._pyspark()
        links = {
            f"/opt/spark/{entry.name}": entry
            for entry in pyspark.iterdir()
            if entry.name in ("bin", "sbin", "examples", "python", "data", "licenses")
        }
        links |= {f"/opt/spark/jars/{jar.name}": jar for jar in (pyspark / "jars").glob("*.jar")}
        if with_plugin and self.plugin_jar is not None:
            links["/opt/spark/jars/execpods-spark.jar"] = self.plugin_jar
        python = str(self.venv / "bin" / "python3")
        return Image(
            name=reference,
            links=links,
            files={"/opt/entrypoint.sh": SPARK_ENTRYPOINT},
            folders=("/opt/spark/work-dir",),
            entrypoint=("/opt/entrypoint.sh",),
            env={
                "SPARK_HOME": "/opt/spark",
                "JAVA_HOME": self._java_home(),
                "PATH": f"{self.venv / 'bin'}:{_PATH}",
                "PYSPARK_PYTHON": python,
                "PYSPARK_DRIVER_PYTHON": python,
            },
            workdir="/opt/spark/work-dir",
        )
