"""The README and docs/ say what the code does: every setting the README lists is one that
`Config.from_env` reads (with the default it documents), every `elova-mcp` command and
option the docs show exists in the CLI, every `make` target exists, and every relative link
points at a file and, with a `#fragment`, at a heading of it. A user copying from the docs
should never meet "no such option" or a dead link."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from service.__main__ import main
from service.config import Config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# What each documented default means on the parsed Config (README "Configuration" table).
DEFAULTS: dict[str, Callable[[Config], object]] = {
    "ELOVA_REDIS_KEY_PREFIX": lambda c: c.redis_key_prefix,
    "ELOVA_OAUTH_ADVERTISE_ISS_PARAMETER": lambda c: str(c.oauth_advertise_iss_parameter).lower(),
    "ELOVA_HOST": lambda c: c.host,
    "ELOVA_PORT": lambda c: c.port,
    "ELOVA_DRAIN_SECONDS": lambda c: c.drain_seconds,
    "ELOVA_LOG_LEVEL": lambda c: c.log_level,
    "ELOVA_ACCESS_TOKEN_TTL_SECONDS": lambda c: c.access_token_ttl_seconds,
    "ELOVA_LIMIT_GLOBAL_CONCURRENCY": lambda c: c.limits.global_concurrency,
    "ELOVA_LIMIT_ACCOUNT_CONCURRENCY": lambda c: c.limits.account_concurrency,
    "ELOVA_LIMIT_APPROVAL_PER_MINUTE": lambda c: c.limits.approval_per_minute,
    "ELOVA_LIMIT_SLOT_WAIT_MS": lambda c: round(c.limits.slot_wait_seconds * 1000),
    "ELOVA_REQUEST_DEADLINE_SECONDS": lambda c: c.limits.request_deadline_seconds,
    "ELOVA_MAX_BODY_BYTES": lambda c: c.limits.max_body_bytes,
    "ELOVA_MAX_RESPONSE_BYTES": lambda c: c.limits.max_response_bytes,
    "ELOVA_LEASE_GRACE_SECONDS": lambda c: c.limits.lease_grace_seconds,
    "ELOVA_EXPECTED_REPLICAS": lambda c: c.limits.expected_replicas,
    "ELOVA_REDIS_TIMEOUT_MS": lambda c: round(c.limits.redis_timeout_seconds * 1000),
    "ELOVA_REDIS_BREAKER_FAILURES": lambda c: c.limits.breaker_failures,
    "ELOVA_REDIS_BREAKER_COOLDOWN_SECONDS": lambda c: c.limits.breaker_cooldown_seconds,
    "ELOVA_REDIS_MODE": lambda c: c.redis_engine.mode,
    "ELOVA_SHED_LOOP_LAG_MS": lambda c: round(c.shedding.loop_lag_seconds * 1000),
    "ELOVA_SHED_ADMISSION": lambda c: c.shedding.admission,
    "ELOVA_MAX_CONNECTIONS": lambda c: c.connections.max_connections,
    "ELOVA_MAX_CONNECTIONS_PER_ADDRESS": lambda c: c.connections.max_connections_per_address,
    "ELOVA_HEADER_TIMEOUT_SECONDS": lambda c: c.connections.header_timeout_seconds,
    "ELOVA_BODY_TIMEOUT_SECONDS": lambda c: c.connections.body_timeout_seconds,
    "ELOVA_KEEPALIVE_TIMEOUT_SECONDS": lambda c: c.connections.keepalive_timeout_seconds,
    "ELOVA_PACE_REFUSALS_AFTER": lambda c: c.connections.pace_refusals_after,
    "ELOVA_LONGEST_REFUSAL_PAUSE_MS": lambda c: round(
        c.connections.longest_refusal_pause_seconds * 1000
    ),
}
# Settings documented as off/unset/none by default.
UNSET: dict[str, Callable[[Config], object]] = {
    "ELOVA_REDIS_URL": lambda c: c.redis_url,
    "ELOVA_ALLOWED_ORIGINS": lambda c: c.allowed_origins or None,
    "ELOVA_PREVIOUS_SIGNING_KEY_FILES": lambda c: c.previous_signing_keys_pem or None,
    "ELOVA_METRICS_PORT": lambda c: c.metrics_port,
    "ELOVA_LIMIT_ACCOUNT_PER_DAY": lambda c: c.limits.account_per_day,
    "ELOVA_REDIS_SENTINELS": lambda c: c.redis_engine.sentinels or None,
    "ELOVA_REDIS_SENTINEL_MASTER": lambda c: c.redis_engine.sentinel_master,
    "ELOVA_REDIS_SENTINEL_PASSWORD": lambda c: c.redis_engine.sentinel_password,
    "ELOVA_AUDIT_PEER_BUFFER_BYTES": lambda c: c.audit.peer_buffer_bytes,
}


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))  # `\|` stays in its cell
            rows.append([cell.strip() for cell in cells])
    return rows[1:]  # without the header row


def readme_settings() -> dict[str, str]:
    """Variable → documented default, one entry per variable (a `A` / `B` row gives two)."""
    out: dict[str, str] = {}
    for row in table_rows(section(README.read_text(), "Configuration")):
        names = re.findall(r"`(ELOVA_[A-Z0-9_]+)`", row[0])
        defaults = [d.strip() for d in row[1].split(" / ")]
        for i, name in enumerate(names):
            out[name] = defaults[i] if len(defaults) == len(names) else row[1]
    return out


def variables_read_by_config() -> set[str]:
    """Every ELOVA_* variable service/config.py and its sections (service/settings/) read."""
    files = [ROOT / "service" / "config.py", *(ROOT / "service" / "settings").glob("*.py")]
    source = "".join(path.read_text() for path in files)
    return set(re.findall(r'"(ELOVA_[A-Z0-9_]+)"', source))


def test_readme_lists_exactly_the_settings_config_reads() -> None:
    documented = set(readme_settings())
    read = variables_read_by_config()
    assert documented - read == set(), "documented but never read"
    assert read - documented == set(), "read but not documented in the README"


def test_readme_defaults_are_the_parsed_defaults() -> None:
    cfg = Config.from_env({"ELOVA_DATABASE_URL": "postgresql://u@h/db"}, need_key=False)
    settings = readme_settings()
    for name, get in DEFAULTS.items():
        documented = settings[name].strip("`")
        actual = get(cfg)
        if isinstance(actual, float) and actual.is_integer():
            actual = int(actual)
        assert documented == str(actual), f"{name}: README says {documented}, default is {actual}"
    for name, get in UNSET.items():
        assert re.match(r"(unset|none)\b", settings[name]), f"{name}: {settings[name]}"
        assert get(cfg) is None, name
    assert cfg.public_url == f"http://{cfg.host}:{cfg.port}"  # `http://<host>:<port>`


def test_connecting_settings_are_real_settings() -> None:
    text = (ROOT / "docs" / "connecting.md").read_text()
    named = set(re.findall(r"`(ELOVA_[A-Z0-9_]+)`", text))
    assert named <= variables_read_by_config()


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def documented_commands() -> set[tuple[str, ...]]:
    """Every `elova-mcp WORD [WORD]` the docs show, as the words before the options."""
    found: set[tuple[str, ...]] = set()
    for doc in DOCS:
        for match in re.finditer(r"elova-mcp ([a-z][a-z-]+)(?: ([a-z][a-z-]+))?", doc.read_text()):
            command, action = match.groups()
            found.add((command, action) if command == "account" and action else (command,))
    return found


def test_every_documented_command_exists(capsys: pytest.CaptureFixture[str]) -> None:
    top = help_text(capsys)
    commands = documented_commands()
    assert ("approve",) in commands and ("run-demo",) in commands
    for words in commands:
        missing = f"`elova-mcp {words[0]}` is not a command"
        assert re.search(rf"^\s+{words[0]}\b", top, re.M), missing
        if len(words) == 2:
            assert words[1] in help_text(capsys, words[0]), f"`elova-mcp {' '.join(words)}`"


def test_every_readme_command_lists_its_real_options(capsys: pytest.CaptureFixture[str]) -> None:
    """The operator table shows each command's options; each exists, and none is missing."""
    rows = table_rows(section(README.read_text(), "Operator commands"))
    shown: dict[str, set[str]] = {}
    for row in rows:
        usage = re.search(r"`elova-mcp ([a-z-]+)", row[0])
        assert usage, row
        command = usage.group(1)
        if command == "account":
            continue  # options of its actions, checked below
        shown.setdefault(command, set()).update(re.findall(r"--[a-z][a-z-]*", row[0]))
    assert set(shown) >= {"serve", "migrate", "load", "approve", "demo-data", "run-demo"}
    for command, options in shown.items():
        real = set(re.findall(r"(--[a-z][a-z-]*)", help_text(capsys, command))) - {"--help"}
        assert options <= real, f"{command}: {options - real} do not exist"
        assert real <= options, f"{command}: the README does not show {real - options}"
    for action in ("create", "set-password"):
        real = set(re.findall(r"(--[a-z][a-z-]*)", help_text(capsys, "account", action)))
        assert real - {"--help"} <= set(re.findall(r"--[a-z][a-z-]*", README.read_text()))


def test_documented_make_targets_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    for doc in DOCS:
        shown = re.findall(r"`make ([a-z][a-z-]*)`|^make ([a-z][a-z-]*)", doc.read_text(), re.M)
        for target in shown:
            name = target[0] or target[1]
            assert name in targets, f"{doc.name}: `make {name}` is not a Makefile target"


def test_relative_links_point_at_files() -> None:
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def heading_anchors(doc: Path) -> set[str]:
    """The fragments a Markdown renderer (GitHub's rule) gives the headings of a file."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.M | re.S)  # no code blocks
    anchors = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_link_fragments_name_a_heading() -> None:
    for doc in DOCS:
        for target, fragment in re.findall(r"\]\(([^)#:]*)#([^)]+)\)", doc.read_text()):
            linked = (doc.parent / target) if target else doc
            if linked.suffix != ".md":
                continue
            assert fragment in heading_anchors(linked), f"{doc.name} links to {target}#{fragment}"


def test_docs_link_the_product_docs() -> None:
    """The README leads to every product doc, and each product doc is linked from another."""
    product = ["tools", "reading-rules", "limits", "authorization", "protocol", "snapshot-format"]
    readme = README.read_text()
    for name in product:
        assert f"(docs/{name}.md)" in readme, f"README does not link docs/{name}.md"
