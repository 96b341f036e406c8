"""Model calls of AI executions: token usage rows and their OpenRouter reference valuation.

Amounts are exact decimals (tokens × price per million, never a float). A call is
`priced` when its model has a reference price and the counts that price needs are known,
`unresolved` when the model has no reference mapping, `excluded` when n8n reported no token
counts. An execution's `costCoverage` counts those outcomes; a missing count stays null.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal

from service.demo.cast import MODELS, Model
from service.demo.deterministic import Json
from service.rules.shaping import format_amount

MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Call:
    row: Json  # the usage row of the model node's run in a history report
    amount: Decimal | None
    outcome: str  # priced, unresolved, excluded


def _row_id(rng: random.Random, model: Model) -> str:
    token = "".join(rng.choice("0123456789abcdefABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(24))
    return f"msg_01{token}" if model.provider == "anthropic" else f"chatcmpl-{token}"


def unreported_call(model: Model) -> Call:
    """A call whose usage was not reported: no counts, no price (excluded)."""
    row: Json = {
        "id": None,
        "model": model.name,
        "modelSource": "requested",
        "provider": model.provider,
        "kind": "unknown",
        "pinned": None,
        "inputTokens": None,
        "outputTokens": None,
        "totalTokens": None,
        "cachedInputTokens": None,
        "reasoningTokens": None,
    }
    return Call(row, None, "excluded")


def _price(model: Model, tokens_in: int, tokens_out: int | None, cached: int | None) -> Decimal:
    assert model.input_price is not None and model.output_price is not None
    cached_n = cached or 0
    amount = (tokens_in - cached_n) * model.input_price
    if cached_n:
        amount += cached_n * (model.cached_price or model.input_price)
    amount += (tokens_out or 0) * model.output_price
    return amount / MILLION


def priced_call(
    model: Model,
    kind: str,
    row_id: str | None,
    tokens_in: int,
    tokens_out: int | None,
    cached: int | None,
    reasoning: int | None,
) -> Call:
    """The usage row and reference price of one reported or estimated call (draws nothing:
    both the demo and the bulk generator draw the counts their own way, then call this)."""
    row: Json = {
        "id": row_id,
        "model": model.name,
        "modelSource": "reported" if kind == "reported" else "requested",
        "provider": model.provider,
        "kind": kind,
        "pinned": None,
        "inputTokens": tokens_in,
        "outputTokens": tokens_out,
        "totalTokens": tokens_in + (tokens_out or 0),
        "cachedInputTokens": cached,
        "reasoningTokens": reasoning,
    }
    if model.input_price is None:
        return Call(row, None, "unresolved")
    return Call(row, _price(model, tokens_in, tokens_out, cached), "priced")


def model_call(rng: random.Random, model_key: str) -> Call:
    """One call of the model: mostly reported counts, sometimes estimated or unreported."""
    model = MODELS[model_key]
    draw = rng.random()
    if draw < 0.05:
        return unreported_call(model)
    embedding = model_key == "embedding"
    tokens_in = int(rng.lognormvariate(7.2 if not embedding else 8.0, 0.6)) + 20
    tokens_out = None if embedding else int(rng.lognormvariate(5.3, 0.7)) + 5
    cached = None if embedding or rng.random() < 0.4 else int(tokens_in * rng.uniform(0, 0.6))
    reasoning = int((tokens_out or 0) * rng.uniform(0.3, 0.8)) if model.reasoning else None
    kind = "estimated" if draw < 0.1 else "reported"
    row_id = _row_id(rng, model) if kind == "reported" else None
    return priced_call(model, kind, row_id, tokens_in, tokens_out, cached, reasoning)


def cost_fields(calls: list[Call], *, pending: bool, with_missing_mapping: bool) -> Json:
    """`cost` and `costCoverage` of an AI execution, as the collector records them."""
    priced = [c.amount for c in calls if c.amount is not None]
    unresolved = sum(1 for c in calls if c.outcome == "unresolved")
    excluded = sum(1 for c in calls if c.outcome == "excluded")
    if pending:
        state = "pending"
    elif not calls:
        state = "not_applicable"
    elif not priced:
        state = "unavailable"
    else:
        state = "complete" if not unresolved and not excluded else "partial"
    coverage: Json = {
        "state": state,
        "pricedComponents": 0 if pending else len(priced),
        "unresolvedComponents": 0 if pending else unresolved,
        "excludedComponents": 0 if pending else excluded,
        "observations": len(calls),
    }
    if with_missing_mapping and not pending:
        coverage["missingMappingObservations"] = unresolved
    amount = None if pending or not priced else format_amount(sum(priced, Decimal(0)))
    return {"cost": None if amount is None else {"amount": amount}, "costCoverage": coverage}
