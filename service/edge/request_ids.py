"""Request ids (X-Request-Id): 32 lowercase hex characters, unique across replicas.

A random 64-bit prefix drawn once per process, then a counter: as unique as a random UUID
for logs and support, at a fraction of the cost (no system call a request), which counts
on the hot path of every answer, refusals included.
"""

from __future__ import annotations

import itertools
import os

_PREFIX = os.urandom(8).hex()
_COUNTER = itertools.count(int.from_bytes(os.urandom(4), "big"))


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER) & 0xFFFFFFFFFFFFFFFF:016x}"
