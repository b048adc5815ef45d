"""A user's Spark driver under test: start, wait until its executors run, stop.

Run through spark-submit in client mode (see docs/spark.md), e.g. under ``kubesim -- ...``. It
asks the API server (``KUBESIM_URL``) for its own executor pods until
``spark.executor.instances`` of them are Running, then stops Spark; exit code 1 if they never
do within ``--timeout`` seconds. Executors on kubesim never connect back, so this job runs no
tasks: it tests what the driver does on Kubernetes (allocation, configuration, clean-up).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import urllib.parse
import urllib.request


def running_executors(api_url: str, namespace: str, app_id: str) -> int:
    selector = urllib.parse.quote(f"spark-app-selector={app_id},spark-role=executor")
    url = f"{api_url}/api/v1/namespaces/{namespace}/pods?labelSelector={selector}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        pods = json.load(resp)["items"]
    return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    wanted = int(conf.get("spark.executor.instances", "2"))
    namespace = conf.get("spark.kubernetes.namespace", "default")
    app_id = spark.sparkContext.applicationId
    api_url = os.environ["KUBESIM_URL"]
    pause = threading.Event()
    reached = False
    for _ in range(int(args.timeout / 0.25)):
        if running_executors(api_url, namespace, app_id) >= wanted:
            reached = True
            break
        pause.wait(0.25)
    print(json.dumps({"appId": app_id, "executorsRunning": reached, "wanted": wanted}), flush=True)
    spark.stop()
    return 0 if reached else 1


if __name__ == "__main__":
    sys.exit(main())
