"""What the transport reports through the Metrics interface (labels stay bounded: no user,
token or session ever reaches it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from service.app import create_app
from service.app_keys import METRICS
from service.config import Config
from service.observability.metrics.app_metrics import Metrics
from tests.mcp.conftest import ClientFactory, Wire, approve


class Recorder:
    """Records every Metrics call; not a subclass, so the real Metrics' needs do not matter."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append((name, args))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]


@pytest.mark.parametrize(("overlap", "in_flight"), [("true", 4), ("false", 3)])
async def test_transport_reports_each_rpc(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config], overlap: str, in_flight: int
) -> None:
    """The in-flight gauge counts the requests whose method ran: the admitted ones, and with
    overlapped admission (opt-in) also the first refused one, whose method ran while
    its admission's reply was on the way (docs/decisions/limits.md, Overlapped admission)."""
    app = create_app(make_config(LIMIT_APPROVAL_PER_MINUTE="3", ADMISSION_OVERLAP=overlap))
    recorder = Recorder()
    app[METRICS] = cast(Metrics, recorder)
    client = await aiohttp_client(app)
    wire = Wire(client, (await approve(app))["token"])

    await wire.modern("tools/list")
    await wire.modern("tools/call", {"name": "get_many_workspaces", "arguments": {"limit": 0}})
    headers = wire.modern_headers("tools/list", Authorization="Bearer nope")
    await wire.post(wire.modern_body("tools/list"), headers)
    await wire.modern("tools/list")
    await wire.modern("tools/list")  # the fourth admitted request of the minute
    await wire.post(b"{oops", wire.modern_headers("tools/list"))

    rpcs = [(m, t, o) for m, t, o, _seconds, _size in recorder.named("observe_rpc")]
    assert rpcs == [
        ("tools/list", None, "ok"),
        ("tools/call", "get_many_workspaces", "tool_error:VALIDATION_ERROR"),
        ("tools/list", None, "auth_error"),
        ("tools/list", None, "ok"),
        ("tools/list", None, "limited"),
        ("other", None, "protocol_error"),
    ]
    assert all(size > 0 for *_rest, size in recorder.named("observe_rpc"))
    assert recorder.named("limit_refused") == [("approval",)]  # counted once (by admission)
    assert len(recorder.named("request_started")) == in_flight
    assert len(recorder.named("request_finished")) == in_flight
