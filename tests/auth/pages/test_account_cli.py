"""`elova-mcp account create` (password on stdin) makes an account that can sign in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account
from tests.support.services import TestDatabase

ROOT = Path(__file__).resolve().parents[3]


def _cli(database: TestDatabase, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env["ELOVA_DATABASE_URL"] = database.dsn
    return subprocess.run(
        [sys.executable, "-m", "service", "account", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


async def test_account_create_then_sign_in(oauth: OAuth, test_database: TestDatabase) -> None:
    email = f"cli-{uuid.uuid4().hex[:8]}@Example.test"
    done = _cli(
        test_database,
        "create",
        "--email",
        email,
        "--name",
        "CLI Person",
        stdin="s3cret pass word\n",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["email"] == email and out["name"] == "CLI Person"
    stored = await oauth.pool.fetchval(
        "SELECT password_hash FROM accounts WHERE id = $1", uuid.UUID(out["accountId"])
    )
    assert stored.startswith("scrypt$") and "s3cret" not in stored

    again = _cli(
        test_database,
        "create",
        "--email",
        email.lower(),
        "--name",
        "Twin",
        stdin="another password\n",
    )
    assert again.returncode == 1 and "already exists" in again.stderr and again.stdout == ""
    short = _cli(test_database, "create", "--email", "x" + email, "--name", "X", stdin="short\n")
    assert short.returncode == 1 and "at least 8 characters" in short.stderr

    resp = await oauth.signin(Account(out["accountId"], email.lower(), "s3cret pass word", []))
    assert resp.status == 303

    reset = _cli(test_database, "set-password", "--email", email, stdin="a brand new one\n")
    assert reset.returncode == 0, reset.stderr
    assert (await oauth.http.get("/approvals", allow_redirects=False)).status == 303  # signed out
    resp = await oauth.signin(Account(out["accountId"], email, "a brand new one", []))
    assert resp.status == 303
