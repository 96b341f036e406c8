"""The address of the client a request comes from.

Every per-address decision (the sign-in throttle, registration limits, refusal pacing, the
access log's client field) asks this module, so there is one answer for a request. Today it
is the connection's peer address; behind a trusted proxy it will be read from the
forwarding headers (ELOVA_TRUSTED_PROXIES).
"""

from __future__ import annotations

from aiohttp import web


def client_address(request: web.BaseRequest) -> str:
    """The client's address as text, or "unknown" when the transport does not say."""
    return request.remote or "unknown"
