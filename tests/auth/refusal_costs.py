"""CPU per bearer-token verification, by kind of token: `python -m tests.auth.refusal_costs`.

Times `TokenService.verify_remembered` (what the bearer check calls) in this process, no
server: a valid token already remembered, and an expired, a badly signed and a garbage token
seen for the first time (`verify`, which remembers nothing) and repeated (the same token
through `verify_remembered` again and again). Not a test and not part of `make bench`: a quick
look at what a refusal costs before and after a change to service/auth/tokens.py.
"""

from __future__ import annotations

import time
import timeit
import uuid
from collections.abc import Callable

from service.auth.tokens import TokenService
from service.config import Config
from service.errors import InvalidToken
from tests.support.keys import ed25519_pem

ROUNDS = 2000


def _service(pem: bytes) -> TokenService:
    return TokenService(
        Config.from_env(
            {
                "ELOVA_DATABASE_URL": "postgresql://bench@127.0.0.1/bench",
                "ELOVA_PUBLIC_URL": "http://127.0.0.1:8080",
                "ELOVA_SIGNING_KEY": pem.decode(),
            }
        )
    )


def _issue(tokens: TokenService, now: float | None = None) -> str:
    token, _ = tokens.issue_access_token(
        account_id=uuid.uuid4(), client_id="bench", scopes=["n8n:read"],
        approval_id=uuid.uuid4(), generation=1, now=now,
    )  # fmt: skip
    return token


def _refused(verify: Callable[[str], object], token: str) -> None:
    try:
        verify(token)
    except InvalidToken:
        return
    raise AssertionError("the token was accepted")


def _microseconds(run: Callable[[], object]) -> float:
    best = min(timeit.repeat(run, number=ROUNDS, repeat=5))
    return best / ROUNDS * 1e6


def main() -> None:
    tokens = _service(ed25519_pem())
    valid = _issue(tokens)
    expired = _issue(tokens, now=time.time() - 3600)
    head, body, _ = valid.split(".")
    bad_signature = f"{head}.{body}.{_issue(tokens).split('.')[2]}"
    garbage = "eyJhbGciOiJFZERTQSJ9.bm90IGpzb24.c2lnbmF0dXJl"
    tokens.verify_remembered(valid)
    cases: dict[str, Callable[[], object]] = {
        "valid, remembered": lambda: tokens.verify_remembered(valid),
        "valid, first sight": lambda: tokens.verify(valid),
        "expired, first sight": lambda: _refused(tokens.verify, expired),
        "expired, repeated": lambda: _refused(tokens.verify_remembered, expired),
        "bad signature, first sight": lambda: _refused(tokens.verify, bad_signature),
        "bad signature, repeated": lambda: _refused(tokens.verify_remembered, bad_signature),
        "garbage, first sight": lambda: _refused(tokens.verify, garbage),
        "garbage, repeated": lambda: _refused(tokens.verify_remembered, garbage),
    }
    for name, run in cases.items():
        print(f"{name:28} {_microseconds(run):8.1f} µs")


if __name__ == "__main__":
    main()
