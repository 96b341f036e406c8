"""The MCP conformance suite (@modelcontextprotocol/conformance 0.1.16) against the running
`elova-mcp serve`, through the bearer test proxy. Each scenario must pass: every check it
records is SUCCESS (INFO is allowed: it marks an optional behaviour such as SSE responses),
none is FAILURE or WARNING. The result is read from the suite's checks.json, not only from
its exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.node import BIN, run
from tests.clients.proxy import BearerProxy

SCENARIOS = {
    # scenario: the check ids it must record
    "server-initialize": {"server-initialize"},
    "ping": {"ping"},
    "tools-list": {"tools-list"},
    "resources-list": {"resources-list"},
    "prompts-list": {"prompts-list"},
    "server-sse-multiple-streams": {
        "server-accepts-multiple-post-streams",
        "server-sse-streams-functional",
    },
    "dns-rebinding-protection": {
        "localhost-host-rebinding-rejected",
        "localhost-host-valid-accepted",
    },
}


def checks_of(output_dir: Path, scenario: str) -> list[dict[str, Any]]:
    found = list(output_dir.glob(f"server-{scenario}-*/checks.json"))
    assert len(found) == 1, f"expected one checks.json for {scenario}, found {found}"
    checks: list[dict[str, Any]] = json.loads(found[0].read_text("utf-8"))
    return checks


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_conformance_scenario_passes(
    node_env: dict[str, str], proxy: BearerProxy, tmp_path: Path, scenario: str
) -> None:
    done = await run(
        [str(BIN / "conformance"), "server", "--url", proxy.url, "--scenario", scenario,
         "--output-dir", str(tmp_path)],
        node_env,
    )  # fmt: skip
    checks = checks_of(tmp_path, scenario)
    by_id = {c["id"]: c for c in checks}
    assert set(by_id) == SCENARIOS[scenario], done.describe()
    bad = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")]
    assert not bad, f"{scenario}: {json.dumps(bad, indent=1)}\n{done.describe()}"
    assert done.returncode == 0, done.describe()

    if scenario == "server-sse-multiple-streams":
        details = by_id["server-accepts-multiple-post-streams"]["details"]
        assert details["statuses"] == [200, 200, 200]
    if scenario == "dns-rebinding-protection":
        rejected = by_id["localhost-host-rebinding-rejected"]["details"]
        assert rejected["statusCode"] == 403  # the service's own Origin/Host check
        hostile = [e for e in proxy.exchanges if e.host == "evil.example.com"]
        assert hostile and hostile[0].origin == "http://evil.example.com"
        assert hostile[0].statuses == [403]
