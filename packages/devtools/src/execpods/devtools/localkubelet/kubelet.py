"""The local kubelet: runs the pods that name its scheduler as processes on this machine.

kubesim's kubelet only simulates containers; a cluster-mode Spark driver must really run (its JVM,
and the execpods sidecar beside it) for a rehearsal of cluster mode to mean anything. Pods whose
`spec.schedulerName` is this kubelet's (`execpods-local`; Spark sets it on the driver pod with
`spark.kubernetes.driver.scheduler.name`) are left alone by kubesim's scheduler, as
kube-scheduler leaves another scheduler's pods: this kubelet binds them to its node (the
`binding` subresource), runs their containers (pod.py) and writes their status, over the API
only, so it works against kubesim and against a real API server alike.

    execpods-local-kubelet --kubeconfig KUBECONFIG -- spark-submit ...   # runs until it exits

Needs root (or unprivileged user namespaces) for `unshare`/`nsenter`, `ip` and `openssl`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from execpods.devtools.localkubelet.apiclient import Api, ApiFailed
from execpods.devtools.localkubelet.images import ImageCatalogue
from execpods.devtools.localkubelet.pod import PodRunner
from execpods.devtools.localkubelet.relay import ApiRelay

__all__ = ["SCHEDULER_NAME", "LocalKubelet", "main", "missing_tools"]

_log = logging.getLogger(__name__)
SCHEDULER_NAME = "execpods-local"
TOOLS = ("unshare", "nsenter", "ip", "openssl", "mount")
LOGS_ENV = "EXECPODS_LOCAL_KUBELET_LOGS"
"""A folder: on exit, each pod's container logs are copied into `<folder>/<namespace>_<pod>/`."""


def missing_tools() -> list[str]:
    """Why this machine cannot run the local kubelet (empty: it can)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


class LocalKubelet:
    """Binds and runs the pods naming `scheduler_name`, until `close`."""

    def __init__(
        self,
        api: Api,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        namespace: str | None = None,
        images: ImageCatalogue | None = None,
        folder: Path | None = None,
        poll_seconds: float = 0.2,
    ) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.node = scheduler_name
        self.namespace = namespace
        self.images = images or ImageCatalogue()
        self._owned_folder = folder is None
        # In /tmp, whatever TMPDIR says: the pods' Unix sockets need short paths (108 bytes).
        self.folder = folder or Path(tempfile.mkdtemp(prefix="local-kubelet-", dir="/tmp"))
        ca = Path(api.ca_file) if api.ca_file else None
        self.relay = ApiRelay(api.url, self.folder, ca_file=ca)
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._runners: dict[str, tuple[PodRunner, threading.Thread]] = {}
        self._thread = threading.Thread(target=self._loop, name="local-kubelet", daemon=True)

    def start(self) -> LocalKubelet:
        self._thread.start()
        return self

    def __enter__(self) -> LocalKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pod_folder(self, namespace: str, name: str) -> Path | None:
        """Where a pod's logs (`logs/<container>.log`) and volumes are, once it has run here."""
        for runner, _ in self._runners.values():
            if (runner.namespace, runner.name) == (namespace, name):
                return runner.folder
        return None

    def _token(self, namespace: str, account: str) -> str:
        """A token for the pod's service account (TokenRequest), else one the server ignores."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
        body["spec"] = {"expirationSeconds": 3600}  # type: ignore[assignment]
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        try:
            return str(self.api.request("POST", path, body)["status"]["token"])
        except (ApiFailed, KeyError, TypeError):
            return "local-kubelet-unverified-token"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                pods = self.api.pods(self.namespace, f"spec.schedulerName={self.scheduler_name}")
            except (ApiFailed, OSError) as exc:
                _log.info("local kubelet: listing pods failed: %s", exc)
                pods = []
            for pod in pods:
                self._handle(pod)
            self._stop.wait(self._poll)

    def _handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        if uid in self._runners:
            if meta.get("deletionTimestamp"):
                grace = meta.get("deletionGracePeriodSeconds")
                self._runners[uid][0].delete(float(30 if grace is None else grace))
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        if not spec.get("nodeName"):
            if meta.get("deletionTimestamp"):
                return
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
            }
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"
            try:
                self.api.request("POST", path, binding)
            except ApiFailed as exc:
                _log.info("local kubelet: binding %s failed: %s", meta["name"], exc)
                return
            pod = self.api.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        elif spec["nodeName"] != self.node:
            return
        folder = self.folder / uid[:13]
        folder.mkdir(parents=True, exist_ok=True)
        runner = PodRunner(
            api=self.api,
            pod=pod,
            folder=folder,
            images=self.images,
            api_socket=self.relay.serve,
            ca_file=Path(self.relay.ca_file),
            token=self._token(meta["namespace"], spec.get("serviceAccountName") or "default"),
        )
        thread = threading.Thread(target=runner.run, name=f"pod-{meta['name']}", daemon=True)
        self._runners[uid] = (runner, thread)
        _log.info("local kubelet: running pod %s/%s", meta["namespace"], meta["name"])
        thread.start()

    def wait_for_pods(self, timeout: float) -> bool:
        """Wait until every pod started here has ended; False on timeout."""
        for _, thread in list(self._runners.values()):
            thread.join(timeout)
            if thread.is_alive():
                return False
        return True

    def close(self, grace: float = 10.0) -> None:
        """Stop polling; pods still running are stopped (as a node shutting down) and end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for runner, _ in self._runners.values():
            runner.delete(grace)
        for _, thread in self._runners.values():
            thread.join(grace + 10)
        self.relay.close()
        if keep := os.environ.get(LOGS_ENV):  # the pods' logs, for a test to read
            for runner, _ in self._runners.values():
                target = Path(keep) / f"{runner.namespace}_{runner.name}"
                shutil.copytree(runner.folder / "logs", target, dirs_exist_ok=True)
        if self._owned_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="execpods-local-kubelet", description=__doc__)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    parser.add_argument("--api-url", help="instead of a kubeconfig (a plain-HTTP kubesim)")
    parser.add_argument("--scheduler-name", default=SCHEDULER_NAME)
    parser.add_argument("--namespace", help="only this namespace's pods (default: all)")
    parser.add_argument("--plugin-jar", type=Path, help="the Spark plugin jar the images carry")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run, then stop")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="local-kubelet: %(message)s")
    if missing := missing_tools():
        parser.error(f"this machine lacks what the local kubelet needs: {', '.join(missing)}")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    images = (
        ImageCatalogue() if args.plugin_jar is None else ImageCatalogue(plugin_jar=args.plugin_jar)
    )
    api = Api(api_url=args.api_url) if args.api_url else Api(kubeconfig=args.kubeconfig)
    kubelet = LocalKubelet(api, scheduler_name=args.scheduler_name, namespace=args.namespace,
                           images=images)  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with kubelet:
        if not command:
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
            return 0
        done = subprocess.run(command, check=False)
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
