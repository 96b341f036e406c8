"""The dashboard's queries as Prometheus sees them: Grafana variables substituted, and the
metric names each query reads. Shared by the dashboard test and the Prometheus smoke script."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.ops.tooling import ROOT

DASHBOARDS = ROOT / "grafana" / "dashboards"
DASHBOARD = DASHBOARDS / "elova-mcp.json"
# The words a panel's description starts with when it is empty on a healthy service (it
# counts failures that only an incident produces); tests/ops/test_alerts_live.py checks
# such a panel during its incident instead of under plain load.
INCIDENT_ONLY = "Shows data during an incident only."
# What Grafana puts in place of its variables when it sends a query.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "30s",
    "$__range": "1h",
    "$job": "elova-mcp",
    "$tool": ".*",
}
# Series Prometheus makes itself, not the service.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and",
                       "or", "unless", "bool", "offset", "inf", "nan"})  # fmt: skip


@dataclass(frozen=True)
class Query:
    panel: str
    expr: str  # with Grafana variables substituted
    legend: str


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


def queries(dashboard: dict[str, Any] | None = None) -> list[Query]:
    """Every panel target, in dashboard order."""
    dashboard = dashboard or load()
    found = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            found.append(
                Query(panel["title"], substitute(target["expr"]), target.get("legendFormat", ""))
            )
    return found


def variable_metrics(dashboard: dict[str, Any] | None = None) -> set[str]:
    """Metric names the template variables query (label_values(metric{...}, label))."""
    dashboard = dashboard or load()
    names = set()
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = re.match(r"label_values\(([A-Za-z_:][A-Za-z0-9_:]*)", query)
            assert match, f"variable {variable['name']}: unexpected query {query!r}"
            names.add(match[1])
    return names


def panels() -> list[dict[str, Any]]:
    """Every panel with queries, of every dashboard in grafana/dashboards/."""
    found: list[dict[str, Any]] = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        found.extend(p for p in _panels(board["panels"]) if p.get("targets"))
    return found


def panel_queries(panel: dict[str, Any]) -> list[str]:
    return [substitute(target["expr"]) for target in panel["targets"]]


def incident_only(panel: dict[str, Any]) -> bool:
    return str(panel.get("description", "")).startswith(INCIDENT_ONLY)


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_panels(panel.get("panels", [])))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric (or recording rule) names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        token = match[0]
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function call
        if token.lower() not in _KEYWORDS:
            names.add(token)
    return names
