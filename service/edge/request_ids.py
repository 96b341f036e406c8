"""Request ids (X-Request-Id): 32 lowercase hex characters, unique across replicas and
unpredictable.

A counter drawn from a random start once per process, each value run through BLAKE2b keyed
with a random per-process key (16-byte digest): as unique as a random UUID for logs and
support, and, unlike the prefix-and-counter ids before (issue 42), no one who saw one id can
tell the next, or the previous, or how many requests the replica served in between. No
system call a request (os.urandom would be one), which counts on the hot path of every
answer, refusals included.
"""

from __future__ import annotations

import hashlib
import itertools
import os

_KEY = os.urandom(32)
_COUNTER = itertools.count(int.from_bytes(os.urandom(8), "big"))


def new_request_id() -> str:
    value = next(_COUNTER) & 0xFFFFFFFFFFFFFFFF
    return hashlib.blake2b(value.to_bytes(8, "big"), key=_KEY, digest_size=16).hexdigest()
