"""A real Kubernetes API server on loopback: etcd, kube-apiserver and (optionally)
kube-controller-manager, as controller-runtime's envtest runs them, for the proof tiers.

Each start gets a throwaway folder with its own certificate authority and serving certificate
(made with the system's ``openssl``), a service-account signing key, a static token for an admin
in ``system:masters`` and an etcd data dir; :meth:`RealServer.stop` ends the processes and removes
the folder. The API server runs the admission plugins a cluster has (its defaults, which include
NamespaceLifecycle, ServiceAccount, LimitRanger, ResourceQuota, PodSecurity and Priority, named
again so a change of defaults cannot drop them) with API Priority and Fairness on at its
defaults; ``max_requests_inflight`` and ``max_mutating_requests_inflight`` make a small server.

The controller manager runs only the controllers a namespace-scoped workload relies on and that
need no kubelet: default ServiceAccounts, ResourceQuota status, namespace deletion, the garbage
collector, the root CA ConfigMap and PodDisruptionBudget status. No scheduler and no kubelet run:
:mod:`execpods.kubesim.nodesim` plays the nodes, as kwok does.

Ports: etcd and kube-apiserver take a port number, not a listening socket, so a free loopback
port is found by binding port 0 and reading it back, then handed over (as envtest does); a start
that loses that race is retried on new ports.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from execpods.devtools.realserver import gobuild

__all__ = ["USER", "RealServer", "ServerOptions", "StartError"]

_log = logging.getLogger(__name__)

ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "ServiceAccount",
    "LimitRanger",
    "ResourceQuota",
    "PodSecurity",
    "Priority",
)
"""Named on the command line (they are defaults of kube-apiserver too): the issue's list."""

USER = "execpods-sidecar"
"""The static-token user that is no cluster admin (:meth:`RealServer.user_kubeconfig`)."""

CONTROLLERS = (
    "serviceaccount",
    "resourcequota",
    "namespace",
    "garbagecollector",
    "root-ca-cert-publisher",
    "disruption",
)
"""kube-controller-manager's controllers the tier runs: none of them needs a kubelet."""


class StartError(RuntimeError):
    """A process of the real server did not come up; the message carries its log's tail."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """How to run the server. The defaults are kube-apiserver's own."""

    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    controllers: bool = True
    #: More kube-apiserver flags (``--name=value``), appended last so they win.
    apiserver_args: tuple[str, ...] = ()
    start_timeout: float = 120.0


@dataclass(slots=True)
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child before exec: receive SIGKILL when the parent dies (Linux's
    PR_SET_PDEATHSIG), so a crashed test run leaves no API server behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _openssl(*argv: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        raise StartError(f"openssl {' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")


def _make_pki(folder: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1/localhost signed by it, a service-account key."""
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=folder)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=execpods-test-ca",
        "-out", "ca.crt", cwd=folder,
    )  # fmt: skip
    _openssl("genrsa", "-out", "server.key", "2048", cwd=folder)
    _openssl(
        "req", "-new", "-key", "server.key", "-subj", "/CN=kube-apiserver", "-out", "server.csr",
        cwd=folder,
    )  # fmt: skip
    (folder / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt", cwd=folder,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


@dataclass(slots=True)
class RealServer:
    """etcd + kube-apiserver (+ kube-controller-manager) on loopback; a context manager."""

    options: ServerOptions = field(default_factory=ServerOptions)
    folder: Path | None = None
    url: str = ""
    token: str = ""
    #: A user with no rights until a (Cluster)RoleBinding grants some: unlike the admin (in
    #: system:masters, which API Priority and Fairness exempts), its requests are queued and
    #: throttled as a workload's are.
    user_token: str = ""
    etcd_url: str = ""
    _processes: list[_Process] = field(default_factory=list)

    # -- what clients need -------------------------------------------------------------------------

    @property
    def ca_path(self) -> Path:
        assert self.folder is not None, "the server is not started"
        return self.folder / "ca.crt"

    @property
    def kubeconfig_path(self) -> Path:
        assert self.folder is not None, "the server is not started"
        return self.folder / "kubeconfig"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> RealServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> RealServer:
        """Build the binaries if the cache lacks them, then start and wait until ready."""
        binaries = {name: gobuild.binary(name) for name in gobuild.REAL_SERVER}
        self.folder = Path(tempfile.mkdtemp(prefix="execpods-realserver-"))
        _make_pki(self.folder)
        self.token = secrets.token_hex(16)
        self.user_token = secrets.token_hex(16)
        (self.folder / "tokens.csv").write_text(
            f"{self.token},admin,admin-uid,system:masters\n{self.user_token},{USER},{USER}-uid\n"
        )
        started = time.monotonic()
        try:
            for attempt in range(3):
                try:
                    self._start_etcd(binaries["etcd"])
                    self._start_apiserver(binaries["kube-apiserver"])
                    break
                except StartError:
                    # A port taken between the probe and the bind: new ports, once or twice.
                    self._stop_processes()
                    if attempt == 2:
                        raise
            self._write_kubeconfig()
            if self.options.controllers:
                self._start_controllers(binaries["kube-controller-manager"])
        except BaseException:
            self.stop()
            raise
        _log.info("real API server ready at %s in %.1f s", self.url, time.monotonic() - started)
        return self

    def stop(self) -> None:
        """End every process (SIGTERM, then SIGKILL after 10 s) and remove the folder."""
        self._stop_processes()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _stop_processes(self) -> None:
        # One at a time, clients before their servers: kube-apiserver told to stop while etcd
        # is already gone spends its whole 10 s grace retrying etcd.
        for proc in reversed(self._processes):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
        self._processes.clear()

    # -- the processes -----------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> _Process:
        assert self.folder is not None
        log = self.folder / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (no threads start before exec)
            )
        proc = _Process(name=name, popen=popen, log=log, argv=argv)
        self._processes.append(proc)
        return proc

    def _wait(self, proc: _Process, probe: str, *, tls: bool) -> None:
        deadline = time.monotonic() + self.options.start_timeout
        context = self.ssl_context() if tls else None
        headers = {"Authorization": f"Bearer {self.token}"} if tls else {}
        last = ""
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartError(f"{proc.name} exited ({proc.popen.returncode}):\n{_tail(proc)}")
            try:
                request = urllib.request.Request(probe, headers=headers)
                with urllib.request.urlopen(request, timeout=5, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        raise StartError(f"{proc.name} not ready after {self.options.start_timeout:.0f} s "
                         f"({last}):\n{_tail(proc)}")  # fmt: skip

    def _start_etcd(self, etcd: Path) -> None:
        assert self.folder is not None
        client, peer = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.folder / "etcd-data"
        shutil.rmtree(data, ignore_errors=True)
        proc = self._spawn(
            "etcd",
            [
                str(etcd),
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throwaway store: durability buys nothing here
                "--log-level=warn",
            ],
        )
        self._wait(proc, f"{self.etcd_url}/health", tls=False)

    def _start_apiserver(self, apiserver: Path) -> None:
        assert self.folder is not None
        port = _free_port()
        self.url = f"https://127.0.0.1:{port}"
        o = self.options
        f = self.folder
        proc = self._spawn(
            "kube-apiserver",
            [
                str(apiserver),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={f / 'server.crt'}",
                f"--tls-private-key-file={f / 'server.key'}",
                f"--client-ca-file={f / 'ca.crt'}",
                f"--token-auth-file={f / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={f / 'sa.pub'}",
                f"--service-account-signing-key-file={f / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                "--enable-priority-and-fairness=true",
                f"--max-requests-inflight={o.max_requests_inflight}",
                f"--max-mutating-requests-inflight={o.max_mutating_requests_inflight}",
                f"--cert-dir={f / 'certs'}",
                "-v=1",
                *o.apiserver_args,
            ],
        )
        self._wait(proc, f"{self.url}/readyz", tls=True)

    def _start_controllers(self, manager: Path) -> None:
        assert self.folder is not None
        f = self.folder
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(manager),
                f"--kubeconfig={self.kubeconfig_path}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={f / 'sa.key'}",
                f"--root-ca-file={f / 'ca.crt'}",
                "-v=1",
            ],
        )
        # Ready once it has made the default ServiceAccount of "default" (its first act).
        deadline = time.monotonic() + self.options.start_timeout
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise StartError(f"{proc.name} exited ({proc.popen.returncode}):\n{_tail(proc)}")
            if self.get("/api/v1/namespaces/default/serviceaccounts/default") is not None:
                return
            time.sleep(0.2)
        raise StartError(f"{proc.name} made no default ServiceAccount:\n{_tail(proc)}")

    def user_kubeconfig(self) -> Path:
        """A kubeconfig for :data:`USER` (grant it rights with a RoleBinding first)."""
        path = self.kubeconfig_path.with_name("kubeconfig-user")
        self._write_kubeconfig(path, self.user_token)
        return path

    def _write_kubeconfig(self, path: Path | None = None, token: str | None = None) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "real",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": token or self.token}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": "admin"}}],
            "current-context": "real",
        }
        (path or self.kubeconfig_path).write_text(json.dumps(config, indent=2) + "\n")

    def restart_apiserver(self, *, compact: bool = False) -> None:
        """Stop kube-apiserver, optionally compact etcd at its current revision meanwhile, and
        start it again on the same port and store: its watch cache starts afresh from etcd, so a
        client resuming a watch from an older resourceVersion gets 410 Gone and must re-list (what
        an API server upgrade or a crash does to a controller)."""
        proc = next(p for p in self._processes if p.name == "kube-apiserver")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGTERM)
        try:
            proc.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait()
        self._processes.remove(proc)
        if compact:
            self.etcd_compact()
        restarted = self._spawn(proc.name, proc.argv)
        self._wait(restarted, f"{self.url}/readyz", tls=True)

    # -- small helpers over plain HTTP ------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One request as the admin: (status code, decoded JSON body or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                **(headers or {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.ssl_context()) as r:
                return r.status, _json(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, _json(exc.read())

    def get(self, path: str) -> Any:
        code, body = self.request("GET", path)
        return body if code == 200 else None

    def etcd_compact(self) -> int:
        """Compact etcd at its current revision (what the API server does every 5 minutes), so
        watches from an older resourceVersion get 410 Gone. Returns the revision."""
        status = _post_json(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="})
        revision = int(status["header"]["revision"])
        _post_json(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision


def _post_json(url: str, body: object) -> dict[str, dict[str, str]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        result: dict[str, dict[str, str]] = json.loads(response.read())
        return result


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _tail(proc: _Process, lines: int = 40) -> str:
    try:
        return "\n".join(proc.log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
