"""A real Spark driver (pyspark, JVM) in client mode against a Kubernetes API URL, steered on stdin.

Run as a script in its own process (one SparkContext per JVM):

    python spark_driver.py --master k8s://http://127.0.0.1:PORT --executors 4 [--conf k=v ...]

It prints one JSON line per event on stdout (``started`` with the application id, then one per
command) and reads commands on stdin, one per line:

- ``total N``: set the executor target, as dynamic allocation does
  (``SparkContext.requestTotalExecutors``);
- ``stop``: ``SparkSession.stop()``, which deletes the executor pods and ConfigMap, then exit.

End of input is a ``stop``. Executors on a simulated cluster never connect back, which is fine:
everything here is about pod allocation, not tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def defaults(master: str, executors: int) -> dict[str, str]:
    """The settings a client-mode driver outside the cluster needs against kubesim."""
    return {
        "spark.master": master,
        "spark.submit.deployMode": "client",
        "spark.app.name": "kubesim-spark",
        "spark.executor.instances": str(executors),
        "spark.kubernetes.namespace": "default",
        "spark.kubernetes.container.image": "apache/spark:4.3.0",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        # Executors on kubesim never register: do not wait 30 s for them at start-up.
        "spark.scheduler.minRegisteredResourcesRatio": "0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "1s",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", required=True, help="k8s://http://127.0.0.1:PORT")
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    conf = defaults(args.master, args.executors)
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--conf takes KEY=VALUE, got {item!r}")
        conf[key] = value

    from pyspark.sql import SparkSession  # noqa: PLC0415 (only in the driver's own process)

    builder: Any = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    _say("started", appId=sc.applicationId)
    jvm: Any = sc._jvm
    java_sc: Any = sc._jsc.sc()
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "total" and len(words) == 2:
                no_hosts = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
                    jvm.java.util.HashMap()
                )
                ok = java_sc.requestTotalExecutors(int(words[1]), 0, no_hosts)
                _say("total", target=int(words[1]), accepted=bool(ok))
            elif words[0] == "stop":
                break
            else:
                _say("error", message=f"unknown command {line.strip()!r}")
    finally:
        spark.stop()
        _say("stopped")
    return 0


def _run() -> None:
    """`main`, and an end that never waits on a dead JVM: when Spark's JVM exits on its own (the
    sidecar failed the application: `System.exit(11)`), pyspark's call raises and the
    interpreter's shutdown can then wait on py4j's connections to the gone gateway for minutes
    (once over a test's 60 s on a loaded machine). The traceback is printed and the process
    leaves at once, with 1."""
    try:
        code = main()
    except SystemExit:
        raise  # argparse's own ends (--help, a bad argument)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    sys.exit(code)


if __name__ == "__main__":
    _run()
