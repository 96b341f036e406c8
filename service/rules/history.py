"""The bounded history report of one execution (docs/reading-rules.md, The history report).

A snapshot carries the untruncated `history` object of get_execution (`HistoryIn`); the
loader (service/store/load_executions.py, and the bulk demo writer) bounds it once with
`bound_history` when it stores the execution, and get_execution returns the stored compact
JSON as is. Where the input rules are decided: docs/decisions/executions.md, Loading.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from service.rules.fields import Counter, Instant, NonEmpty
from service.rules.shaping import (
    format_instant,
    sanitize_free_text,
    sanitize_history_id,
    shorten,
)

MAX_NODES = 64
MAX_RUNS = 128
MAX_USAGE = 16
MAX_PINNED = 64
MAX_BYTES = 48 * 1024
ID_LENGTH = 200
LABEL_LENGTH = 200  # model, provider, error name, workflowVersionId
NODE_TEXT_LENGTH = 300  # node name and type, reason
MESSAGE_LENGTH = 1000

WholeDuration = Annotated[int, msgspec.Meta(ge=0, le=9007199254740991)]
Duration = Annotated[float, msgspec.Meta(ge=0, le=9007199254740991)]
RunStatus = Literal[
    "success", "error", "crashed", "canceled", "new", "running", "waiting", "unknown"
]


class _In(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Snapshot input: the get_execution `history` shape, untruncated. Field order here does
    not matter: the report is written in the schema's order by bound_history."""


class ErrorIn(_In):
    name: NonEmpty | None
    message: NonEmpty


class UsageIn(_In):
    id: NonEmpty | None
    model: NonEmpty | None
    provider: NonEmpty | None
    kind: Literal["reported", "estimated", "unknown"]
    pinned: bool | None
    modelSource: Literal["reported", "requested", "unknown"] | msgspec.UnsetType = msgspec.UNSET
    # A count the collector did not retain is unknown: absent reads as null, never 0.
    inputTokens: Counter | None = None
    outputTokens: Counter | None = None
    totalTokens: Counter | None = None
    cachedInputTokens: Counter | None = None
    reasoningTokens: Counter | None = None


class RunIn(_In):
    id: NonEmpty
    status: RunStatus
    startedAt: Instant | None
    durationMs: WholeDuration | Duration | None
    pinned: bool | None
    error: ErrorIn | None
    usage: list[UsageIn]


class NodeIn(_In):
    id: NonEmpty
    name: NonEmpty
    type: NonEmpty
    provenance: Literal["execution_snapshot", "recorded_run", "unknown"]
    pinned: bool | None
    runs: list[RunIn]


class PinningIn(_In):
    status: Literal["used", "not_used", "unknown"]
    source: Literal["execution_pin_data", "none", "unknown"]
    pinnedNodeIds: list[NonEmpty]


class FailureIn(_In):
    nodeId: NonEmpty
    runId: NonEmpty


class HistoryIn(_In):
    schemaVersion: Literal[1]
    availability: Literal["available", "partial", "unavailable", "expired"]
    reason: NonEmpty | None
    observedAt: Instant | None
    order: Literal["recorded", "unknown"]
    workflowVersionId: NonEmpty | None
    pinnedData: bool | None
    pinning: PinningIn
    failure: FailureIn | None
    nodes: list[NodeIn]
    executionError: ErrorIn | None | msgspec.UnsetType = msgspec.UNSET
    truncated: bool = False


_encode = msgspec.json.Encoder().encode


class _Shaper:
    """Sanitises and shortens strings, remembering whether anything was cut."""

    def __init__(self) -> None:
        self.cut = False

    def ident(self, value: str) -> str:
        return self._short(sanitize_history_id(value), ID_LENGTH)

    def text(self, value: str, limit: int) -> str:
        return self._short(sanitize_free_text(value), limit)

    def opt_ident(self, value: str | None) -> str | None:
        return None if value is None else self.ident(value)

    def opt_text(self, value: str | None, limit: int) -> str | None:
        return None if value is None else self.text(value, limit)

    def _short(self, value: str, limit: int) -> str:
        result, shortened = shorten(value, limit)
        self.cut = self.cut or shortened
        return result

    def take(self, items: list[Any], limit: int) -> list[Any]:
        if len(items) > limit:
            self.cut = True
            return items[:limit]
        return items

    def error(self, err: ErrorIn | None) -> dict[str, Any] | None:
        if err is None:
            return None
        return {
            "name": self.opt_text(err.name, LABEL_LENGTH),
            "message": self.text(err.message, MESSAGE_LENGTH),
        }

    def usage(self, row: UsageIn) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.opt_ident(row.id),
            "model": self.opt_text(row.model, LABEL_LENGTH),
        }
        if row.modelSource is not msgspec.UNSET:
            out["modelSource"] = row.modelSource
        out.update(
            provider=self.opt_text(row.provider, LABEL_LENGTH),
            kind=row.kind,
            pinned=row.pinned,
            inputTokens=row.inputTokens,
            outputTokens=row.outputTokens,
            totalTokens=row.totalTokens,
            cachedInputTokens=row.cachedInputTokens,
            reasoningTokens=row.reasoningTokens,
        )
        return out

    def run(self, run: RunIn) -> dict[str, Any]:
        return {
            "id": self.ident(run.id),
            "status": run.status,
            "startedAt": None if run.startedAt is None else format_instant(run.startedAt),
            "durationMs": run.durationMs,
            "pinned": run.pinned,
            "error": self.error(run.error),
            "usage": [self.usage(u) for u in self.take(run.usage, MAX_USAGE)],
        }

    def node_head(self, node: NodeIn) -> dict[str, Any]:
        return {
            "id": self.ident(node.id),
            "name": self.text(node.name, NODE_TEXT_LENGTH),
            "type": self.text(node.type, NODE_TEXT_LENGTH),
            "provenance": node.provenance,
            "pinned": node.pinned,
        }


def bound_history(history: HistoryIn) -> bytes:
    """The bounded report as compact UTF-8 JSON (what get_execution embeds):

    - strings are sanitised (ids: C0 and DEL; free text: NUL) and shortened to the schema's
      maxLength in code points (error messages 1000);
    - at most 64 pinnedNodeIds, 64 nodes, 128 runs a node, 16 usage rows a run;
    - unavailable or expired history has no nodes;
    - the compact UTF-8 JSON of the whole report is at most 48 KiB: the longest stored-order
      prefix that fits is kept (nodes, then runs of the last node), never splitting a run;
    - anything cut sets `truncated`, and availability `available` then becomes `partial`.

    Missing token counts stay null, never 0."""
    shaper = _Shaper()
    report: dict[str, Any] = {
        "schemaVersion": 1,
        "availability": history.availability,
        "reason": shaper.opt_text(history.reason, NODE_TEXT_LENGTH),
        "observedAt": None if history.observedAt is None else format_instant(history.observedAt),
        "order": history.order,
        "workflowVersionId": shaper.opt_ident(history.workflowVersionId),
        "pinnedData": history.pinnedData,
    }
    if history.executionError is not msgspec.UNSET:
        report["executionError"] = shaper.error(history.executionError)
    pinned_ids = [shaper.ident(i) for i in shaper.take(history.pinning.pinnedNodeIds, MAX_PINNED)]
    report["pinning"] = {
        "status": history.pinning.status,
        "source": history.pinning.source,
        "pinnedNodeIds": pinned_ids,
    }
    failure = history.failure
    report["failure"] = (
        None
        if failure is None
        else {"nodeId": shaper.ident(failure.nodeId), "runId": shaper.ident(failure.runId)}
    )
    # Unavailable or expired history has no nodes: whatever the file lists is not history.
    retained = history.availability in ("available", "partial")
    source_nodes = shaper.take(history.nodes, MAX_NODES) if retained else []
    heads = [shaper.node_head(n) for n in source_nodes]
    runs = [[shaper.run(r) for r in shaper.take(n.runs, MAX_RUNS)] for n in source_nodes]
    report["nodes"] = []
    report["truncated"] = history.truncated or shaper.cut
    _mark_partial(report)

    nodes = [{**head, "runs": node_runs} for head, node_runs in zip(heads, runs, strict=True)]
    report["nodes"] = nodes
    whole = _encode(report)
    if len(whole) <= MAX_BYTES:
        return whole
    report["truncated"] = True
    _mark_partial(report)
    report["nodes"] = _fit_nodes(report, heads, runs)
    return _encode(report)


def _mark_partial(report: dict[str, Any]) -> None:
    if report["truncated"] and report["availability"] == "available":
        report["availability"] = "partial"


def _fit_nodes(
    report: dict[str, Any], heads: list[dict[str, Any]], runs: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The longest stored-order prefix (whole nodes, then whole runs of the last node) whose
    report fits in MAX_BYTES. Compact JSON is concatenation, so sizes add up exactly."""
    report["nodes"] = []
    used = _fit_base(report)
    kept: list[dict[str, Any]] = []
    for head, node_runs in zip(heads, runs, strict=True):
        separator = 1 if kept else 0
        empty = len(_encode({**head, "runs": []}))
        if used + separator + empty > MAX_BYTES:
            break
        node_size = empty
        taken: list[dict[str, Any]] = []
        for run in node_runs:
            size = len(_encode(run)) + (1 if taken else 0)
            if used + separator + node_size + size > MAX_BYTES:
                break
            taken.append(run)
            node_size += size
        kept.append({**head, "runs": taken})
        used += separator + node_size
        if len(taken) < len(node_runs):
            break
    return kept


def _fit_base(report: dict[str, Any]) -> int:
    """Size of the report with no nodes; 64 astral pinned ids could alone pass the bound, so
    they are cut from the end until it fits."""
    size = len(_encode(report))
    pinned: list[str] = report["pinning"]["pinnedNodeIds"]
    while size > MAX_BYTES and pinned:
        pinned.pop()
        size = len(_encode(report))
    return size
