#!/usr/bin/env python3
"""The Spark 4.3 property keys, read from the Spark jars the project installs (pyspark's).

    python tools/spark_keys.py            # rewrite tools/spark-keys.tsv from the jars
    python tools/spark_keys.py --check    # fail if tools/spark-keys.tsv differs from the jars

`ListSparkKeys.java` runs on the pyspark jars (`java` single-file source launch: no build): it
loads Spark's Kubernetes `Config$` and core `internal.config.package$`, reads every `ConfigEntry`
(key and default, as Spark prints them) and every `spark.*.` key-family prefix they define.
The snapshot in `tools/spark-keys.tsv` is what `docs/configuration.md`'s table of Spark keys is
generated from (no JVM needed for that); `tests/sidecar/test_spark_keys.py` checks it against the
jars and the sidecar's catalogue (`execpods.sidecar.config.sparkkeys`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tools" / "spark-keys.tsv"
SOURCE = ROOT / "tools" / "ListSparkKeys.java"
CLASSES = ("org.apache.spark.deploy.k8s.Config$", "org.apache.spark.internal.config.package$")


def jars_dir() -> Path:
    import pyspark  # the project's own dependency (the `spark` group)

    return Path(pyspark.__file__).resolve().parent / "jars"


def read_jar_keys() -> dict[str, str]:
    """key -> Spark's default string ('' for a family prefix), from the installed jars."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java is not installed (python3 tools/dev.py bootstrap installs it)")
    completed = subprocess.run(
        [java, "-cp", f"{jars_dir()}/*", str(SOURCE), *CLASSES],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    keys: dict[str, str] = {}
    for line in completed.stdout.splitlines():
        key, kind, default = [*line.split("\t"), "", ""][:3]
        keys[key] = "" if kind == "prefix" else default
    return keys


def render(keys: dict[str, str]) -> str:
    return "".join(f"{key}\t{default}\n" for key, default in sorted(keys.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check for drift")
    args = parser.parse_args()
    fresh = render(read_jar_keys())
    if args.check:
        if SNAPSHOT.read_text(encoding="utf-8") != fresh:
            print("tools/spark-keys.tsv differs from the installed Spark jars; run")
            print("`python tools/spark_keys.py`")
            return 1
        print("tools/spark-keys.tsv matches the installed Spark jars")
        return 0
    SNAPSHOT.write_text(fresh, encoding="utf-8")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
