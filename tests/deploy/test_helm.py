"""The Helm chart (deploy/helm/execpods): `helm lint`, `helm template` against the kustomize
overlay and the monitoring kustomization (the same objects, field for field, but Helm's own
labels and the generated token), the rendered objects applied by the real kubectl to kubesim,
and what each value changes.

helm is built from its Go module, pinned and cached (tests/gotools.py), or taken from
`EXECPODS_HELM` or PATH.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from execpods.kubesim import KubeSim
from execpods.sidecar.cli import build_parser, load_settings

from tests.deploy.test_kustomize import MODELS, render
from tests.gotools import go_program
from tests.kubesim.test_kubectl import kubectl_path
from tests.sidecar.conftest import FAST_CLUSTER

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "execpods"
HELM_ONLY_LABELS = {
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
}
Doc = dict[str, Any]
KUBE_VERSION = "1.33.0"  # helm template assumes 1.20 without it; the chart needs >= 1.29


@pytest.fixture(scope="module")
def helm() -> str:
    return go_program("helm")


def template(helm: str, *values: str) -> list[Doc]:
    args = [a for v in values for a in ("--set", v)]
    done = subprocess.run(
        [helm, "template", "execpods", str(CHART), "--kube-version", KUBE_VERSION, *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _comparable(doc: Doc) -> Doc:
    """An object as both tools must agree on it: Helm's own labels and the token left out, the
    ConfigMap's files parsed (YAML, and `key value` lines)."""
    doc = yaml.safe_load(yaml.safe_dump(doc))
    labels = doc["metadata"].get("labels") or {}
    for key in HELM_ONLY_LABELS:
        labels.pop(key, None)
    doc["metadata"].pop("annotations", None)
    if doc["kind"] == "Secret":
        doc["data"] = dict.fromkeys(doc["data"], "<token>")
    if doc["kind"] == "ConfigMap":
        data = doc["data"]
        data["driver-pod-template.yaml"] = yaml.safe_load(data["driver-pod-template.yaml"])
        data["spark-defaults.conf"] = dict(
            line.split(None, 1)
            for line in data["spark-defaults.conf"].splitlines()
            if line.strip() and not line.startswith("#")
        )
    return doc


def _by_key(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {(d["kind"], d["metadata"]["name"]): _comparable(d) for d in docs}


@pytest.fixture(scope="module")
def kustomized(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    copied = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(ROOT / "deploy", copied, ignore=shutil.ignore_patterns("token", "helm"))
    (copied / "base" / "token").write_text(secrets.token_hex(32), encoding="utf-8")
    docs = [d for d in yaml.safe_load_all(render(copied, "cluster-mode")) if d]
    monitoring = subprocess.run(
        [kubectl_path(), "kustomize", str(copied / "monitoring")],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return docs + [d for d in yaml.safe_load_all(monitoring) if d]


def test_helm_lint_passes(helm: str) -> None:
    done = subprocess.run(
        [helm, "lint", "--strict", str(CHART)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_the_chart_renders_what_the_kustomizations_render(helm: str, kustomized: list[Doc]) -> None:
    """Every object both render, field for field: with the defaults and the Prometheus objects
    on, the chart renders exactly the kustomize objects."""
    charted = _by_key(
        template(helm, "metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
    )
    expected = _by_key(kustomized)
    assert charted.keys() == expected.keys()
    for key, doc in expected.items():
        assert charted[key] == doc, key


def test_the_default_chart_is_valid_and_applies_to_kubesim_with_the_real_kubectl(
    helm: str, tmp_path: Path
) -> None:
    docs = template(helm)
    assert {d["kind"] for d in docs} == {
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Secret",
        "ConfigMap",
    }
    for doc in docs:
        MODELS[doc["kind"]].model_validate(doc)
    token = base64.b64decode(next(d for d in docs if d["kind"] == "Secret")["data"]["token"])
    assert len(token) >= 32  # the sidecar refuses tokens under 16 characters
    rendered = yaml.safe_dump_all(docs)
    with KubeSim(cluster=FAST_CLUSTER) as sim:
        command = [kubectl_path(), "--kubeconfig", str(sim.kubeconfig_path), "apply", "-f", "-"]
        env = {**os.environ, "HOME": str(tmp_path)}

        def apply() -> str:
            done = subprocess.run(
                command, input=rendered, capture_output=True, text=True, check=False, env=env,
                timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert "configmap/spark-cluster-mode created" in apply()
        again = apply()
        assert "created" not in again
        assert "unchanged" in again
        stored = sim.objects("configmaps", "spark")
        assert [c["metadata"]["name"] for c in stored] == ["spark-cluster-mode"]


def _template_pod(docs: list[Doc]) -> Doc:
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    pod: Doc = yaml.safe_load(configmap["data"]["driver-pod-template.yaml"])
    return pod


def _conf(docs: list[Doc]) -> dict[str, str]:
    text = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["spark-defaults.conf"]
    return dict(line.split(None, 1) for line in text.splitlines() if line.strip())


def test_values_change_what_they_say(helm: str, tmp_path: Path) -> None:
    docs = template(
        helm,
        "image.repository=registry.example.com/execpods/sidecar",
        "image.tag=9.9.9",
        "spark.image=registry.example.com/spark/spark-execpods:4.3.0",
        "spark.copyPluginJar=false",
        "token.existingSecret=my-token",
        "tls.enabled=true",
        "tls.secretName=execpods-tls",
        "namespace.name=analytics",
        "metrics.enabled=false",
        "sidecar.extraConf.execpods\\.sidecar\\.templatePolicy=restricted",
    )
    kinds = [d["kind"] for d in docs]
    assert "Secret" not in kinds  # the existing Secret is used
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    assert namespace["metadata"]["name"] == "analytics"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    pod = _template_pod(docs)
    (sidecar,) = pod["spec"]["initContainers"]  # no jar to copy: the Spark image has it
    assert sidecar["image"] == "registry.example.com/execpods/sidecar:9.9.9"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["execpods-token"]["secret"]["secretName"] == "my-token"
    assert volumes["execpods-tls"]["secret"]["secretName"] == "execpods-tls"
    assert "execpods-jars" not in volumes
    (driver,) = pod["spec"]["containers"]
    assert {m["name"] for m in driver["volumeMounts"]} == {"execpods-token", "execpods-tls"}
    assert "annotations" not in pod["metadata"]  # no scrape annotations without metrics
    conf = _conf(docs)
    assert conf["spark.kubernetes.namespace"] == "analytics"
    assert (
        conf["spark.kubernetes.container.image"]
        == "registry.example.com/spark/spark-execpods:4.3.0"
    )
    assert "spark.driver.extraClassPath" not in conf
    assert conf["spark.execpods.sidecar.tls.enabled"] == "true"
    # The sidecar's command line is one it accepts, with these settings in it (a real
    # certificate for the TLS files, as cert-manager would write them).
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "crt"))
    issued.private_key_pem.write_to_path(str(tmp_path / "key"))
    (tmp_path / "token").write_text(secrets.token_hex(32))
    files = {
        "/var/run/execpods/token": "token",
        "/var/run/execpods-tls/tls.crt": "crt",
        "/var/run/execpods-tls/tls.key": "key",
    }
    args = list(sidecar["args"])
    for original, name in files.items():
        args = [a.replace(original, str(tmp_path / name)) for a in args]
    assert "execpods.sidecar.metrics.enabled=false" in args
    assert "execpods.sidecar.templatePolicy=restricted" in args
    environ = {"EXECPODS_APP_ID": "spark-0001", "EXECPODS_DRIVER_POD_NAME": "d"}
    environ["EXECPODS_NAMESPACE"] = "analytics"
    image = next(e["value"] for e in sidecar["env"] if e["name"] == "EXECPODS_IMAGE")
    assert image == conf["spark.kubernetes.container.image"]
    settings = load_settings(build_parser().parse_args(args), {**environ, "EXECPODS_IMAGE": image})
    assert settings.security.cert_file == str(tmp_path / "crt")
    assert settings.security.template_policy.value == "restricted"
    assert not settings.metrics.enabled


def test_the_token_secret_is_kept_across_upgrades(helm: str) -> None:
    """`lookup` keeps an installed token; `helm template` (no cluster) makes a new one, and
    `helm.sh/resource-policy: keep` leaves it on uninstall, with drivers still running."""
    first = next(d for d in template(helm) if d["kind"] == "Secret")
    second = next(d for d in template(helm) if d["kind"] == "Secret")
    assert first["data"]["token"] != second["data"]["token"]
    assert first["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


@pytest.mark.real_server
def test_uninstall_leaves_the_namespace_its_drivers_and_the_token(
    helm: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On kube-apiserver (the real-server tier): `helm install`, `helm upgrade` keeps the token
    (`lookup`), and `helm uninstall` leaves the namespace, a driver pod running in it and the
    token Secret. The chart makes the namespace (for its Pod Security labels); were it deleted
    on uninstall, every Spark application in it would go with it, and the kept token too."""
    server = request.getfixturevalue("real_server")  # the session's (tests/conftest.py)
    namespace = f"helm-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "KUBECONFIG": str(server.kubeconfig_path),
        **{f"HELM_{d}_HOME": str(tmp_path / d.lower()) for d in ("CONFIG", "CACHE", "DATA")},
    }

    def run(*command: str) -> str:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, env=env, timeout=120
        )
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def token() -> str:
        return run(
            kubectl_path(), "get", "secret", "-n", namespace, "execpods-sidecar-token",
            "-o", "jsonpath={.data.token}",
        )  # fmt: skip

    release = ("execpods", str(CHART), "--set", f"namespace.name={namespace}")
    try:
        run(helm, "install", *release)
        installed = token()
        run(helm, "upgrade", *release)
        assert token() == installed  # a new token would lock out running drivers
        run(kubectl_path(), "run", "-n", namespace, "driver", "--image=apache/spark:4.3.0")
        run(helm, "uninstall", "execpods", "--wait")
        phase = run(kubectl_path(), "get", "namespace", namespace, "-o", "jsonpath={.status.phase}")
        assert phase == "Active"
        assert run(kubectl_path(), "get", "pod", "-n", namespace, "driver", "-o", "name")
        assert token() == installed
    finally:  # the server is shared: leave it as found
        subprocess.run(
            [helm, "uninstall", "execpods"], env=env, capture_output=True, check=False, timeout=60
        )
        subprocess.run(
            [kubectl_path(), "delete", "namespace", namespace, "--wait=false"],
            env=env, capture_output=True, check=False, timeout=60,
        )  # fmt: skip
