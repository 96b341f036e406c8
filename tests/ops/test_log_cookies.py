"""Cookies never reach a log line (issue 21): not the session cookie, not any Cookie or
Set-Cookie value, whichever logger writes the line — including aiohttp's own when it logs a
malformed request head of a real `elova-mcp serve` process, which it does with a traceback
quoting the header line. That line is also a client's mistake: info, never an error."""

from __future__ import annotations

import asyncio
import io
import logging

import pytest

from service.observability.logs import REDACTED_LOGGERS, Redaction, configure_logging, redact_text
from tests.support.serve_process import ServeProcess

SESSION = "s3ss10n-c00k1e-v4lue"
OTHER = "0th3r-c00k1e-v4lue"

# Request heads aiohttp refuses, each quoting a line that carries a cookie.
MALFORMED_HEADS = [
    b"Cookie: elova_session=" + SESSION.encode() + b"\x01",
    b"Cookie : elova_session=" + SESSION.encode(),
    b"X: y\r\n Cookie: elova_session=" + SESSION.encode(),
    b"Cookie: theirs=" + OTHER.encode() + b"; elova_session=" + SESSION.encode() + b"\x7f",
    b"Set-Cookie: elova_signin=" + SESSION.encode() + b"\x00",
    b"X-Forwarded-For: 1\x01; __Host-elova_session=" + SESSION.encode(),
]


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"Cookie: elova_session={SESSION}", "Cookie: [redacted]"),
        (f"b'Cookie : a={OTHER}\\x01'", "b'Cookie : [redacted]'"),
        (f"{{'Cookie': 'a={OTHER}', 'Host': 'x'}}", "{'Cookie': '[redacted]', 'Host': 'x'}"),
        (f"set-cookie: elova_signin={SESSION}; Path=/", "set-cookie: [redacted]"),
        (f"saw __Host-elova_session={SESSION}; x=1", "saw __Host-elova_session=[redacted]; x=1"),
        ("a cookie is missing", "a cookie is missing"),
    ],
)
def test_cookie_values_are_masked(text: str, kept: str) -> None:
    assert redact_text(text) == kept


def test_every_handler_sees_the_masked_record() -> None:
    """A plain handler that is not ours (text format) gets the masked message and stack."""
    stream = io.StringIO()
    other = logging.StreamHandler(stream)
    other.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("aiohttp.server")
    logger.addFilter(filt := Redaction())
    logger.addHandler(other)
    try:
        try:
            raise ValueError(f"header Cookie: elova_session={SESSION}")
        except ValueError:
            logger.exception("Error with cookie=%s", SESSION)
    finally:
        logger.removeHandler(other)
        logger.removeFilter(filt)
    assert SESSION not in stream.getvalue() and "ValueError" in stream.getvalue()


def test_configure_logging_filters_the_library_loggers() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("aiohttp.access").level)
    try:
        configure_logging("INFO")
        configure_logging("INFO")  # idempotent: one filter each
        for name in REDACTED_LOGGERS:
            filters = logging.getLogger(name).filters
            assert sum(isinstance(f, Redaction) for f in filters) == 1, name
        ours = [h for h in root.handlers if h not in saved[0]]
        assert len(ours) == 1 and any(isinstance(f, Redaction) for f in ours[0].filters)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("aiohttp.access").setLevel(saved[2])
        for name in REDACTED_LOGGERS:
            logger = logging.getLogger(name)
            for f in [f for f in logger.filters if isinstance(f, Redaction)]:
                logger.removeFilter(f)


async def _send(port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("level", "proxies"),
    [("INFO", ""), ("DEBUG", ""), ("INFO", "127.0.0.0/8")],
    ids=["info", "debug", "behind-a-trusted-proxy"],
)
async def test_a_real_server_logs_no_cookie_of_a_malformed_head(
    serve_env: dict[str, str], level: str, proxies: str
) -> None:
    # Behind a trusted proxy, refusal pacing asks for the client's address of a head that
    # no app routed: it is answered 400 like any other, not dropped by an unhandled error.
    env = {**serve_env, "ELOVA_LOG_LEVEL": level}
    if proxies:
        env["ELOVA_TRUSTED_PROXIES"] = proxies
    async with ServeProcess(env) as proc:
        for line in MALFORMED_HEADS:
            head = b"GET /livez HTTP/1.1\r\nHost: x\r\n" + line + b"\r\n\r\n"
            answer = await _send(proc.port, head)
            assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400")
        # a well-formed request with cookies, answered 404 (an access line at info)
        resp = await proc.get(
            "/nope", headers={"Cookie": f"elova_session={SESSION}; theirs={OTHER}"}
        )
        assert resp.status == 404
        # a header that is not UTF-8 (aiohttp keeps its bytes as surrogates) in the access line
        answer = await _send(
            proc.port, b"GET /nope HTTP/1.1\r\nHost: x\r\nUser-Agent: a\xff\xfeb\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 404")
        await asyncio.sleep(0.3)
        output = proc.output()
        lines = proc.log_lines()
    assert SESSION not in output and OTHER not in output
    refused = [line for line in lines if line["logger"] == "aiohttp.server"]
    assert len(refused) == len(MALFORMED_HEADS), refused
    assert all(line["level"] == "info" and "error" not in line for line in refused), refused
    assert all("400" in line["message"] for line in refused)
    assert not [line for line in lines if line["level"] == "error"]
    assert "Logging error" not in output
    agents = [line.get("user_agent") for line in lines if line.get("path") == "/nope"]
    assert len(agents) == 2 and agents[1] is not None and agents[1].startswith("a")
