"""A real Prometheus and Alertmanager for the live alert tests (tests/ops/test_alerts_live.py):
Debian's `prometheus` and `prometheus-alertmanager` on free loopback ports, loading the
repository's own rules on a compressed clock, and the questions the tests ask them.

The compressed clock (docs/testing.md, "Alerts on a real Prometheus"): every duration
in the rules (range windows, `for:`) is divided by `TIME_FACTOR`, and scrapes and
evaluations run every `EVAL_SECONDS`. Ratios, thresholds and burn rates are untouched: the
rules decide exactly as written, sixty times sooner. Rule and alert names stay the same.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.ops.tooling import ROOT, require
from tests.ops.yamldocs import load_file
from tests.support.server import free_port

RULES = ROOT / "grafana" / "alerts" / "elova-mcp.rules.yaml"
TIME_FACTOR = 60
EVAL_SECONDS = 1
JOB = "elova-mcp"
# Prometheus sends a firing alert on the evaluation that fires it; Alertmanager lists it as
# soon as it is received. This is the allowance for that hop on a loaded 2-core machine.
DELIVERY_SECONDS = 3.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)([smhd])")


def seconds(duration: str) -> float:
    """A Prometheus duration of one unit ("5m", "1d") in seconds."""
    match = _DURATION.fullmatch(duration)
    assert match, duration
    return int(match[1]) * _UNITS[match[2]]


def _compressed(duration: str) -> str:
    return f"{max(EVAL_SECONDS, seconds(duration) // TIME_FACTOR)}s"


def compress(rules: dict[str, Any]) -> dict[str, Any]:
    """The rules on the test clock: range windows and `for:` divided by TIME_FACTOR, every
    group evaluated at the global interval. Nothing else changes."""
    groups = []
    for group in rules["groups"]:
        out = []
        for rule in group["rules"]:
            rule = dict(rule)
            rule["expr"] = re.sub(
                r"\[(\d+[smhd])\]", lambda m: f"[{_compressed(m[1])}]", rule["expr"]
            )
            if "for" in rule:
                rule["for"] = _compressed(rule["for"])
            out.append(rule)
        groups.append({"name": group["name"], "rules": out})  # no `interval`: the global one
    return {"groups": groups}


def alert_rules() -> dict[str, dict[str, Any]]:
    """The repository's alerting rules by name (uncompressed)."""
    groups = load_file(RULES)["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def for_seconds(alert: str) -> float:
    """The alert's `for:` on the test clock."""
    return seconds(_compressed(alert_rules()[alert]["for"]))


@dataclass
class Seen:
    """One alert's path in one induction (seconds since the cause was induced)."""

    alert: str
    pending_after: float  # Prometheus' activeAt (the expression first true)
    firing_after: float  # first listed active by Alertmanager
    resolved_after: float | None = None  # since the cause was removed

    def line(self) -> str:
        resolved = "-" if self.resolved_after is None else f"{self.resolved_after:.1f} s"
        return (
            f"{self.alert}: pending {self.pending_after:.1f} s, firing in Alertmanager "
            f"{self.firing_after:.1f} s after the cause; resolved {resolved} after its removal"
        )


class Monitoring:
    """Prometheus scraping `targets` with the compressed rules, sending to an Alertmanager."""

    def __init__(self, targets: Sequence[int]) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="elova-alerts-"))
        self.prom_port, self.am_port = free_port(), free_port()
        self.targets = list(targets)
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def alertmanager(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    def start(self) -> Monitoring:
        prometheus = require("prometheus")
        alertmanager = require("prometheus-alertmanager")
        rules = self.work / "rules.json"  # JSON is YAML
        rules.write_text(json.dumps(compress(load_file(RULES))))
        am_config = {"route": {"receiver": "nobody", "group_wait": "0s", "group_interval": "1s"},
                     "receivers": [{"name": "nobody"}]}  # fmt: skip
        (self.work / "alertmanager.yml").write_text(json.dumps(am_config))
        every = f"{EVAL_SECONDS}s"
        config = {
            "global": {"scrape_interval": every, "scrape_timeout": every,
                       "evaluation_interval": every},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{self.am_port}"]}]}]},
            "scrape_configs": [{"job_name": JOB, "static_configs": [
                {"targets": [f"127.0.0.1:{port}" for port in self.targets]}]}],
        }  # fmt: skip
        (self.work / "prometheus.yml").write_text(json.dumps(config))
        self._spawn("alertmanager", [
            alertmanager, f"--config.file={self.work / 'alertmanager.yml'}",
            f"--storage.path={self.work / 'am'}", f"--web.listen-address=127.0.0.1:{self.am_port}",
            "--cluster.listen-address=",  # no gossip port: a single Alertmanager
        ])  # fmt: skip
        self._spawn("prometheus", [
            prometheus, f"--config.file={self.work / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.work / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.prom_port}",
            "--rules.alert.resend-delay=1s",  # re-send firing alerts each second, not minute
        ])  # fmt: skip
        try:
            for base in (self.alertmanager, self.prometheus):
                _wait_ready(base)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, args: list[str]) -> None:
        with (self.work / f"{name}.log").open("wb") as log:
            self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.work.glob("*.log"))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        shutil.rmtree(self.work, ignore_errors=True)

    async def query(self, session: aiohttp.ClientSession, expr: str) -> list[Any]:
        async with session.get(f"{self.prometheus}/api/v1/query", params={"query": expr}) as r:
            body = await r.json()
        assert body.get("status") == "success", (expr, body)
        result: list[Any] = body["data"]["result"]
        return result

    async def pending_since(self, session: aiohttp.ClientSession, alert: str) -> float | None:
        """Wall-clock time Prometheus first saw the alert's expression true (activeAt)."""
        async with session.get(f"{self.prometheus}/api/v1/alerts") as resp:
            body = await resp.json()
        times = [
            _epoch(a["activeAt"])
            for a in body["data"]["alerts"]
            if a["labels"].get("alertname") == alert
        ]
        return min(times) if times else None

    async def firing(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """Alerts Alertmanager holds as active (firing, not resolved) right now, each with
        its startsAt (when Prometheus fired it; the earliest of its series)."""
        params = {"active": "true", "silenced": "true", "inhibited": "true"}
        async with session.get(f"{self.alertmanager}/api/v2/alerts", params=params) as resp:
            alerts = await resp.json()
        now = time.time()
        found: dict[str, float] = {}
        for a in alerts:
            if a["status"]["state"] == "active" and _epoch(a["endsAt"]) > now:
                name, starts = a["labels"]["alertname"], _epoch(a["startsAt"])
                found[name] = min(starts, found.get(name, starts))
        return found

    async def wait_firing(
        self, session: aiohttp.ClientSession, alerts: Sequence[str], since: float, timeout: float
    ) -> dict[str, Seen]:
        """Wait until Alertmanager lists each alert as firing; check it got there within
        its `for:` plus two evaluation intervals (and DELIVERY_SECONDS of notification) of
        Prometheus seeing the expression true. `since`: time.time() of the cause."""
        seen: dict[str, Seen] = {}
        polls = 0

        async def all_firing() -> bool:
            nonlocal polls
            now, polls = time.time(), polls + 1
            firing = await self.firing(session)
            for alert in set(firing) & set(alerts) - set(seen):
                pending = await self.pending_since(session, alert)
                assert pending is not None, f"{alert} in Alertmanager but not in Prometheus"
                if polls == 1:  # already there when the wait began: Prometheus' firing time
                    arrived, allowance = firing[alert], 2.0 * EVAL_SECONDS
                else:  # arrived since the previous poll
                    arrived, allowance = now, 2 * EVAL_SECONDS + DELIVERY_SECONDS
                seen[alert] = Seen(alert, pending - since, arrived - since)
                late = arrived - pending - for_seconds(alert)
                assert late <= allowance, f"{alert} firing {late:.1f} s after its for: ended"
            return len(seen) == len(alerts)

        try:
            await eventually(all_firing, timeout, f"{alerts} firing")
        except AssertionError as err:
            states = await self.query(session, "ALERTS")
            held = sorted((s["metric"]["alertname"], s["metric"]["alertstate"]) for s in states)
            raise AssertionError(f"{err}; reached: {sorted(seen)}; Prometheus has {held}") from None
        return seen

    async def wait_resolved(
        self, session: aiohttp.ClientSession, seen: dict[str, Seen], since: float, timeout: float
    ) -> None:
        """Wait until Alertmanager no longer lists any of the alerts as firing."""

        async def all_resolved() -> bool:
            now = time.time()
            firing = await self.firing(session)
            for alert, path in seen.items():
                if path.resolved_after is None and alert not in firing:
                    path.resolved_after = now - since
            return all(path.resolved_after is not None for path in seen.values())

        left = [a for a, p in seen.items() if p.resolved_after is None]
        await eventually(all_resolved, timeout, f"alerts {left} resolved")


def _epoch(stamp: str) -> float:
    """An RFC 3339 time from either API (nanosecond fractions, Z or an offset)."""
    from datetime import datetime

    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def _wait_ready(base: str, timeout: float = 30.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{base} is not ready after {timeout} s")


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> float:
    """Seconds until `check()` is true; fails naming `what` after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.25)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")
