"""Server request ids: well-formed, unique, and not predictable from one another (issue 42:
they were a per-process prefix and a counter)."""

from __future__ import annotations

import re

import pytest

from service.edge.request_ids import new_request_id

pytestmark = pytest.mark.unit


def test_ids_are_32_hex_unique_and_share_no_prefix() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    # A prefix-and-counter id repeats its first half; these look independent.
    assert len({i[:16] for i in ids}) == len(ids)
    one, two = int(ids[0], 16), int(ids[1], 16)
    assert abs(two - one) > 2**64  # not the next value of a counter
