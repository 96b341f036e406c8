"""A small HTTP/1.1 load generator, run as a process of its own: `python -m tests.bench.loadgen`.

It reads one JSON job on stdin — host, port, the requests to send (raw header lines and
body, sent round-robin), concurrency, warm-up and duration — and writes one JSON result on
stdout: completed requests, errors, requests a second and latency percentiles (ms).

Each connection is a keep-alive asyncio stream sending prebuilt bytes and reading
`Content-Length` bodies, so the generator spends little CPU a request: on a shared 2-core
machine every cycle it uses is taken from the server under test, the same for every server.
A response is an error unless its status is 200 and its body holds `expect` (when given).
Every measured answer is also counted by status (a flood of refusals is measured by those
counts), with the 503s that carried Retry-After; a connection the server closes (after a
413, or `Connection: close`) is opened again.

A job may name `opening` requests, sent once on every new connection before the measured
ones: a 2025-revision session's `initialize` and `notifications/initialized`. The
`Mcp-Session-Id` the first opening answer carries replaces `SESSION_ID` in the header values
of every later request on that connection, so each connection holds a session of its own
and reuses it for all its calls, as a client does.
"""

from __future__ import annotations

import asyncio
import sys
import time

import msgspec

# In a header value of a job's request: the session its connection's opening answer named.
SESSION_ID = "{mcp-session-id}"
_SESSION_HEADER = b"\r\nmcp-session-id:"


class Request(msgspec.Struct):
    path: str
    headers: dict[str, str]
    body: str


class Job(msgspec.Struct):
    host: str
    port: int
    requests: list[Request]
    concurrency: int = 1
    warmup_seconds: float = 1.0
    duration_seconds: float = 5.0
    expect: str = ""
    max_requests: int = 0  # stop after this many measured requests (0: duration only)
    opening: list[Request] = []  # sent once a connection, before the requests (a session)


class Result(msgspec.Struct):
    completed: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    first_error: str = ""
    sample_headers: str = ""  # the header block of the first response
    statuses: dict[str, int] = {}  # measured answers by HTTP status
    retry_after_503: int = 0  # measured 503 answers that carried Retry-After
    reconnects: int = 0  # connections opened again after the server closed one
    openings: int = 0  # connections whose `opening` requests were answered


def _encode(req: Request, host: str, port: int) -> bytes:
    body = req.body.encode("utf-8")
    lines = [f"POST {req.path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in req.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Shared:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.payloads = [_encode(r, job.host, job.port) for r in job.requests]
        self.opening = [_encode(r, job.host, job.port) for r in job.opening]
        self.expect = job.expect.encode("utf-8")
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""
        self.sample_headers = ""
        self.measuring = False
        self.stop = False
        self.next = 0
        self.statuses: dict[str, int] = {}
        self.retry_after_503 = 0
        self.reconnects = 0
        self.openings = 0


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = -1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            return head, await _read_chunked(reader)
    if length < 0:
        raise RuntimeError("response without Content-Length")
    return head, await reader.readexactly(length)


def _closes(head: bytes) -> bool:
    """Whether the server said it closes the connection after this answer."""
    return any(
        line.lower().replace(b" ", b"") == b"connection:close" for line in head.split(b"\r\n")
    )


def _count(shared: _Shared, head: bytes) -> None:
    status = head[9:12].decode("latin-1")
    shared.statuses[status] = shared.statuses.get(status, 0) + 1
    if status == "503" and b"\r\nretry-after:" in head.lower():
        shared.retry_after_503 += 1


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _session_id(head: bytes) -> bytes:
    lowered = head.lower()
    start = lowered.find(_SESSION_HEADER)
    if start < 0:
        raise RuntimeError(f"opening answer without Mcp-Session-Id: {head[:300]!r}")
    start += len(_SESSION_HEADER)
    return head[start : head.index(b"\r\n", start)].strip()


async def _open(
    shared: _Shared, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> list[bytes]:
    """Send the job's opening requests on a new connection; the payloads it then sends."""
    if not shared.opening:
        return shared.payloads
    session = b""
    placeholder = SESSION_ID.encode("latin-1")
    for payload in shared.opening:
        writer.write(payload.replace(placeholder, session))
        head, body = await _read_response(reader)
        if head[9:12] not in (b"200", b"202"):
            raise RuntimeError(f"opening refused: {(head[:200] + body[:300])!r}")
        if not session:
            session = _session_id(head)
    shared.openings += 1
    return [p.replace(placeholder, session) for p in shared.payloads]


async def _worker(shared: _Shared) -> None:
    job = shared.job
    reader, writer = await asyncio.open_connection(job.host, job.port)
    try:
        payloads = await _open(shared, reader, writer)
        while not shared.stop:
            payload = payloads[shared.next % len(payloads)]
            shared.next += 1
            started = time.perf_counter()
            writer.write(payload)
            try:
                head, body = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                head, body = b"", b""  # closed before an answer: counted as an error below
            elapsed = time.perf_counter() - started
            if not head or _closes(head):
                writer.close()
                reader, writer = await asyncio.open_connection(job.host, job.port)
                shared.reconnects += 1
                payloads = await _open(shared, reader, writer)
            if not head:
                head = b"HTTP/1.1 000 connection closed before an answer\r\n\r\n"
            if not shared.sample_headers:
                shared.sample_headers = head.decode("latin-1")
            ok = head.startswith(b"HTTP/1.1 200") and (not shared.expect or shared.expect in body)
            if not shared.measuring:
                continue
            _count(shared, head)
            if ok:
                shared.latencies.append(elapsed)
                if job.max_requests and len(shared.latencies) >= job.max_requests:
                    shared.stop = True
            else:
                shared.errors += 1
                if not shared.first_error:
                    shared.first_error = (head.split(b"\r\n")[0] + b" " + body[:400]).decode(
                        "utf-8", "replace"
                    )
    finally:
        writer.close()


def _percentile(ordered: list[float], share: float) -> float:
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))
    return ordered[index] * 1000


async def run(job: Job) -> Result:
    shared = _Shared(job)
    workers = [asyncio.create_task(_worker(shared)) for _ in range(job.concurrency)]
    await asyncio.sleep(job.warmup_seconds)
    shared.measuring = True
    started = time.perf_counter()
    deadline = started + job.duration_seconds
    while time.perf_counter() < deadline and not shared.stop:
        if any(w.done() for w in workers):
            break
        await asyncio.sleep(0.05)
    seconds = time.perf_counter() - started
    shared.stop = True
    for w in workers:
        if w.done() and w.exception() is not None:
            raise RuntimeError(f"load worker failed: {w.exception()!r}")
    await asyncio.wait(workers, timeout=30)
    ordered = sorted(shared.latencies)
    return Result(
        completed=len(ordered),
        errors=shared.errors,
        seconds=seconds,
        rps=len(ordered) / seconds if seconds else 0.0,
        p50_ms=_percentile(ordered, 0.50),
        p90_ms=_percentile(ordered, 0.90),
        p99_ms=_percentile(ordered, 0.99),
        max_ms=ordered[-1] * 1000 if ordered else 0.0,
        first_error=shared.first_error,
        sample_headers=shared.sample_headers,
        statuses=shared.statuses,
        retry_after_503=shared.retry_after_503,
        reconnects=shared.reconnects,
        openings=shared.openings,
    )


def main() -> int:
    job = msgspec.json.decode(sys.stdin.buffer.read(), type=Job)
    result = asyncio.run(run(job))
    sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
