"""stdout as a pipe or a socket is written without waiting through a descriptor of its own:
fd 1's and a `2>&1` stderr's open file description stay blocking (checked with fcntl in a
child process whose stdout and stderr are one pipe, or one socket)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.server import ROOT

CHILD = """
import fcntl, os, sys
from service.observability.stdout import line_output
out = line_output(sys.stdout)
assert out.non_blocking
assert out.offer(b"a line\\n")
flags = [fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in (1, 2)]
os.write(2, b"flags %d %d\\n" % tuple(flags))
"""


@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_stdout_and_a_shared_stderr_stay_blocking(kind: str) -> None:
    if kind == "pipe":
        read_end, write_end = os.pipe()
    else:
        ours, theirs = socket.socketpair()
        read_end, write_end = os.dup(ours.fileno()), os.dup(theirs.fileno())
        ours.close()
        theirs.close()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdout=write_end, stderr=subprocess.STDOUT,
        timeout=60, check=False,
    )  # fmt: skip
    os.close(write_end)
    got = b""
    while chunk := os.read(read_end, 65536):
        got += chunk
    os.close(read_end)
    assert proc.returncode == 0, got
    assert got == b"a line\nflags 0 0\n"
