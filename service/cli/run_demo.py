"""`elova-mcp run-demo` (what `make run` runs): a working service from a fresh checkout.

Steps: an embedded PostgreSQL under `.data/` unless ELOVA_DATABASE_URL is set; migrations;
the demo snapshot (an idempotent upsert, so a second run refreshes the same records); a
signing key under `.data/` unless one is configured; an approval of the demo account for its
workspaces and its first tokens; a banner with the MCP URL, the tokens and how to connect;
then serving until Ctrl-C. Every other setting is the ordinary ELOVA_* environment.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from service.auth.approvals import IssuedTokens
from service.cli.approve import approve
from service.cli.preflight import check_listeners, connect_postgresql
from service.config import Config
from service.demo.banner import Banner, render
from service.demo.document import DEFAULT_SEED, DEMO_EMAIL, demo_snapshot, demo_workspace_ids
from service.demo.embedded import (
    SIGNING_KEY_FILE,
    ensure_database,
    ensure_signing_key,
    start_postgres,
)
from service.errors import (
    ApprovalRefused,
    DemoStartFailed,
    EmbeddedUnavailable,
    LoadError,
    MigrationError,
)
from service.store.load_snapshot import LoadReport, load_snapshot
from service.store.migrate import migrate

DEMO_CLIENT_NAME = "Elova demo (make run)"
_PROG = "elova-mcp run-demo"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run-demo",
        help="the `make run` demo: embedded database, demo data, tokens, then serve",
        description="Start a demo service from nothing (see docs/connecting.md).",
    )
    p.add_argument(
        "--data-dir",
        default=".data",
        type=Path,
        help="where the embedded database and the signing key live (default: .data)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="demo data seed")


@dataclass(frozen=True)
class Prepared:
    report: LoadReport
    tokens: IssuedTokens
    client_id: str
    seconds: float


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    data_dir: Path = args.data_dir.resolve()
    env = dict(os.environ)
    server: Any = None  # the embedded server's handle: it stops when the process exits
    notes: list[str] = []
    try:
        # Set but empty is an error, not "unset" (Config.from_env says so below).
        if "ELOVA_DATABASE_URL" not in env:
            _say("starting the embedded PostgreSQL (the first run initialises it)…")
            server, admin_uri = start_postgres(data_dir)
            env["ELOVA_DATABASE_URL"] = asyncio.run(ensure_database(admin_uri))
            notes.append(f"embedded PostgreSQL, data in {data_dir / 'pg'}")
        else:
            notes.append("ELOVA_DATABASE_URL")
        if "ELOVA_SIGNING_KEY" not in env and "ELOVA_SIGNING_KEY_FILE" not in env:
            key_path, created = ensure_signing_key(data_dir / SIGNING_KEY_FILE)
            env["ELOVA_SIGNING_KEY_FILE"] = str(key_path)
            notes.append(f"{'new' if created else 'existing'} key {key_path}")
        cfg = Config.from_env(env)
        check_listeners(cfg)  # before printing tokens for a service that could not listen
        prepared = asyncio.run(_prepare(cfg, args.seed))
    except (EmbeddedUnavailable, DemoStartFailed) as err:
        sys.stderr.write(f"{_PROG}: {err}\n")
        return 1
    prepared = Prepared(
        prepared.report, prepared.tokens, prepared.client_id, time.perf_counter() - started
    )
    sys.stdout.write(render(_banner(cfg, env, prepared, notes, args.seed)))
    sys.stdout.flush()
    return _serve(cfg, server)


async def _prepare(cfg: Config, seed: int) -> Prepared:
    conn = await connect_postgresql(cfg.database_url)
    try:
        await migrate(conn)
        _say("loading the demo snapshot…")
        report = await load_snapshot(conn, msgspec.json.encode(demo_snapshot(seed)))
        client_id = await _demo_client(conn)
        tokens = await approve(
            conn,
            cfg,
            account=DEMO_EMAIL,
            workspaces=demo_workspace_ids(seed),
            expires="30d",
            client_name=DEMO_CLIENT_NAME,
            client_id=client_id,
        )
        if client_id is None:
            client_id = await conn.fetchval(
                "SELECT client_id FROM approvals WHERE id = $1", tokens.approval_id
            )
    except (MigrationError, LoadError, ApprovalRefused) as err:
        raise DemoStartFailed(str(err)) from err
    finally:
        await conn.close()
    assert client_id is not None
    return Prepared(report, tokens, client_id, 0.0)


async def _demo_client(conn: asyncpg.Connection) -> str | None:
    """The operator client of earlier demo runs: approving it again renews one approval
    (its generation moves on) instead of piling up a new approval on every run."""
    found: str | None = await conn.fetchval(
        "SELECT client_id FROM oauth_clients WHERE kind = 'operator' AND client_name = $1"
        " ORDER BY created_at, client_id LIMIT 1",
        DEMO_CLIENT_NAME,
    )
    return found


def _banner(
    cfg: Config, env: dict[str, str], prepared: Prepared, notes: list[str], seed: int
) -> Banner:
    # The approve command must sign for the same audience and database as this run.
    approve_env = {
        "ELOVA_DATABASE_URL": env["ELOVA_DATABASE_URL"],
        "ELOVA_PUBLIC_URL": cfg.public_url,
    }
    if env.get("ELOVA_SIGNING_KEY_FILE"):
        approve_env["ELOVA_SIGNING_KEY_FILE"] = env["ELOVA_SIGNING_KEY_FILE"]
    return Banner(
        mcp_url=cfg.mcp_resource,
        base_url=cfg.public_url,
        email=DEMO_EMAIL,
        workspace_ids=demo_workspace_ids(seed),
        access_token=prepared.tokens.access_token,
        refresh_token=prepared.tokens.refresh_token,
        expires_in=prepared.tokens.expires_in,
        client_id=prepared.client_id,
        approve_env=approve_env,
        database_note=notes[0],
        key_note=notes[1] if len(notes) > 1 else "configured key",
        shared_limits=cfg.redis_url is not None,
        loaded=prepared.report.summary(),
        seconds=prepared.seconds,
    )


def _serve(cfg: Config, server: Any) -> int:
    from service.app import create_app
    from service.observability.logs import configure_logging
    from service.server.listener import serve

    configure_logging(cfg.log_level)
    app = create_app(cfg)
    try:
        # No load balancer to drain for: Ctrl-C stops at once.
        asyncio.run(serve(app, cfg, drain_seconds=0))
    except OSError as err:
        if err.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        sys.stderr.write(f"{_PROG}: cannot listen on {cfg.host}:{cfg.port}: {err.strerror}\n")
        return 1
    finally:
        del server  # the embedded server stops at exit with its last handle
    return 0


def _say(line: str) -> None:
    sys.stderr.write(f"{_PROG}: {line}\n")
    sys.stderr.flush()
