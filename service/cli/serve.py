"""`elova-mcp serve`: check what the start needs, then run the service until SIGTERM/SIGINT.

The checks (service/cli/preflight.py) come before the app is built: a port in use, a
database that refuses, a Redis password that is wrong each stop the start with one line
(service/cli/failures.py), not with a traceback from inside the app's start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import textwrap
from collections.abc import Callable

from service.app import create_app
from service.cli.preflight import check_dependencies, check_listeners
from service.config import Config

# `serve --help`: the settings by group (environment variables, each group's prefixes) and
# where each is documented; every README setting belongs to one (tests/ux/test_serve_help.py).
SETTING_GROUPS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("listening and public URL", ("ELOVA_HOST", "ELOVA_PORT", "ELOVA_PUBLIC_URL",
     "ELOVA_ALLOWED_ORIGINS", "ELOVA_METRICS_PORT", "ELOVA_LOG_LEVEL"), "README.md#configuration"),
    ("PostgreSQL", ("ELOVA_DATABASE_", "ELOVA_DB_POOL_"), "README.md#configuration"),
    ("Redis", ("ELOVA_REDIS_",), "docs/operations.md#redis-engines-elova_redis_mode"),
    ("signing keys and tokens", ("ELOVA_SIGNING_KEY", "ELOVA_PREVIOUS_SIGNING_KEY_FILES",
     "ELOVA_ACCESS_TOKEN_TTL_SECONDS"), "docs/authorization.md"),
    ("limits", ("ELOVA_LIMIT_", "ELOVA_REQUEST_DEADLINE_SECONDS", "ELOVA_MAX_BODY_BYTES",
     "ELOVA_MAX_RESPONSE_BYTES", "ELOVA_LEASE_GRACE_SECONDS", "ELOVA_EXPECTED_REPLICAS",
     "ELOVA_ADMISSION_OVERLAP"), "docs/limits.md"),
    ("proxies and sign-in throttle", ("ELOVA_TRUSTED_PROXIES", "ELOVA_TRUSTED_PROXY_HEADER",
     "ELOVA_SIGNIN_"), "docs/operations.md#behind-a-proxy"),
    ("connections, load shedding, shutdown", ("ELOVA_SHED_", "ELOVA_MAX_CONNECTIONS",
     "ELOVA_HEADER_TIMEOUT_SECONDS", "ELOVA_BODY_TIMEOUT_SECONDS",
     "ELOVA_KEEPALIVE_TIMEOUT_SECONDS", "ELOVA_PACE_REFUSALS_AFTER",
     "ELOVA_LONGEST_REFUSAL_PAUSE_MS", "ELOVA_DRAIN_SECONDS"),
     "docs/operations.md#load-shedding-and-slow-clients"),
    ("OAuth clients", ("ELOVA_OAUTH_",),
     "docs/operations.md#client-id-metadata-documents-outbound-https"),
    ("audit trail", ("ELOVA_AUDIT_",), "docs/operations.md#audit-trail"),
    ("tracing", ("OTEL_", "ELOVA_TRACING_"), "docs/operations.md#tracing"),
)  # fmt: skip


def settings_help() -> str:
    lines = ["settings (environment variables; every one with its default in README.md's",
             "Configuration table):"]  # fmt: skip
    for title, names, doc in SETTING_GROUPS:
        shown = ", ".join(n + "*" if n.endswith("_") else n for n in names)
        lines += textwrap.wrap(f"{title}: {shown}", 88, initial_indent="  ",
                               subsequent_indent="      ")  # fmt: skip
        lines.append(f"    see {doc}")
    lines.append("a missing or malformed setting stops the start with one line naming it.")
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser(
        "serve",
        help="serve MCP over streamable HTTP",
        description="Serve MCP over streamable HTTP until SIGTERM or SIGINT; configured by\n"
        "ELOVA_* environment variables only.",
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env()
    from service.observability.logs import configure_logging

    configure_logging(cfg.log_level)
    check_listeners(cfg)
    # Readiness fails first on SIGTERM; in-flight requests get the deadline to finish.
    from service.server.listener import serve

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(check_dependencies(cfg))
        app = create_app(cfg)
        tune_gc()
        runner.run(serve(app, cfg))
    return 0


# A young-generation collection after this many net container allocations (CPython's default
# is 700: a 50-row page allocates thousands, so the collector ran several times a request).
GC_YOUNG_THRESHOLD = 20_000
GC_OLDER_THRESHOLDS = (20, 20)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections for a request server: what a request allocates
    dies with it (reference counting frees it; the collector only finds cycles), so the
    young generation is collected far less often, and everything alive at start (modules,
    the app) is frozen out of every later collection: less server CPU a tools/call and a
    shorter p99 (docs/decisions/scale.md)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop (libuv): the same asyncio API with cheaper socket I/O, which is
    most of a tools/call's own cost (docs/decisions/scale.md). None (asyncio's default loop)
    where uvloop is not installed (it is a dependency on Linux and macOS only)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
