"""The kubelet's own connection to the API server: JSON over the kubeconfig's credentials."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
import orjson
import urllib3

__all__ = ["Api", "ApiFailed"]

Obj = dict[str, Any]
# The client's configuration helpers are untyped; keep their Any behind these names.
k8s_client: Any = kubernetes.client
k8s_config: Any = kubernetes.config


class ApiFailed(Exception):
    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Api:
    """GET/POST/PATCH/DELETE of JSON paths on the cluster a kubeconfig (or URL) names."""

    def __init__(self, *, api_url: str | None = None, kubeconfig: str | None = None) -> None:
        configuration: Any = k8s_client.Configuration()
        if api_url is not None:
            configuration.host = api_url.rstrip("/")
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        self.url: str = configuration.host
        self.ca_file: str | None = configuration.ssl_ca_cert
        bearer = configuration.auth_settings().get("BearerToken")  # from a token or a plugin
        self._auth: str = bearer["value"] if bearer else ""
        self._pool = urllib3.PoolManager(
            maxsize=8,
            ca_certs=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            cert_reqs="CERT_REQUIRED" if configuration.verify_ssl else "CERT_NONE",
        )

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        headers["User-Agent"] = "execpods-local-kubelet"
        if self._auth:
            headers["Authorization"] = self._auth
        data = None if body is None else orjson.dumps(body)
        response = self._pool.request(
            method, self.url + path, body=data, headers=headers, timeout=30.0, retries=False
        )
        parsed = orjson.loads(response.data) if response.data else None
        if response.status >= 400:
            raise ApiFailed(response.status, parsed)
        return parsed

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def pods(self, namespace: str | None, field_selector: str) -> list[Obj]:
        where = f"/namespaces/{namespace}" if namespace else ""
        found = self.get(f"/api/v1{where}/pods?fieldSelector={quote(field_selector)}")
        items: list[Obj] = found["items"]
        return items

    def patch_status(self, namespace: str, name: str, status: Obj) -> None:
        """A JSON merge patch of `pods/status`: the lists it sends replace the server's whole
        (containerStatuses are atomic for a strategic merge too, on kube-apiserver)."""
        self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
