"""`elova-mcp approve` end to end, in a subprocess, against the test database."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from service.auth.activity_counts import ActivityRecorder
from service.cli.approve import approve
from service.config import Config
from service.errors import ApprovalRefused
from tests.audit.reading import audit_lines
from tests.auth.helpers import AuthApp, SeedFn

ELOVA = Path(sys.executable).with_name("elova-mcp")


async def _cli(config: Config, *args: str, key: bool = True) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env["ELOVA_DATABASE_URL"] = config.database_url
    env["ELOVA_PUBLIC_URL"] = config.public_url
    if key:
        env["ELOVA_SIGNING_KEY"] = config.signing_key_pem.decode()
    proc = await asyncio.create_subprocess_exec(
        str(ELOVA),
        "approve",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_approve_prints_one_json_object_with_working_tokens(
    config: Config, seed: SeedFn, auth_app: AuthApp, db_pool: asyncpg.Pool
) -> None:
    who = await seed(2)
    args = ["--account", who.email.upper(), "--expires", "1d"]
    for w in who.workspaces:
        args += ["--workspace", str(w).upper()]
    code, out, err = await _cli(config, *args)
    # With the default stdout sink the grant's audit line goes to stderr (issue 42): stdout
    # stays the one JSON answer.
    assert code == 0
    (granted,) = audit_lines(err)
    assert granted["type"] == "consent.granted" and granted["actor"]["via"] == "cli"
    assert err.count("\n") == 1
    assert out.count("\n") == 1
    body: dict[str, Any] = json.loads(out)
    assert set(body) == {"approvalId", "clientId", "accessToken", "refreshToken", "expiresIn"}
    client = await db_pool.fetchval(
        "SELECT client_id FROM approvals WHERE id = $1", uuid.UUID(body["approvalId"])
    )
    assert body["clientId"] == client
    assert body["expiresIn"] == 300
    resp = await auth_app.client.get(
        "/mcp", headers={"Authorization": f"Bearer {body['accessToken']}"}
    )
    assert resp.status == 200
    assert set((await resp.json())["eligible"]) == {str(w) for w in who.workspaces}

    # Each run is a new approval, for a new client of the operator's own.
    code, again, _ = await _cli(config, *args, "--client-name", "second run")
    assert code == 0
    assert json.loads(again)["approvalId"] != body["approvalId"]
    names = await db_pool.fetch(
        """SELECT c.client_name, c.kind FROM approvals a JOIN oauth_clients c USING (client_id)
            WHERE a.account_id = $1 ORDER BY a.created_at""",
        who.account_id,
    )
    assert [(r["client_name"], r["kind"]) for r in names] == [
        ("elova-mcp approve", "operator"),
        ("second run", "operator"),
    ]

    # --list shows both; --revoke ends one and the token stops working.
    code, listed, _ = await _cli(config, "--list", "--account", who.email, key=False)
    assert code == 0 and len(json.loads(listed)["approvals"]) == 2
    code, revoked, err = await _cli(config, "--revoke", body["approvalId"], key=False)
    assert code == 0 and json.loads(revoked) == {"approvalId": body["approvalId"], "revoked": True}
    assert revoked.count("\n") == 1  # the answer, unchanged
    (line,) = audit_lines(err)  # the operator's revocation is in the trail (stderr)
    assert line["type"] == "approval.revoked" and line["outcome"]["reason"] == "operator"
    assert line["target"] == {"approval_id": body["approvalId"]} and line["actor"]["via"] == "cli"
    resp = await auth_app.client.get(
        "/mcp", headers={"Authorization": f"Bearer {body['accessToken']}"}
    )
    assert resp.status == 401


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workspace", "FOREIGN"], "not a member of workspace"),
        (["--workspace", "not-a-uuid"], "'not-a-uuid' is not a workspace id"),
        (["--scope", "n8n:write"], "unknown scope n8n:write"),
        (["--expires", "365d"], "expiry '365d' is not offered"),
        (["--client-id", "nope"], "no registered client with id nope"),
    ],
)
async def test_refusals_exit_1_with_one_line_and_no_stdout(
    config: Config, seed: SeedFn, db_pool: asyncpg.Pool, extra: list[str], message: str
) -> None:
    who = await seed(1)
    extra = [str(who.foreign_workspace) if x == "FOREIGN" else x for x in extra]
    args = ["--account", who.email, "--workspace", str(who.workspaces[0]), *extra]
    code, out, err = await _cli(config, *args)
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1 and message in err
    # A refusal leaves nothing behind, not even the operator client.
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM approvals WHERE account_id = $1", who.account_id
        )
        == 0
    )


async def test_unknown_account_and_revoke(config: Config) -> None:
    code, out, err = await _cli(
        config, "--account", "nobody@example.test", "--workspace", str(uuid.uuid4())
    )
    assert (code, out) == (1, "")
    assert "no account with email nobody@example.test" in err
    code, out, err = await _cli(config, "--revoke", str(uuid.uuid4()), key=False)
    assert (code, out) == (1, "")
    assert "no unrevoked approval" in err


async def test_in_process_approve_refuses_like_the_command(
    config: Config, db_pool: asyncpg.Pool, seed: SeedFn
) -> None:
    who = await seed(1)
    issued = await approve(db_pool, config, account=who.email, workspaces=who.workspaces)
    assert issued.scope == "n8n:read workspaces:read"
    with pytest.raises(ApprovalRefused, match="at least one workspace"):
        await approve(db_pool, config, account=who.email, workspaces=[])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--list", "--revoke", "ID", "--account", "EMAIL"], ("--list", "--revoke")),
        (["--account", "EMAIL", "--workspace", "WS", "--client-name", "n", "--client-id", "c"],
         ("--client-name", "--client-id")),
        (["--list", "--account", "EMAIL", "--workspace", "WS"], ("--list", "--workspace")),
        (["--list", "--account", "EMAIL", "--client-name", "n"], ("--list", "--client-name")),
        (["--revoke", "ID", "--expires", "1d"], ("--revoke", "--expires")),
        (["--revoke", "ID", "--scope", "n8n:read"], ("--revoke", "--scope")),
        (["--revoke", "ID", "--account", "EMAIL"], ("--revoke", "--account")),
        (["--account", "EMAIL"], ("--workspace",)),
        (["--list"], ("--account",)),
        (["--account", "EMAIL", "--workspace", "WS", "--scope", ""], ("--scope", "empty")),
        (["--account", "EMAIL", "--workspace", "WS", "--client-name", " "], ("--client-name",)),
    ],
)  # fmt: skip
async def test_conflicting_flags_exit_2_with_one_line_and_change_nothing(
    config: Config, seed: SeedFn, db_pool: asyncpg.Pool, flags: list[str], named: tuple[str, ...]
) -> None:
    who = await seed(1)
    issued = await approve(db_pool, config, account=who.email, workspaces=who.workspaces)
    values = {"ID": str(issued.approval_id), "EMAIL": who.email, "WS": str(who.workspaces[0])}
    code, out, err = await _cli(config, *(values.get(f, f) for f in flags))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("elova-mcp approve: "), err
    assert all(flag in err for flag in named), err
    assert "Traceback" not in err
    state = await db_pool.fetch(
        "SELECT id, revoked_at FROM approvals WHERE account_id = $1", who.account_id
    )
    assert [(r["id"], r["revoked_at"]) for r in state] == [(issued.approval_id, None)]


async def test_list_names_workspaces_and_last_use(
    config: Config, seed: SeedFn, auth_app: AuthApp, db_pool: asyncpg.Pool
) -> None:
    who = await seed(3)
    chosen = who.workspaces[:2]
    args = ["--account", who.email, "--client-name", "nightly report"]
    code, out, _ = await _cli(config, *args, *(a for w in chosen for a in ("--workspace", str(w))))
    assert code == 0
    granted = json.loads(out)

    code, listed, err = await _cli(config, "--list", "--account", who.email, key=False)
    assert (code, err) == (0, "")
    (row,) = json.loads(listed)["approvals"]
    names = dict(await db_pool.fetch("SELECT id, name FROM workspaces WHERE id = ANY($1)", chosen))
    assert row["approvalId"] == granted["approvalId"]
    assert row["clientId"] == granted["clientId"] and row["clientName"] == "nightly report"
    assert row["registration"] == "operator"
    assert sorted(w["id"] for w in row["workspaces"]) == sorted(str(w) for w in chosen)
    assert all(w["name"] == names[uuid.UUID(w["id"])] for w in row["workspaces"])
    assert row["createdAt"].endswith("Z") and row["expiresAt"] > row["createdAt"]
    assert row["lastUsedAt"] is None  # no refresh yet

    # A refresh is a use: the newest refresh exchange is the approval's last use.
    resp = await auth_app.client.post(
        "/token",
        data={
            "grant_type": "refresh_token",
            "client_id": granted["clientId"],
            "refresh_token": granted["refreshToken"],
        },
    )
    assert resp.status == 200, await resp.text()
    code, listed, _ = await _cli(config, "--list", "--account", who.email, key=False)
    (row,) = json.loads(listed)["approvals"]
    assert row["lastUsedAt"] is not None and row["lastUsedAt"] >= row["createdAt"]


async def test_list_shows_tool_calls_as_last_use_and_counts(
    config: Config, seed: SeedFn, db_pool: asyncpg.Pool
) -> None:
    who = await seed(1)
    args = ["--account", who.email, "--workspace", str(who.workspaces[0])]
    code, out, _ = await _cli(config, *args)
    assert code == 0
    granted = json.loads(out)
    # Two calls recorded by a replica and flushed, as the tool-call path does.
    recorder = ActivityRecorder()
    for _ in range(2):
        recorder.record(uuid.UUID(granted["approvalId"]), "get_many_executions")
    assert await recorder.flush(db_pool) == 1

    code, listed, _ = await _cli(config, "--list", "--account", who.email, key=False)
    (row,) = json.loads(listed)["approvals"]
    assert row["lastUsedAt"] is not None and row["lastUsedAt"] >= row["createdAt"]
    assert row["calls"] == {"get_many_executions": {"last24h": 2, "last7d": 2}}
