"""The socket sink's kept lines (service/audit/sinks.py, SocketSink) against real unix
sockets: a collector that dies with lines unread gets them again from the sink on its
successor without a new line written; one that read everything and closes on EOF at
shutdown leaves nothing kept; what is kept stays within the kernel's bounds."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from service.audit.sinks import SocketSink
from service.settings.audit import Audit

LINE = b'{"n":%06d,"pad":"' + b"x" * 200 + b'"}\n'


async def _unix_listener(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    listener.setblocking(False)
    return listener


async def _read_all(conn: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    got = bytearray()
    while chunk := await loop.sock_recv(conn, 65536):
        got += chunk
    return bytes(got)


async def test_a_unix_collector_that_dies_unread_gets_every_line_again(tmp_path: Path) -> None:
    path = tmp_path / "collector.sock"
    loop = asyncio.get_running_loop()
    listener = await _unix_listener(path)
    sink = SocketSink(Audit(sink="unix", target=str(path)))
    lines = [LINE % n for n in range(400)]
    accepting = asyncio.ensure_future(loop.sock_accept(listener))
    for start in range(0, len(lines), 50):
        await sink.write(b"".join(lines[start : start + 50]))
    first, _ = await accepting
    first.setblocking(False)
    read_before = await loop.sock_recv(first, 4096)  # a little read, most unread
    assert sink.kept_lines == len(lines)  # nothing known read: the kernel still holds it
    first.close()  # dies with bytes unread
    second, _ = await asyncio.wait_for(loop.sock_accept(listener), 10)  # no new line
    second.setblocking(False)
    await asyncio.sleep(0.2)
    await asyncio.wait_for(sink.close(), 5)  # ends the stream: its FIN read by _read_all
    got = await asyncio.wait_for(_read_all(second), 10)
    assert got == b"".join(lines) and len(read_before) > 0  # every line, whole, in order
    second.close()
    listener.close()


async def test_a_collector_that_read_to_the_end_leaves_nothing_kept(tmp_path: Path) -> None:
    path = tmp_path / "collector.sock"
    loop = asyncio.get_running_loop()
    listener = await _unix_listener(path)
    sink = SocketSink(Audit(sink="unix", target=str(path)))
    accepting = asyncio.ensure_future(loop.sock_accept(listener))
    await sink.write(LINE % 0)
    conn, _ = await accepting
    conn.setblocking(False)
    reading = asyncio.ensure_future(_read_all(conn))
    for n in range(1, 2000):  # ~420 KB, more than a unix socket's send buffer
        await sink.write(LINE % n)
    assert sink.kept_bytes <= 2 * conn.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)

    async def close_when_read() -> None:
        await reading
        conn.close()  # what a collector does at EOF

    closing = asyncio.ensure_future(close_when_read())
    await asyncio.wait_for(sink.close(), 5)
    await closing
    assert sink.kept_lines == 0 and len(reading.result()) == 2000 * len(LINE % 0)
    listener.close()
