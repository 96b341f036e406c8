"""HTTP-level checks of `/mcp` before any JSON is read: Origin/Host, Accept, Content-Type,
and the bounded body read. Each is a pure function of headers (or a capped read)."""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from service.config import Config

_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_JSON_RANGES = frozenset({"application/json", "application/*", "*/*"})


def allowed_origins(cfg: Config) -> frozenset[str]:
    return frozenset(o.lower() for o in (cfg.public_origin, *cfg.allowed_origins))


def allowed_hosts(cfg: Config) -> frozenset[str]:
    """Host names (ports aside) a request may be addressed to. A loopback public URL admits
    every loopback name: a rebinding page can make a browser send its own name, never these."""
    found = {h for o in (cfg.public_origin, *cfg.allowed_origins) if (h := _hostname(o))}
    if found & _LOOPBACK:
        found |= _LOOPBACK
    return frozenset(found)


def origin_ok(origin: str | None, cfg: Config) -> bool:
    """No Origin (not a browser) is fine; a present one must be a configured origin."""
    return origin is None or origin.rstrip("/").lower() in allowed_origins(cfg)


def host_ok(host: str | None, cfg: Config) -> bool:
    if host is None:
        return True
    known = _HOSTS_SEEN.get(host)
    if known is not None and known[0] is cfg:
        return known[1]
    name = _hostname("//" + host)
    ok = name is not None and name in allowed_hosts(cfg)
    if len(_HOSTS_SEEN) >= 256:
        _HOSTS_SEEN.clear()
    _HOSTS_SEEN[host] = (cfg, ok)
    return ok


# Host header → (the configuration it was judged against, the verdict): every request of a
# client sends the same Host, and parsing it (and the configured origins) each time showed
# in the profile. Bounded; a different configuration object (tests) is judged afresh.
_HOSTS_SEEN: dict[str, tuple[Config, bool]] = {}


def _hostname(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def accepts_json(accept: str | None) -> bool:
    """Absent Accept means anything; otherwise a range covering application/json, not q=0.
    Clients send a few Accept values over and over: each answer is remembered (bounded)."""
    if accept is None:
        return True
    known = _ACCEPTS.get(accept)
    if known is None:
        known = _accepts_json(accept)
        if len(_ACCEPTS) < _KNOWN_ACCEPTS:
            _ACCEPTS[accept] = known
    return known


_ACCEPTS: dict[str, bool] = {}
_KNOWN_ACCEPTS = 256


def _accepts_json(accept: str) -> bool:
    if not accept.strip():
        return True
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() not in _JSON_RANGES:
            continue
        if any(_is_q_zero(param) for param in params):
            continue
        return True
    return False


def _is_q_zero(param: str) -> bool:
    name, _, value = param.partition("=")
    if name.strip().lower() != "q":
        return False
    try:
        return float(value.strip()) == 0
    except ValueError:
        return False


def is_json_content(request: web.Request) -> bool:
    """Content-Type application/json (parameters allowed). The exact value, which clients
    send, is known without aiohttp's parse of the header (a new parse every request)."""
    raw = request.headers.get("Content-Type")
    if raw is None:
        return False
    return raw == "application/json" or request.content_type == "application/json"


async def read_bounded(request: web.Request, limit: int) -> bytes | None:
    """The body, or None when it is over `limit` bytes: Content-Length is checked first. The
    body deadline (service/server/body_deadline.py) had the body in before the handler: a small
    declared one waits in the stream's buffer, taken in one call; a chunked or larger one
    was read whole (request.read() keeps it), one past the bound refused there."""
    length = request.content_length
    if length is not None:
        if length > limit:
            return None
        if not length:
            return b""
        head = request.content.read_nowait(length)
        if len(head) == length:
            return head
        return head + await request.read()  # what was read already, or the rest
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        return None
