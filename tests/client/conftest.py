from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.servicer import FakeAllocator, Served


@pytest.fixture
def served() -> Iterator[Served]:
    server = Served(FakeAllocator())
    try:
        yield server
    finally:
        server.stop()
