"""Where the audit trail's lines go and how long a request may wait for room in its queue
(service/audit/, docs/operations.md "Audit trail")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from service.settings.variables import parse, positive_float, positive_int, read_section, setting

AUDIT_SINK_KINDS = ("stdout", "file", "unix", "tcp")


@dataclass(frozen=True)
class Audit:
    """Where audit lines go and how long a request may wait for room in the queue.

    `sink`: "stdout" (beside the request log), "file" (`target` a path, appended), "unix"
    (`target` a socket path) or "tcp" (`target` host, `port`), from ELOVA_AUDIT_SINK
    (`stdout`, `file:/path`, `unix:/path`, `tcp:host:port`). `queue_lines` bound the
    in-memory queue; a request whose line finds it full waits up to `wait_seconds`, then is
    refused 503 (back-pressure: a line is never dropped). `peer_buffer_bytes`: the most a
    TCP collector's side may hold that it has not read (its socket's receive buffer plus
    any relay's); a socket sink keeps that much more than its own kernel holds, to send
    again after a failure (None: this host's largest TCP receive buffer, at least 8 MiB:
    service/audit/sinks.py, `host_receive_buffer`)."""

    sink: str = "stdout"
    target: str = ""
    port: int = 0
    queue_lines: int = setting("ELOVA_AUDIT_QUEUE_LINES", positive_int, 10_000)
    wait_seconds: float = setting("ELOVA_AUDIT_WAIT_SECONDS", positive_float, 2.0)
    peer_buffer_bytes: int | None = setting("ELOVA_AUDIT_PEER_BUFFER_BYTES", positive_int, None)


def read_audit(env: Mapping[str, str]) -> Audit:
    unset = (Audit.sink, Audit.target, Audit.port)
    sink, target, port = parse(env, "ELOVA_AUDIT_SINK", _audit_sink, unset)
    return read_section(Audit, env, sink=sink, target=target, port=port)


def _audit_sink(raw: str) -> tuple[str, str, int]:
    kind, _, rest = raw.partition(":")
    if kind == "stdout" and not rest:
        return "stdout", "", 0
    if kind in ("file", "unix") and rest.startswith("/"):
        return kind, rest, 0
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536:
            return "tcp", host.strip("[]"), int(port)
    raise ValueError(
        f"expected stdout, file:/absolute/path, unix:/absolute/path or tcp:host:port, got {raw!r}"
    )
