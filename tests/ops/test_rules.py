"""Alert rules: promtool accepts them, unit tests fire each alert, each links its runbook, and
each runbook links the dashboard panel and the query to look at."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.ops import alerting
from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_file

ALERTS_DIR = ROOT / "grafana" / "alerts"
RULES = ALERTS_DIR / "elova-mcp.rules.yaml"
TESTS = ALERTS_DIR / "elova-mcp.rules.test.yaml"
RUNBOOKS = ROOT / "grafana" / "runbooks"


def alerting_rules() -> list[dict[str, Any]]:
    groups = load_file(RULES)["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules() -> None:
    output = run([require("promtool"), "check", "rules", str(RULES)])
    assert "SUCCESS" in output


def test_promtool_unit_tests_pass() -> None:
    output = run([require("promtool"), "test", "rules", str(TESTS)])
    assert "SUCCESS" in output


def test_every_alert_is_fired_by_a_unit_test() -> None:
    cases = load_file(TESTS)["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert {rule["alert"] for rule in alerting_rules()} == fired


def test_every_alert_links_its_runbook_and_every_runbook_has_an_alert() -> None:
    names = set()
    for rule in alerting_rules():
        name = rule["alert"]
        names.add(name)
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"], name
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"/grafana/runbooks/{name}.md"), (name, url)
        runbook = (RUNBOOKS / f"{name}.md").read_text()
        assert runbook.startswith(f"# {name}\n")
        for section in ("## What it means", "## What to check", "## What to do"):
            assert section in runbook, (name, section)
    assert {path.stem for path in RUNBOOKS.glob("*.md")} == names


def test_slo_alerts_cover_availability_and_latency_with_two_speeds() -> None:
    slo = {(r["labels"].get("slo"), r["labels"]["severity"]) for r in alerting_rules()}
    assert {("availability", "critical"), ("availability", "warning")} <= slo
    assert {("latency", "critical"), ("latency", "warning")} <= slo
    absent = [r for r in alerting_rules() if "absent(" in r["expr"]]
    assert absent, "an alert must fire when Prometheus scrapes no target at all"


_PANEL_LINK = re.compile(
    r"\*\*Panel:\*\* \[(?P<title>[^\]]+)\]\(\.\./dashboards/(?P<file>[\w.-]+\.json)\) — in "
    r"Grafana `/d/(?P<uid>[\w-]+)/[\w-]+\?viewPanel=(?P<id>\d+)`"
)
_QUERY = re.compile(r"\*\*Query:\*\*\n\n```promql\n(?P<expr>.+?)\n```", re.DOTALL)


def test_every_runbook_links_a_dashboard_panel_and_its_query() -> None:
    for path in sorted(RUNBOOKS.glob("*.md")):
        text = path.read_text()
        link, query = _PANEL_LINK.search(text), _QUERY.search(text)
        assert link and query, f"{path.name}: no **Panel:** link with its **Query:**"
        board = json.loads((ROOT / "grafana" / "dashboards" / link["file"]).read_text())
        assert board["uid"] == link["uid"], path.name
        (panel,) = [p for p in board["panels"] if p["id"] == int(link["id"])]
        assert panel["title"] == link["title"], (path.name, panel["title"])
        exprs = [target["expr"] for target in panel["targets"]]
        assert query["expr"] in exprs, f"{path.name}: the query is not one of the panel's"


def test_the_live_tests_clock_changes_only_durations(tmp_path: Path) -> None:
    """tests/ops/test_alerts_live.py runs the rules with every window and `for:` divided by
    TIME_FACTOR: nothing else may differ, and Prometheus must accept the result."""
    rules = load_file(RULES)
    fast = alerting.compress(rules)
    for group, quick in zip(rules["groups"], fast["groups"], strict=True):
        for rule, short in zip(group["rules"], quick["rules"], strict=True):
            windows = re.findall(r"\[(\w+)\]", rule["expr"])
            assert re.findall(r"\[(\w+)\]", short["expr"]) == [
                f"{max(1, alerting.seconds(w) // alerting.TIME_FACTOR)}s" for w in windows
            ]
            assert re.sub(r"\[\w+\]", "[]", short["expr"]) == re.sub(r"\[\w+\]", "[]", rule["expr"])
            if "for" in rule:
                expected = alerting.seconds(rule["for"]) / alerting.TIME_FACTOR
                assert alerting.seconds(short["for"]) == expected, rule["alert"]
            assert {k: v for k, v in short.items() if k not in ("expr", "for")} == {
                k: v for k, v in rule.items() if k not in ("expr", "for")
            }
    path = tmp_path / "fast.rules.json"
    path.write_text(json.dumps(fast))
    assert "SUCCESS" in run([require("promtool"), "check", "rules", str(path)])
