"""KUBECONFIG lists merged as kubectl merges them, checked against the real kubectl.

kubectl (client-go's loading rules) is the reference: `kubectl config view --raw` prints the merge
of `KUBECONFIG=a:b`, and `--flatten` embeds the files that relative paths name, which shows
against which file's folder each was resolved.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from execpods.core import PodSelector, SettingsError
from execpods.k8s import ApiGateway, KubernetesPodOperations, connect_cluster
from execpods.k8s.cluster import TOKEN_FILE_PERIOD, _read_token_file
from execpods.k8s.kubeconfig import kubeconfig_list, merge_kubeconfigs
from execpods.kubesim import KubeSim
from kubernetes.client import Configuration

from tests.k8s.conftest import executor_pod
from tests.k8s.test_cluster import no_kubeconfig, service_account  # noqa: F401 (a fixture)
from tests.kubesim.test_kubectl import kubectl_path

FIRST = """\
apiVersion: v1
kind: Config
clusters:
- name: shared
  cluster: {{server: '{first_server}'}}
users:
- name: alice
  user: {{token: from-first}}
contexts:
- name: one
  context: {{cluster: shared, user: alice}}
"""

SECOND = """\
apiVersion: v1
kind: Config
current-context: {current}
clusters:
- name: shared
  cluster: {{server: 'http://second.invalid:2'}}
- name: other
  cluster: {{server: '{other_server}', certificate-authority: ca.crt}}
users:
- name: alice
  user: {{token: from-second}}
- name: bob
  user: {{tokenFile: tok}}
contexts:
- name: two
  context: {{cluster: other, user: bob}}
- name: one
  context: {{cluster: other, user: bob}}
"""


def write_pair(
    tmp_path: Path,
    *,
    first_server: str = "http://first.invalid:1",
    other_server: str = "http://other.invalid:3",
    current: str = "two",
    first_current: str | None = None,
) -> tuple[Path, Path]:
    """Two kubeconfigs in two folders: they overlap on `shared`, `alice` and `one`, and only the
    second sets a current context (unless `first_current`)."""
    first = tmp_path / "a" / "config"
    second = tmp_path / "b" / "config"
    first.parent.mkdir()
    second.parent.mkdir()
    text = FIRST.format(first_server=first_server)
    if first_current is not None:
        text = f"current-context: {first_current}\n{text}"
    first.write_text(text, encoding="utf-8")
    second.write_text(SECOND.format(other_server=other_server, current=current), encoding="utf-8")
    (second.parent / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nb\n", encoding="utf-8")
    (second.parent / "tok").write_text("token-in-b\n", encoding="utf-8")
    return first, second


def kubectl_view(kubeconfig: str, tmp_path: Path, *flags: str) -> dict[str, Any]:
    done = subprocess.run(
        [kubectl_path(), "config", "view", "--raw", "-o", "json", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = orjson.loads(done.stdout)
    return parsed


def by_name(config: dict[str, Any], section: str) -> dict[str, Any]:
    key = {"clusters": "cluster", "users": "user", "contexts": "context"}[section]
    return {entry["name"]: entry[key] for entry in config.get(section) or []}


@pytest.mark.parametrize("first_current", [None, "one"])
def test_the_merge_matches_kubectls(tmp_path: Path, first_current: str | None) -> None:
    first, second = write_pair(tmp_path, first_current=first_current)
    listed = f"{first}{os.pathsep}{tmp_path / 'missing'}{os.pathsep}{second}{os.pathsep}{first}"
    merged = merge_kubeconfigs(kubeconfig_list(listed))
    reference = kubectl_view(listed, tmp_path)
    assert merged.files == (first, second)  # the missing file skipped, the repeat dropped
    assert merged.config["current-context"] == reference["current-context"]
    assert merged.config["current-context"] == (first_current or "two")
    for section in ("clusters", "users", "contexts"):
        mine = by_name(merged.config, section)
        theirs = by_name(reference, section)
        assert mine.keys() == theirs.keys(), section
        for name, body in theirs.items():
            for key, value in body.items():
                if key in ("certificate-authority", "tokenFile"):
                    continue  # kubectl prints these as written; compared resolved below
                assert mine[name][key] == value, (section, name, key)
    assert by_name(merged.config, "clusters")["shared"]["server"] == "http://first.invalid:1"
    assert by_name(merged.config, "users")["alice"] == {"token": "from-first"}
    # Relative paths are relative to the file that named them: kubectl's --flatten embeds the
    # certificate it found there, the same file the merged path names.
    flat = by_name(kubectl_view(listed, tmp_path, "--flatten"), "clusters")["other"]
    resolved = Path(by_name(merged.config, "clusters")["other"]["certificate-authority"])
    assert resolved == second.parent / "ca.crt"
    assert base64.b64decode(flat["certificate-authority-data"]) == resolved.read_bytes()
    assert Path(by_name(merged.config, "users")["bob"]["tokenFile"]) == second.parent / "tok"


def test_kubeconfig_a_colon_b_reaches_the_cluster_the_merge_names(
    sim: KubeSim, tmp_path: Path
) -> None:
    """The current context is in the second file, its cluster is the simulator; the first file
    alone names no such context (at 128638e only the first file was read: start-up failed)."""
    sim.create_pod(executor_pod(1))
    first, second = write_pair(tmp_path, other_server=sim.url)
    client, access = connect_cluster(environ={"KUBECONFIG": f"{first}{os.pathsep}{second}"})
    try:
        assert client.configuration.host == sim.url
        assert client.configuration.api_key["BearerToken"] == "Bearer token-in-b"
        operations = KubernetesPodOperations(ApiGateway(client, namespace="default"))
        assert [p.name for p in operations.list(PodSelector())] == ["spark-app-1-exec-1"]
    finally:
        client.close()
    assert access.server == sim.url
    assert access.credential == (
        f"kubeconfig user 'bob' (context 'two', file {second}): the token file "
        f"{second.parent / 'tok'}"
    )
    assert "$KUBECONFIG" in access.via


def test_an_explicit_list_and_broken_files(tmp_path: Path) -> None:
    first, second = write_pair(tmp_path)
    _, access = connect_cluster(kubeconfig=f"{first}{os.pathsep}{second}", context="one")
    assert access.server == "http://first.invalid:1"
    assert access.credential.startswith(f"kubeconfig user 'alice' (context 'one', file {first})")
    # What the one line for a server that never answered tells to check:
    assert access.via == (
        f"the kubeconfig {first}:{second} (context 'one'; --kubeconfig "
        "(execpods.kubernetes.kubeconfig), --context)"
    )
    with pytest.raises(SettingsError, match="no such file"):
        connect_cluster(kubeconfig=f"{tmp_path / 'x'}{os.pathsep}{tmp_path / 'y'}")
    broken = tmp_path / "broken"
    broken.write_text("clusters: [unclosed\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"broken.*not valid YAML"):
        connect_cluster(kubeconfig=f"{first}{os.pathsep}{broken}")
    empty = tmp_path / "empty"
    empty.write_text("", encoding="utf-8")  # sets nothing, as for client-go
    _, access = connect_cluster(kubeconfig=f"{empty}{os.pathsep}{second}")
    assert access.server == "http://other.invalid:3"


def test_a_token_file_is_trimmed_and_read_again_every_minute(tmp_path: Path) -> None:
    """As client-go's CachedFileTokenSource: a rotated token (a projected service account
    token, a renewed Secret) is picked up within a minute, without a restart."""
    token_file = tmp_path / "token"
    token_file.write_text("one\n", encoding="utf-8")
    now = [0.0]
    configuration: Any = Configuration()
    _read_token_file(configuration, token_file, clock=lambda: now[0])
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer one"
    token_file.write_text("two\n", encoding="utf-8")
    now[0] = TOKEN_FILE_PERIOD - 1
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer one"
    now[0] = TOKEN_FILE_PERIOD + 1
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer two"
    token_file.unlink()  # a file gone for a moment: the last token is kept
    now[0] = 3 * TOKEN_FILE_PERIOD
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer two"


@pytest.mark.usefixtures("no_kubeconfig")
def test_each_access_says_where_its_credential_came_from(tmp_path: Path) -> None:
    directory = service_account(tmp_path / "sa")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    client, access = connect_cluster(service_account_dir=directory, environ=environ)
    client.close()
    assert access.server == "https://127.0.0.1:6443"
    assert access.credential == f"the in-cluster service account's token file {directory}/token"
    assert "KUBERNETES_SERVICE_HOST" in access.via
    client, access = connect_cluster(api_url="http://127.0.0.1:1")
    client.close()
    assert access.credential.startswith("no credential (--api-url sends none")
    assert access.via == "--api-url (execpods.kubernetes.apiUrl)"
