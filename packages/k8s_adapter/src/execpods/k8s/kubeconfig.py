"""Kubeconfig files merged as kubectl and client-go merge them, and what the chosen user holds.

`KUBECONFIG=a:b` names a list of files (client-go's `ClientConfigLoadingRules`): empty names are
ignored, a name given twice counts once, a file that does not exist is skipped, and a file that
cannot be read or parsed is an error naming it. The first file to set a value wins and nothing
later changes it: a cluster, user or context is taken whole from the first file that names it,
and `current-context` from the first file that sets one. Paths inside a file (a cluster's
`certificate-authority`, a user's `client-certificate`, `client-key`, `tokenFile`, an exec
plugin's relative command) are relative to that file's folder, so they are made absolute before
the merged configuration is handed to the official client (whose own merger lets the last file's
`current-context` win and resolves a user's certificate against its cluster's file).

`describe_user` says where the credential of a context comes from, so that a 401 can name it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from execpods.core import SettingsError

__all__ = [
    "MergedKubeconfig",
    "describe_user",
    "kubeconfig_list",
    "merge_kubeconfigs",
    "user_of",
]

SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))
"""Each named section of a kubeconfig and the key that holds an entry's body."""

_PATH_FIELDS = {
    "cluster": ("certificate-authority",),
    "user": ("client-certificate", "client-key", "tokenFile"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class MergedKubeconfig:
    """The merged configuration, and which file each named entry came from."""

    config: dict[str, Any]
    files: tuple[Path, ...]
    """The files read, in precedence order (missing ones left out)."""
    origins: dict[tuple[str, str], Path] = field(default_factory=dict)
    """(section, name) -> the file that defined the entry, e.g. ("users", "alice")."""

    def describe(self) -> str:
        return ":".join(str(path) for path in self.files)


def kubeconfig_list(value: str) -> list[Path]:
    """The files of a `KUBECONFIG` value: split on the path separator, empty names ignored,
    duplicates dropped (the first one kept)."""
    seen: list[Path] = []
    for part in value.split(os.pathsep):
        if not part:
            continue
        path = Path(part).expanduser()
        if path not in seen:
            seen.append(path)
    return seen


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SettingsError(f"kubeconfig {str(path)!r}: {error.strerror or error}") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SettingsError(f"kubeconfig {str(path)!r} is not valid YAML: {error}") from None
    if loaded is None:
        return {}  # an empty file sets nothing, as in client-go
    if not isinstance(loaded, dict):
        raise SettingsError(f"kubeconfig {str(path)!r} is not a kubeconfig (not a mapping)")
    return loaded


def _absolute(body: dict[str, Any], kind: str, folder: Path) -> dict[str, Any]:
    """A copy of a cluster's or user's body with its file paths made absolute."""
    resolved = dict(body)
    for key in _PATH_FIELDS.get(kind, ()):
        value = resolved.get(key)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            resolved[key] = str(folder / value)
    exec_ = resolved.get("exec")
    if kind == "user" and isinstance(exec_, dict):
        command = exec_.get("command")
        if isinstance(command, str) and "/" in command and not Path(command).is_absolute():
            resolved["exec"] = {**exec_, "command": str(folder / command)}
    return resolved


def merge_kubeconfigs(paths: Sequence[Path]) -> MergedKubeconfig:
    """Merge the files in precedence order; missing files are skipped (see the module)."""
    merged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
    }
    origins: dict[tuple[str, str], Path] = {}
    read: list[Path] = []
    for path in paths:
        if not path.is_file():
            continue
        read.append(path)
        loaded = _read(path)
        folder = path.resolve().parent
        for section, key in SECTIONS:
            entries = loaded.get(section) or []
            if not isinstance(entries, list):
                raise SettingsError(f"kubeconfig {str(path)!r}: {section} must be a list")
            for entry in entries:
                name = entry.get("name") if isinstance(entry, dict) else None
                if not isinstance(name, str) or (section, name) in origins:
                    continue  # the first file to name an entry wins, whole
                body = entry.get(key)
                resolved = _absolute(body, key, folder) if isinstance(body, dict) else body
                merged[section].append({"name": name, key: resolved})
                origins[(section, name)] = path
        current = loaded.get("current-context")
        if current and "current-context" not in merged:
            merged["current-context"] = current  # the first file to set one wins
    return MergedKubeconfig(config=merged, files=tuple(read), origins=origins)


def _named(config: Mapping[str, Any], section: str, name: str) -> dict[str, Any] | None:
    key = dict(SECTIONS)[section]
    for entry in config.get(section) or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(key)
            return body if isinstance(body, dict) else {}
    return None


def _credential(user: Mapping[str, Any]) -> str:
    if user.get("tokenFile"):
        return f"the token file {user['tokenFile']}"
    if user.get("token"):
        return "a bearer token"
    if user.get("client-certificate") or user.get("client-certificate-data"):
        where = user.get("client-certificate")
        return f"the client certificate {where}" if where else "an inline client certificate"
    exec_ = user.get("exec")
    if isinstance(exec_, dict):
        return f"the exec plugin {exec_.get('command')!r}"
    provider = user.get("auth-provider")
    if isinstance(provider, dict):
        return f"the auth provider {provider.get('name')!r}"
    if user.get("username"):
        return f"basic auth as {user['username']!r}"
    return "no credential"


def user_of(merged: MergedKubeconfig, context: str | None) -> dict[str, Any]:
    """The user entry's body of a context (the current one when None); {} when none."""
    config = merged.config
    chosen = context or config.get("current-context") or ""
    body = _named(config, "contexts", chosen) or {}
    return _named(config, "users", str(body.get("user") or "")) or {}


def describe_user(merged: MergedKubeconfig, context: str | None) -> tuple[str, str]:
    """(credential, server) of a context (the current one when None): e.g. ("kubeconfig user
    'alice' (context 'prod', file /home/a/.kube/config): the token file /t", "https://...")."""
    config = merged.config
    chosen = context or config.get("current-context") or ""
    body = _named(config, "contexts", chosen) or {}
    user_name = str(body.get("user") or "")
    cluster_name = str(body.get("cluster") or "")
    user = _named(config, "users", user_name) or {}
    cluster = _named(config, "clusters", cluster_name) or {}
    origin = merged.origins.get(("users", user_name))
    where = f", file {origin}" if origin is not None else ""
    credential = f"kubeconfig user {user_name!r} (context {chosen!r}{where}): {_credential(user)}"
    server = cluster.get("server")
    return credential, server if isinstance(server, str) else ""
