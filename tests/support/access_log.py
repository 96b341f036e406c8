"""A fixture capturing the access log's JSON lines (every level) for a test."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from service.observability.logs import JsonFormatter
from service.server.access_log import ACCESS


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    old_level = ACCESS.level
    ACCESS.addHandler(handler)
    ACCESS.setLevel(logging.DEBUG)
    yield buffer
    ACCESS.removeHandler(handler)
    ACCESS.setLevel(old_level)
