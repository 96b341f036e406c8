"""The reference cost and its coverage as the tools answer them (docs/reading-rules.md):
an exact amount estimated at OpenRouter's standard prices, and how completely it is priced."""

from __future__ import annotations

from decimal import Decimal

import msgspec

from service.rules.shaping import format_amount
from service.tools.base import Output


class Cost(Output):
    amount: str
    currency: str
    kind: str
    basis: str


def cost_of(amount: Decimal) -> Cost:
    return Cost(amount=format_amount(amount), currency="USD", kind="estimated", basis="openrouter")


class CostCoverage(Output):
    state: str
    pricedComponents: int
    unresolvedComponents: int
    excludedComponents: int
    observations: int
    missingMappingObservations: int | msgspec.UnsetType = msgspec.UNSET
