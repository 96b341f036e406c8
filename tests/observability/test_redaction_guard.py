"""The access line is built, not scanned (service/server/access_log.py): every field a client
or a dependency controls still comes out redacted, and the shortcut that skips the patterns
for text holding none of their marks masks exactly what the patterns mask."""

from __future__ import annotations

import io
import itertools
import json
import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from service.app_keys import CALLER, CONFIG
from service.auth.caller import Caller
from service.config import Config
from service.observability import logs
from service.observability.logs import LOG_FIELDS, JsonFormatter, Redaction, redact_text
from service.server.access_log import ACCESS, RefusalSampler, _log_access

JWT = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
# One secret a field, each in a shape a pattern knows, so a leak names its field.
# (A method is a token aiohttp upper-cases: no pattern can match one, and none is tried here.)
SECRETS = {
    "path": "pathsecret1",
    "user_agent": "uasecret2",
    "client_id": "clientsecret3",
    "annotation": "notesecret4",
    "annotation_named": "namedsecret5",
}


@pytest.fixture
def app(make_config: Callable[..., Config]) -> web.Application:
    app = web.Application()
    app[CONFIG] = make_config()
    return app


@pytest.fixture
def access_output() -> Iterator[io.StringIO]:
    """The access logger's lines as the shipped handler writes them (formatter + filter)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Redaction())
    old_level, old_propagate = ACCESS.level, ACCESS.propagate
    ACCESS.addHandler(handler)
    ACCESS.setLevel(logging.DEBUG)
    ACCESS.propagate = False
    yield buffer
    ACCESS.removeHandler(handler)
    ACCESS.setLevel(old_level)
    ACCESS.propagate = old_propagate


def test_secrets_in_every_client_controlled_field_stay_out_of_the_access_line(
    app: web.Application, access_output: io.StringIO
) -> None:
    request = make_mocked_request(
        "PROPFIND",
        f"/mcp/x;access_token={SECRETS['path']}/{JWT}",
        headers={"User-Agent": f"probe Bearer {SECRETS['user_agent']}"},
        app=app,
    )
    request[CALLER] = Caller.pending(
        account_id=uuid.uuid4(),
        approval_id=uuid.uuid4(),
        generation=1,
        client_id=f"https://user:{SECRETS['client_id']}@example.com/client",
        scopes=frozenset(),
    )
    request[LOG_FIELDS] = {
        "signin_hold": f"Cookie: elova_session={SECRETS['annotation']}",
        "client_secret": SECRETS["annotation_named"],
    }
    _log_access(request, None, 200, 0.001, None, RefusalSampler())
    text = access_output.getvalue()
    (line,) = [json.loads(raw) for raw in text.splitlines()]
    leaked = [field for field, secret in SECRETS.items() if secret in text]
    assert leaked == [] and JWT not in text
    assert line["method"] == "PROPFIND"
    assert line["path"] == "/mcp/x;access_token=[redacted]"
    assert line["user_agent"] == "probe Bearer [redacted]"
    assert line["client_id"] == "https://user:[redacted]@example.com/client"
    assert line["client_secret"] == "[redacted]"
    assert line["message"] == f"PROPFIND {line['path']} 200"


def test_fields_the_service_formats_go_in_as_they_are(
    app: web.Application, access_output: io.StringIO
) -> None:
    request = make_mocked_request("POST", "/mcp", headers={"User-Agent": "probe/1.0"}, app=app)
    _log_access(request, "/mcp", 200, 0.0012, None, RefusalSampler())
    line = json.loads(access_output.getvalue())
    assert {k: line[k] for k in ("method", "path", "route", "status", "user_agent")} == {
        "method": "POST",
        "path": "/mcp",
        "route": "/mcp",
        "status": 200,
        "user_agent": "probe/1.0",
    }
    assert line["message"] == "POST /mcp 200" and line["level"] == "info"


def _every_pattern(text: str) -> str:
    for pattern, replacement in logs._SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


# Pieces each pattern needs, in every case, next to text none of them needs.
_PIECES = (
    "Bearer abc.def", "BASIC dXNlcg==", JWT, "EYJhbGciOi.eyJzdWIi.sig", "?code=c0de",
    "&Client_Secret=s", ";state=x", "refresh_token: r1", "ACCESS_TOKEN='a2'",
    "postgresql://u:hunter2@db/x", "Set-Cookie: a=b", "cookie=c", "__Host-elova_csrf=v",
    "elova_session=s;", "-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----",
    "plain text", "/mcp", "tools/call", "wörkspace ünïcode", "Kelvin \u212a", "baſic x",
    "=", "://", " ", "\n",
)  # fmt: skip


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_shortcut_masks_what_every_pattern_masks(count: int) -> None:
    for pieces in itertools.product(_PIECES, repeat=count):
        text = " ".join(pieces)
        assert redact_text(text) == _every_pattern(text), text
