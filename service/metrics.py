"""Prometheus metrics (STUB with the final interface: the operability work fills it in).

Other modules call only these methods; none of them takes a user, token, session or
address, so no such value can become a label.
"""

from __future__ import annotations

from aiohttp import web


class Metrics:
    def observe_rpc(
        self, method: str, tool: str | None, outcome: str, seconds: float, response_bytes: int
    ) -> None:
        """One JSON-RPC request answered. outcome: ok | tool_error:<CODE> | protocol_error |
        auth_error | limited | error."""

    def request_started(self) -> None:
        """An admitted request starts (in-flight gauge +1)."""

    def request_finished(self) -> None:
        """An admitted request ends (in-flight gauge -1)."""

    def limit_refused(self, limit: str) -> None:
        """A 429: limit is global | account | approval | account_daily."""

    def limiter_degraded(self, degraded: bool) -> None:
        """Shared (Redis) limits unavailable → per-process limits."""

    def auth_failed(self, reason: str) -> None:
        """A 401/403: reason is missing | malformed | expired | signature | audience | issuer |
        revoked | approval_expired | insufficient_scope | other."""

    def token_issued(self, grant: str) -> None:
        """grant: authorization_code | refresh_token | operator."""

    def db_call(self, operation: str, seconds: float, error: bool) -> None:
        """One PostgreSQL call (operation: a fixed name such as the tool or 'auth')."""

    def redis_call(self, operation: str, seconds: float, error: bool) -> None:
        """One Redis call (operation: admit | release | session | other)."""


def setup_metrics(app: web.Application) -> None:
    from service.keys import METRICS

    app[METRICS] = Metrics()
