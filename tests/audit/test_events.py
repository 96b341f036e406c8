"""Every audit event type through the real endpoints, read back from a file sink and
validated against docs/audit/audit-event.v1.schema.json; nothing secret in any line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from service.app_keys import AUDIT
from service.config import Config
from tests.audit.reading import audit_lines, of_type
from tests.auth.browser_flow import OAuth
from tests.auth.clients.test_metadata_documents import DocumentServer, docs  # noqa: F401 (the fixture)
from tests.auth.flow import Registered, bearer, hidden, seed_account, tool_call
from tests.auth.test_cli import ELOVA


async def _read(oauth: OAuth, path: Path) -> list[dict[str, Any]]:
    await oauth.http.app[AUDIT].flushed()
    return audit_lines(path.read_text())


async def _call(oauth: OAuth, token: str | None, name: str, arguments: Any) -> Any:
    body, headers = tool_call(name, arguments)
    return await oauth.http.post("/mcp", json=body, headers=bearer(headers, token))


async def _cli(cfg: Config, sink: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env |= {"ELOVA_DATABASE_URL": cfg.database_url, "ELOVA_AUDIT_SINK": sink}
    env |= {"ELOVA_PUBLIC_URL": cfg.public_url, "ELOVA_SIGNING_KEY": cfg.signing_key_pem.decode()}
    proc = await asyncio.create_subprocess_exec(
        str(ELOVA), "approve", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_every_event_type_is_one_valid_line_without_secrets(
    audited: OAuth,
    audit_file: Path,
    docs: DocumentServer,  # noqa: F811
) -> None:
    oauth = audited
    account = await seed_account(oauth.pool, workspaces=2)
    secrets: list[str] = [account.password, account.email]

    # client registered (dynamic; a confidential one has a secret that must not show)
    confidential = await oauth.register(token_endpoint_auth_method="client_secret_basic")
    secrets.append(confidential.body["client_secret"])

    # sign-in failed: wrong password, and an email that names no account
    bad = await oauth.signin(_with(account, "wrong password"))
    assert bad.status == 401
    nobody = _with(account, "x", email=f"nobody-{uuid.uuid4().hex[:6]}@example.test")
    assert (await oauth.signin(nobody)).status == 401

    # sign-in succeeded, consent granted, code exchanged
    got = await oauth.code_for(account, workspaces=account.workspaces)
    secrets += [got["code"], got["verifier"]]
    secrets += [c.value for c in oauth.http.session.cookie_jar]
    exchanged = await oauth.exchange(got)
    assert exchanged.status == 200
    bad_verifier = await oauth.code_for(account)  # a code redeemed with the wrong verifier
    secrets += [bad_verifier["code"], bad_verifier["verifier"]]
    assert (await oauth.exchange(bad_verifier, code_verifier="x" * 43)).status == 400
    issued = await exchanged.json()
    access, refresh = issued["access_token"], issued["refresh_token"]
    secrets += [access, refresh]

    # token refreshed (narrower: an access token without n8n:read, for the 403 below)
    narrowed = await oauth.refresh(got, refresh, scope="workspaces:read")
    assert narrowed.status == 200
    narrow = await narrowed.json()
    secrets += [narrow["access_token"], narrow["refresh_token"]]

    # tool calls: ok, tool error, bad arguments, unknown tool, 401, 403, 429
    ws = account.workspaces[0]
    ok = await _call(oauth, narrow["access_token"], "get_workspace", {"workspaceId": ws})
    assert ok.status == 200 and '"isError":false' in (await ok.text()).replace(" ", "")
    missing = str(uuid.uuid4())
    not_found = await _call(
        oauth, narrow["access_token"], "get_workspace", {"workspaceId": missing}
    )
    assert '"isError":true' in (await not_found.text()).replace(" ", "")
    listed = {"limit": "many", "period": "last_7_days"}
    bad_args = await _call(oauth, narrow["access_token"], "get_many_workspaces", listed)
    assert "VALIDATION_ERROR" in await bad_args.text()
    unknown = await _call(oauth, narrow["access_token"], "no_such_tool", {})
    assert unknown.status == 200 and "-32602" in await unknown.text()
    assert (await _call(oauth, "not-a-token", "get_workspace", {"workspaceId": ws})).status == 401
    forbidden = await _call(
        oauth, narrow["access_token"], "get_many_instances", {"workspaceId": ws}
    )
    assert forbidden.status == 403
    statuses = []
    for _ in range(12):
        answer = await _call(oauth, narrow["access_token"], "get_many_workspaces", {"limit": 5})
        statuses.append(answer.status)
        if answer.status == 429:
            break
    assert statuses[-1] == 429, statuses

    # refresh token reused: the family (the approval) is revoked
    reused = await oauth.refresh(got, refresh)
    assert reused.status == 400
    # a token of the revoked approval: 401, the actor the token names, unconfirmed
    after = await _call(oauth, narrow["access_token"], "get_workspace", {"workspaceId": ws})
    assert after.status == 401

    # approval revoked on the Approvals page (a second approval, through a metadata
    # document's client: the client first stored is a client registered)
    doc_client = Registered(docs.url, "http://127.0.0.1:61234/callback")
    second = await oauth.code_for(account, doc_client)
    secrets.append(second["code"])
    approval_id = await oauth.pool.fetchval(
        "SELECT id FROM approvals WHERE client_id = $1", docs.url
    )
    confirm = await oauth.http.get("/approvals/revoke", params={"approval": str(approval_id)})
    revoked = await oauth.http.post(
        "/approvals/revoke", data=dict(hidden(await confirm.text(), 1)), allow_redirects=False
    )
    assert revoked.status == 303

    # approval revoked by its client at /revoke (RFC 7009)
    fourth = await oauth.code_for(account)
    fourth_tokens = await (await oauth.exchange(fourth)).json()
    secrets += [fourth["code"], fourth_tokens["access_token"], fourth_tokens["refresh_token"]]
    by_client = await oauth.http.post(
        "/revoke",
        data={"token": fourth_tokens["refresh_token"], "client_id": fourth["reg"].client_id},
    )
    assert by_client.status == 200

    # consent granted and approval revoked from the CLI (`elova-mcp approve`)
    sink = f"file:{audit_file}"
    code, out, err = await _cli(oauth.cfg, sink, "--account", account.email, "--workspace", ws)
    assert code == 0, err
    third = json.loads(out)
    secrets += [third["accessToken"], third["refreshToken"]]
    third_id = third["approvalId"]
    code, out, err = await _cli(oauth.cfg, sink, "--revoke", third_id)
    assert code == 0, err

    lines = await _read(oauth, audit_file)
    by_type = {kind: of_type(lines, kind) for kind in {line["type"] for line in lines}}
    assert set(by_type) == {
        "tool.call", "signin.succeeded", "signin.failed", "consent.granted", "code.exchanged",
        "token.refreshed", "refresh.reused", "approval.revoked", "client.registered",
    }  # fmt: skip

    # the nine tool calls and the calls until 429, each with its three layers
    calls = by_type["tool.call"]
    assert len(calls) == 6 + len(statuses) + 1
    layers = [c["outcome"] for c in calls]
    outcomes = [(o["http_status"], o.get("jsonrpc_code"), o.get("tool_error")) for o in layers]
    assert outcomes[:6] == [
        (200, None, None), (200, None, "NOT_FOUND"), (200, None, "VALIDATION_ERROR"),
        (200, -32602, None), (401, 401, None), (403, 403, None),
    ]  # fmt: skip
    assert outcomes[-2:] == [(429, 429, None), (401, 401, None)]
    revoked_caller = calls[-1]["actor"]
    assert revoked_caller["account_id"] == account.id and revoked_caller["confirmed"] is False
    first = calls[0]
    assert first["target"] == {
        "tool": "get_workspace", "workspace_ids": [ws], "record_ids": {"workspaceId": ws}
    }  # fmt: skip
    assert first["actor"]["account_id"] == account.id and first["actor"]["confirmed"] is True
    assert first["actor"]["approval_id"] == str(issued_approval(lines))
    assert first["context"]["request_id"] and first["context"]["client_address"] == "127.0.0.1"
    assert calls[2]["arguments"]["clear"] == {"period": "last_7_days"}  # "many" is no limit
    nobody_known = {"account_id": None, "client_id": None, "approval_id": None}
    assert calls[4]["actor"] == {**nobody_known, "confirmed": False, "via": "http"}  # 401
    assert calls[5]["actor"]["confirmed"] is True and calls[5]["actor"]["account_id"] == account.id
    # the same arguments, the same digest; other arguments, another
    same = [c["arguments"]["digest"] for c in calls[6:-1]]
    assert len(set(same)) == 1 and same[0] != calls[2]["arguments"]["digest"]
    assert calls[-2]["arguments"]["clear"] == {"limit": 5}

    failed = by_type["signin.failed"]
    assert [f["actor"]["account_id"] for f in failed] == [account.id, None]
    assert by_type["signin.succeeded"][0]["actor"]["account_id"] == account.id
    by_operator = [c for c in by_type["consent.granted"] if c["actor"]["via"] == "cli"]
    assert [c["target"]["approval_id"] for c in by_operator] == [third_id]
    assert by_operator[0]["actor"]["account_id"] == account.id
    assert by_operator[0]["target"]["workspace_ids"] == [ws]
    consent = by_type["consent.granted"][0]
    assert sorted(consent["target"]["workspace_ids"]) == sorted(account.workspaces)
    assert consent["target"]["scopes"] == ["n8n:read", "workspaces:read"]
    exchanges = by_type["code.exchanged"]
    assert exchanges[0]["actor"]["account_id"] == account.id
    assert exchanges[0]["outcome"] == {"result": "success", "http_status": 200}
    assert exchanges[1]["outcome"] == {
        "result": "failure", "http_status": 400, "reason": "invalid_grant"
    }  # fmt: skip
    refreshed = by_type["token.refreshed"]
    assert refreshed[0]["outcome"]["result"] == "success"
    assert refreshed[0]["target"]["scopes"] == ["workspaces:read"]
    reuse = by_type["refresh.reused"][0]
    assert reuse["outcome"]["result"] == "failure"
    assert reuse["target"]["approval_id"] == consent["target"]["approval_id"]
    revocations = by_type["approval.revoked"]
    assert [(r["actor"]["via"], r["outcome"]["reason"]) for r in revocations] == [
        ("http", "user"),
        ("http", "client"),
        ("cli", "operator"),
    ]
    assert revocations[0]["target"]["approval_id"] == str(approval_id)
    assert revocations[1]["target"]["client_id"] == fourth["reg"].client_id
    assert revocations[2]["target"]["approval_id"] == third_id
    registered = [
        (r["target"]["client_id"], r["outcome"]["reason"]) for r in by_type["client.registered"]
    ]
    assert (confidential.client_id, "dynamic") in registered
    assert (docs.url, "metadata") in registered
    assert {r["ocsf_class_uid"] for r in lines} == {6003, 3002, 3003, 3001}

    text = audit_file.read_text()
    for secret in secrets:
        assert secret and secret not in text, f"a secret in the audit trail: {secret[:12]}…"
    assert not re.search(r"eyJ[A-Za-z0-9_-]{10,}", text)  # no JWT of any kind


def _with(account: Any, password: str, email: str | None = None) -> Any:
    from dataclasses import replace

    return replace(account, password=password, email=email or account.email)


def issued_approval(lines: list[dict[str, Any]]) -> str:
    return str(of_type(lines, "consent.granted")[0]["target"]["approval_id"])
