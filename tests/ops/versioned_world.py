"""Two versions of one world for loads while serving (tests/ops/loads_while_serving.py), and
the clients that call tools on it and tell which version each answer shows.

Version 2 changes every record of version 1 — names end in "v2", a later sync and
observation time — and may hold more executions, so an answer that shows both versions
(its rows' names, its coverage, its totals) is seen, not guessed.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from tests.support.mcp_wire import tool_call

FIRST_PAGES = ("first_page", "first_page_filtered")
_SYNC = {1: "2025-01-15T09:30:00Z", 2: "2025-03-01T09:30:00Z"}
_OBSERVED = {1: "2025-01-15T09:35:00Z", 2: "2025-03-01T09:35:00Z"}
_STATUSES = ("success", "success", "success", "error", "crashed", "canceled", "running")


@dataclass(frozen=True)
class World:
    """Fixed ids for both versions: version 2 rewrites every record of version 1."""

    account: str
    email: str
    workspace: str
    instances: tuple[str, str]
    workflows: tuple[str, ...]
    executions: tuple[str, ...]

    @classmethod
    def new(cls, executions: int) -> World:
        def ids(n: int) -> tuple[str, ...]:
            return tuple(str(uuid.uuid4()) for _ in range(n))

        return cls(
            account=str(uuid.uuid4()),
            email=f"loads-{uuid.uuid4().hex[:8]}@example.test",
            workspace=str(uuid.uuid4()),
            instances=(str(uuid.uuid4()), str(uuid.uuid4())),
            workflows=ids(4),
            executions=ids(executions),
        )

    def snapshot(self, version: int, executions: int) -> bytes:
        """Version `version` of the world with its first `executions` executions."""
        v = f"v{version}"
        instances = [
            {
                "id": inst,
                "workspaceId": self.workspace,
                "name": f"Instance {k} {v}",
                "status": "connected",
                "autoSyncEnabled": True,
                "workflowIntervalMinutes": 60,
                "lastSyncAt": _SYNC[version],
                "lastWorkflowSyncAt": _SYNC[version],
                "lastExecutionSyncAt": _SYNC[version],
                "historyComplete": True,
                "syncState": {
                    "pending": False,
                    "scope": None,
                    "status": None,
                    "errorCode": None,
                    "lastAttemptAt": None,
                },
            }  # fmt: skip
            for k, inst in enumerate(self.instances)
        ]
        workflows = [
            {
                "id": wf,
                "instanceId": self.instances[k % 2],
                "name": f"Flow {k} {v}",
                "sourceId": f"src{k}",
                "active": True,
                "tracked": True,
                "present": True,
                "updatedAt": "2025-01-10T08:00:00Z",
                "observedAt": _OBSERVED[version],
                "nodes": [{"id": f"n{k}", "name": "Set", "type": "n8n-nodes-base.set"}],
            }
            for k, wf in enumerate(self.workflows)
        ]
        return msgspec.json.encode(
            {
                "accounts": [{"id": self.account, "email": self.email, "name": "Loads"}],
                "workspaces": [
                    {
                        "id": self.workspace,
                        "name": f"Loads {v}",
                        "timeZone": "UTC",
                        "members": [{"accountId": self.account, "role": "owner"}],
                    }
                ],
                "instances": instances,
                "workflows": workflows,
                "executions": [
                    self._execution(n, version)
                    for n in range(min(executions, len(self.executions)))
                ],
            }
        )

    def _execution(self, n: int, version: int) -> dict[str, Any]:
        k = n % len(self.workflows)
        day, minute = 1 + n % 28, n % 1440
        start = f"2025-01-{day:02d}T{minute // 60:02d}:{minute % 60:02d}:{n % 60:02d}Z"
        return {
            "id": self.executions[n],
            "instanceId": self.instances[k % 2],
            "workflowId": self.workflows[k],
            "workflowName": f"Flow {k} v{version}",
            "sourceId": str(n),
            "sourceWorkflowId": f"src{k}",
            "status": _STATUSES[n % len(_STATUSES)],
            "startedAt": start,
            "createdAt": start,
            "stoppedAt": start,
            "observedAt": _OBSERVED[version],
            "sourceMissing": False,
            "cost": {"amount": f"0.{n % 1000:03d}"},
        }


@dataclass
class Call:
    kind: str
    started: float
    seconds: float
    versions: frozenset[int]
    error: str = ""


def versions_of(kind: str, result: dict[str, Any], base: int, total: int) -> set[int]:
    """Every version an answer shows: names of its rows, coverage, totals."""
    found: set[int] = set()

    def name(text: str) -> None:
        found.add(int(text.rsplit(" v", 1)[1]))

    coverage = result.get("coverage")
    if coverage is not None:
        sync = coverage["lastSuccessfulSyncAt"] or ""
        found.add(1 if sync.startswith("2025-01-15") else 2)
        seen = coverage["firstObservedAt"] or ""
        found.add(1 if seen.startswith("2025-01-15") else 2)
    for row in result.get("executions", []):
        name(row["workflowName"])
        name(row["instanceName"])
    if "execution" in result:
        name(result["execution"]["workflowName"])
        name(result["execution"]["instanceName"])
    for row in result.get("workflows", []):
        name(row["name"])
        name(row["instanceName"])
    if kind == "stats" and base != total:
        count = result["totals"]["executions"]
        found.add(1 if count == base else 2 if count == total else 0)
    return found


class Client:
    """`concurrency` closed-loop callers of the mix, recording every call."""

    def __init__(self, url: str, token: str, world: World, base: int, total: int) -> None:
        self.url, self.token, self.world = url, token, world
        self.base, self.total = base, total
        self.calls: list[Call] = []
        self.stopping = False
        self.cursor = ""

    def _mix(self, worker: int) -> Iterator[tuple[str, dict[str, Any]]]:
        ws = self.world.workspace
        known = self.world.executions[: self.base]
        for n in itertools.count(worker):
            yield "first_page", {"workspaceId": ws, "limit": 20}
            yield "first_page_filtered", {
                "workspaceId": ws, "instanceId": self.world.instances[n % 2],
                "status": "failed", "limit": 20,
            }  # fmt: skip
            yield "second_page", {"workspaceId": ws, "limit": 20, "cursor": self.cursor}
            yield "first_page", {"workspaceId": ws, "limit": 20}
            yield "execution", {"workspaceId": ws, "executionId": known[(n * 7919) % len(known)]}
            yield "workflows", {"workspaceId": ws}
            yield "stats", {"workspaceId": ws, "period": "all", "timeZone": "UTC"}

    TOOLS = {
        "first_page": "get_many_executions",
        "first_page_filtered": "get_many_executions",
        "second_page": "get_many_executions",
        "execution": "get_execution",
        "workflows": "get_many_workflows",
        "stats": "get_execution_stats",
    }

    async def call(
        self, session: aiohttp.ClientSession, kind: str, arguments: dict[str, Any]
    ) -> tuple[Call, dict[str, Any]]:
        body, headers = tool_call(self.TOOLS[kind], arguments, token=self.token)
        started = time.monotonic()
        async with session.post(self.url, json=body, headers=headers) as resp:
            raw = await resp.read()
            status = resp.status
        seconds = time.monotonic() - started
        if status != 200:
            return Call(kind, started, seconds, frozenset(), f"HTTP {status}: {raw[:200]!r}"), {}
        answer = json.loads(raw)
        result = answer.get("result") or {}
        if "error" in answer or result.get("isError"):
            return Call(kind, started, seconds, frozenset(), raw[:300].decode()), result
        content = result["structuredContent"]
        versions = frozenset(versions_of(kind, content, self.base, self.total))
        return Call(kind, started, seconds, versions), content

    async def prepare(self, session: aiohttp.ClientSession) -> None:
        """The cursor every second-page call sends (its read generation never changes)."""
        _, first = await self.call(session, "first_page", {"workspaceId": self.world.workspace,
                                                         "limit": 20})  # fmt: skip
        self.cursor = first["nextCursor"]

    async def worker(self, session: aiohttp.ClientSession, n: int) -> None:
        for kind, arguments in self._mix(n):
            if self.stopping:
                return
            call, _ = await self.call(session, kind, arguments)
            self.calls.append(call)
