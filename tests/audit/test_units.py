"""The audit trail's pure parts: ELOVA_AUDIT_* settings, the arguments digest, every event
type against the JSON Schema, the file sink across a rotation, the writer's bound."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.audit.events import (
    EVENT_TYPES,
    OCSF_CLASSES,
    TOOL_CALL,
    Actor,
    Arguments,
    AuditEvent,
    Context,
    LineTemplate,
    Outcome,
    Target,
    arguments_digest,
    encode_line,
    event,
    now_rfc3339,
)
from service.audit.sinks import FileSink
from service.audit.writer import AuditWriter
from service.config import Config
from service.errors import AuditUnavailable, ConfigError
from service.settings.audit import Audit
from tests.audit.reading import VALIDATOR, audit_lines

pytestmark = pytest.mark.unit

BASE = {"ELOVA_DATABASE_URL": "postgresql://u@127.0.0.1/db", "ELOVA_SIGNING_KEY": ""}


def _audit(**env: str) -> Audit:
    return Config.from_env({**BASE, **env}, need_key=False).audit


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("stdout", ("stdout", "", 0)),
        ("file:/var/log/elova/audit.jsonl", ("file", "/var/log/elova/audit.jsonl", 0)),
        ("unix:/run/collector.sock", ("unix", "/run/collector.sock", 0)),
        ("tcp:127.0.0.1:5170", ("tcp", "127.0.0.1", 5170)),
        ("tcp:[::1]:5170", ("tcp", "::1", 5170)),
    ],
)
def test_sink_settings(raw: str, expected: tuple[str, str, int]) -> None:
    cfg = _audit(ELOVA_AUDIT_SINK=raw)
    assert (cfg.sink, cfg.target, cfg.port) == expected


def test_defaults() -> None:
    assert _audit() == Audit("stdout", "", 0, 10_000, 2.0)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("ELOVA_AUDIT_SINK", "syslog"),
        ("ELOVA_AUDIT_SINK", "file:relative.log"),
        ("ELOVA_AUDIT_SINK", "tcp:localhost"),
        ("ELOVA_AUDIT_SINK", "tcp:localhost:99999"),
        ("ELOVA_AUDIT_SINK", "stdout:x"),
        ("ELOVA_AUDIT_QUEUE_LINES", "0"),
        ("ELOVA_AUDIT_WAIT_SECONDS", "-1"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=name):
        _audit(**{name: raw})


def test_digest_is_canonical() -> None:
    one = arguments_digest({"workspaceId": "a", "limit": 5, "period": {"from": 1, "to": 2}})
    two = arguments_digest({"period": {"to": 2, "from": 1}, "limit": 5, "workspaceId": "a"})
    assert one == two and one.startswith("sha256:") and len(one) == 7 + 64
    assert arguments_digest({"limit": 6}) != arguments_digest({"limit": 5})


@pytest.mark.parametrize("kind", EVENT_TYPES)
def test_every_event_type_is_valid_against_the_schema(kind: str) -> None:
    line = event(
        kind,
        Outcome("failure", 401, 401, None, "invalid_token"),
        Actor(account_id="630d52b3-5744-404b-a3b9-07047676e2ef", client_id="dyn_x"),
        target=Target(tool="get_workspace", scopes=["n8n:read"]),
        arguments=Arguments(arguments_digest({}), {"limit": 3}),
        context=Context(request_id="abc-123", trace_id="0" * 32, span_id="1" * 16),
    )
    parsed = json.loads(encode_line(line))
    if kind != "tool.call":
        VALIDATOR.validate(parsed)
    assert (parsed["ocsf_class_uid"], parsed["ocsf_activity_id"]) == OCSF_CLASSES[kind]
    assert parsed["time"].endswith("Z") and len(parsed["time"]) == 24


@pytest.mark.parametrize(
    "context",
    [
        Context(),
        Context(request_id="abc-123", client_address="2001:db8::1"),
        Context(request_id='a"b\\c\u2028', trace_id="0" * 32, span_id="1" * 16),
    ],
)
@pytest.mark.parametrize("arguments", [None, Arguments(arguments_digest({}), {"limit": 3})])
def test_a_line_template_writes_the_bytes_of_the_whole_event(
    context: Context, arguments: Arguments | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome = Outcome("failure", 429, 429)
    actor = Actor(account_id="630d52b3-5744-404b-a3b9-07047676e2ef", client_id='dyn_"x"')
    target = Target(tool="get_workspace", record_ids={"workspaceId": "a"})
    template = LineTemplate(TOOL_CALL, outcome, actor, target=target, arguments=arguments)
    monkeypatch.setattr("service.audit.events.now_rfc3339", lambda: "2026-12-03T19:20:00.123Z")
    whole = event(TOOL_CALL, outcome, actor, target=target, arguments=arguments, context=context)
    assert template.line(context) == encode_line(whole)
    json.loads(template.line(context))


def test_the_line_time_is_the_clock_in_utc_with_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for milliseconds in (0, 7, 42, 999, 1_000, 1_764_876_069_999, 1_764_876_070_000):
        monkeypatch.setattr(time, "time_ns", lambda ms=milliseconds: ms * 1_000_000)
        instant = datetime.fromtimestamp(milliseconds / 1000, UTC)
        expected = instant.strftime("%Y-%m-%dT%H:%M:%S") + f".{milliseconds % 1000:03d}Z"
        assert now_rfc3339() == expected


def test_a_tool_call_line_without_arguments_is_refused_by_the_schema() -> None:
    line = json.loads(encode_line(event("tool.call", Outcome("success", 200), Actor())))
    assert not VALIDATOR.is_valid(line)
    line["arguments"] = {"digest": arguments_digest({}), "clear": {}}
    assert VALIDATOR.is_valid(line)


async def test_file_sink_appends_and_follows_a_rename_rotation(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = FileSink(str(path))
    first = encode_line(event("signin.succeeded", Outcome("success"), Actor()))
    await sink.write(first)
    path.rename(tmp_path / "audit.jsonl.1")  # what logrotate does
    await sink.write(first)
    await sink.close()
    assert len(audit_lines((tmp_path / "audit.jsonl.1").read_text())) == 1
    assert len(audit_lines(path.read_text())) == 1


class _Stuck:
    async def write(self, lines: bytes) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None


async def test_a_full_queue_holds_the_caller_then_refuses() -> None:
    writer = AuditWriter(Audit(queue_lines=1, wait_seconds=0.2), _Stuck())
    writer.start()
    line = event("signin.succeeded", Outcome("success"), Actor())
    await writer.record(line)  # taken by the (stuck) writer task
    await asyncio.sleep(0)
    await writer.record(line)  # queued
    with pytest.raises(AuditUnavailable):
        await writer.record(line)  # waited 0.2 s for room, then refused
    assert writer.metrics.waits._value.get() == 1
    assert writer.metrics.refused._value.get() == 1
    await writer.drain(0.1)


async def test_tcp_sink_reconnects_to_a_restarted_collector() -> None:
    from service.audit.sinks import SocketSink

    received = bytearray()
    connections: list[asyncio.StreamWriter] = []

    async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while chunk := await reader.read(65536):
            received.extend(chunk)
        writer.close()

    async def until(count: int) -> int:
        for _ in range(100):
            if len(audit_lines(received.decode())) >= count:
                break
            await asyncio.sleep(0.02)
        return len(audit_lines(received.decode()))

    server = await asyncio.start_server(take, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sink = SocketSink(Audit(sink="tcp", target="127.0.0.1", port=port))
    line = encode_line(event("signin.succeeded", Outcome("success"), Actor()))
    await sink.write(line)
    assert await until(1) == 1
    server.close()
    for connection in connections:
        connection.close()
    await server.wait_closed()
    with pytest.raises(OSError):  # the collector is gone: the write fails (and is retried)
        for _ in range(50):
            await sink.write(line)
            await asyncio.sleep(0.02)
    server = await asyncio.start_server(take, "127.0.0.1", port)
    await sink.write(line)  # on a new connection, after what was written just before the loss
    # At least once: the lines written in the last seconds are sent again to the new
    # collector (the old one may have lost them), so it may count more than the two sent.
    assert await until(2) >= 2
    await sink.close()
    server.close()
    await server.wait_closed()


def test_context_carries_the_trace_of_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    import service.audit.trail

    assert service.audit.trail.context_of(None).trace_id is None  # not traced: no ids
    monkeypatch.setattr(service.audit.trail, "current_trace_ids", lambda: ("a" * 32, "b" * 16))
    context = service.audit.trail.context_of(None)
    assert (context.trace_id, context.span_id) == ("a" * 32, "b" * 16)


class _Takes:
    """A sink that never waits and takes every write; `fail` makes the next one fail."""

    def __init__(self) -> None:
        self.now: list[bytes] = []
        self.batches: list[bytes] = []
        self.fail = False

    def write_now(self, lines: bytes) -> None:
        if self.fail:
            self.fail = False
            raise OSError("no space left on device")
        self.now.append(lines)

    async def write(self, lines: bytes) -> None:
        self.batches.append(lines)

    async def close(self) -> None:
        return None


async def test_a_line_the_sink_refused_at_once_is_queued_and_written_by_the_writer() -> None:
    sink = _Takes()
    sink.fail = True  # its first write fails (a full disk, say)
    writer = AuditWriter(Audit(queue_lines=4, wait_seconds=0.2), sink)
    writer.start()
    first = event("signin.succeeded", Outcome("success"), Actor(account_id="a"))
    second = event("signin.succeeded", Outcome("success"), Actor(account_id="b"))
    await writer.record(first)  # refused at once: queued instead
    await writer.record(second)  # behind a queued line: queued too, never ahead of it
    await writer.flushed()
    written = [
        json.loads(line)["actor"]["account_id"] for line in b"".join(sink.batches).splitlines()
    ]
    assert written == ["a", "b"] and sink.now == []
    await writer.record(first)  # nothing queued any more: written at once
    assert len(sink.now) == 1
    assert writer.metrics.written._value.get() == 3
    assert writer.metrics.sink_errors._value.get() == 1
    await writer.drain(0.1)


def _accounts(writes: list[bytes]) -> list[str]:
    return [json.loads(line)["actor"]["account_id"] for line in b"".join(writes).splitlines()]


def _line(account: str) -> AuditEvent:
    return event(TOOL_CALL, Outcome("failure", http_status=401), Actor(account_id=account))


async def test_refusals_of_one_instant_are_written_as_one_batch_once_the_turn_ends() -> None:
    sink = _Takes()
    writer = AuditWriter(Audit(queue_lines=4, wait_seconds=0.2), sink, instant=lambda: 7.0)
    writer.start()
    for account in "abc":
        await writer.record(_line(account), refusal=True)
    # The first is written at once; the others, of the same instant, wait for the batch.
    assert _accounts(sink.now) == ["a"]
    await asyncio.sleep(0)
    assert _accounts(sink.now) == ["a", "b", "c"] and len(sink.now) == 2
    # A line that is not a refusal never waits: it takes the gathered ones with it, in order.
    await writer.record(_line("d"), refusal=True)
    await writer.record(_line("e"))
    assert _accounts(sink.now) == ["a", "b", "c", "d", "e"] and len(sink.now) == 3
    assert writer.metrics.written._value.get() == 5
    await writer.drain()


async def test_a_batch_the_sink_refused_goes_to_the_queue_line_by_line() -> None:
    sink = _Takes()
    writer = AuditWriter(Audit(queue_lines=1, wait_seconds=0.2), sink, instant=lambda: 7.0)
    writer.start()
    for account in "abc":
        await writer.record(_line(account), refusal=True)
    sink.fail = True  # the batch of b and c fails; the queue holds one, the other waits
    await writer.flushed()
    await asyncio.sleep(0.05)
    await writer.flushed()
    assert _accounts(sink.now) == ["a"] and _accounts(sink.batches) == ["b", "c"]
    await writer.drain()


async def test_refusals_of_different_instants_are_each_written_at_once() -> None:
    sink = _Takes()
    ticks = iter(range(100))
    writer = AuditWriter(
        Audit(queue_lines=4, wait_seconds=0.2), sink, instant=lambda: float(next(ticks))
    )
    for account in "ab":
        await writer.record(_line(account), refusal=True)
    assert len(sink.now) == 2
