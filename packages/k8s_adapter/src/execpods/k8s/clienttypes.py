"""Typed names for the part of the untyped `kubernetes` client execpods uses.

The client ships no type information, so its objects are `Any` to mypy; these Protocols keep that
`Any` from crossing the package's public API.
"""

from __future__ import annotations

from typing import Protocol


class ClientConfiguration(Protocol):
    """The fields of `kubernetes.client.Configuration` execpods sets or reports."""

    host: str
    connection_pool_maxsize: int
    ssl_ca_cert: str | None
    api_key: dict[str, str]


class KubernetesApiClient(Protocol):
    """The part of `kubernetes.client.ApiClient` execpods uses."""

    user_agent: str
    """Who is calling: the API server's flow identity when no credentials tell it (APF)."""

    @property
    def configuration(self) -> ClientConfiguration: ...

    def close(self) -> None: ...

    def sanitize_for_serialization(self, obj: object) -> object: ...
