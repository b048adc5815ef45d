"""Bounded text for lists of ids: error messages and log lines must not grow with a request.

A kill of 100,000 executors that fails must still produce an error a gRPC client can receive
(grpc caps status details far below the megabytes a full list takes) and a log line an operator
can read, so every message about a list of ids names a few and counts the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

INT64_MAX = 2**63 - 1
"""The largest executor id: the contract carries ids as int64."""

SHOWN_IDS = 5
"""How many ids a summary names before it counts the rest."""


def summarize_ids(ids: Iterable[object], *, shown: int = SHOWN_IDS) -> str:
    """`1, 2, 3` for a short list; `1, 2, 3, 4, 5 and 9995 more (10000 in all)` for a long one.

    The ids are named in the order given (sort them first for a stable message).
    """
    items = [str(i) for i in ids]
    if len(items) <= shown:
        return ", ".join(items) if items else "none"
    head = ", ".join(items[:shown])
    return f"{head} and {len(items) - shown} more ({len(items)} in all)"
