"""A user's Spark driver under test: start, wait until its executors run, stop.

Run through spark-submit in client mode (see docs/spark.md), e.g. under ``kubesim -- ...``, or in
cluster mode in a driver pod. It asks the API server (``KUBESIM_URL``, else the in-cluster
service account's ``https://$KUBERNETES_SERVICE_HOST``) for its own executor pods until
``spark.executor.instances`` of them are Running, then stops Spark; exit code 1 if they never
do within ``--timeout`` seconds. Executors on kubesim never connect back, so this job runs no
tasks: it tests what the driver does on Kubernetes (allocation, configuration, clean-up).
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import threading
import urllib.parse
import urllib.request

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def _request(path: str) -> urllib.request.Request:
    """The API server: kubesim's URL, or the in-cluster one with the service account's token."""
    if url := os.environ.get("KUBESIM_URL"):
        return urllib.request.Request(url + path)
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    with open(f"{SERVICE_ACCOUNT}/token", encoding="utf-8") as token:
        headers = {"Authorization": f"Bearer {token.read().strip()}"}
    return urllib.request.Request(f"https://{host}:{port}{path}", headers=headers)


def running_executors(namespace: str, app_id: str) -> int:
    selector = urllib.parse.quote(f"spark-app-selector={app_id},spark-role=executor")
    request = _request(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    context = None
    if request.full_url.startswith("https:"):
        context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
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
    pause = threading.Event()
    reached = False
    for _ in range(int(args.timeout / 0.25)):
        if running_executors(namespace, app_id) >= wanted:
            reached = True
            break
        pause.wait(0.25)
    print(json.dumps({"appId": app_id, "executorsRunning": reached, "wanted": wanted}), flush=True)
    spark.stop()
    return 0 if reached else 1


if __name__ == "__main__":
    sys.exit(main())
