"""The one rule for a gRPC listen address, shared by the main port and the health port."""

from __future__ import annotations

import re

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[^:\s]+):(?P<port>\d{1,5})$")


def listen_address_problem(value: str) -> str | None:
    """Why `value` is not a listen address (host:port or unix:<path>), or None when it is."""
    if value.startswith("unix:"):
        return None if len(value) > len("unix:") else "needs a path after unix:"
    match = _HOST_PORT.match(value)
    if match is None:
        return "must be host:port (e.g. 127.0.0.1:0 for any free port) or unix:<path>"
    if int(match.group("port")) > 65535:
        return "has a port above 65535"
    return None
