"""kubesim's quantities print as the API server prints them (pure: no server is needed, so they
live outside the conformance modules, which run on both servers)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from execpods.kubesim.quota import Quantity

QUANTITIES = [
    ("1408Mi", True, "1408Mi"),
    ("1Gi", True, "1Gi"),
    ("1024Mi", True, "1Gi"),
    ("1500", False, "1500"),
    ("500m", False, "500m"),
    ("1.5", False, "1500m"),
    ("12000", False, "12k"),
    ("0", False, "0"),
]


@pytest.mark.parametrize(("text", "binary", "canonical"), QUANTITIES)
def test_quantities_print_as_the_api_prints_them(text: str, binary: bool, canonical: str) -> None:
    quantity = Quantity.parse(text)
    assert quantity.binary is binary
    assert str(quantity) == canonical


def test_a_sum_keeps_the_format_of_its_first_non_zero_term() -> None:
    zero = Quantity(Decimal(0))
    assert str(zero + Quantity.parse("1408Mi") + Quantity.parse("1408Mi")) == "2816Mi"
    assert str(Quantity.parse("1") + Quantity.parse("1Gi")) == "1073741825"
    # binary only for whole multiples of 1Ki: 1536 bytes is 1536 (not 1.5Ki), 2048 is 2Ki
    assert str(Quantity.parse("1Ki") + Quantity.parse("512")) == "1536"
    assert str(Quantity.parse("1Ki") + Quantity.parse("1024")) == "2Ki"
