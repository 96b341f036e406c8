"""Bad arguments get a VALIDATION_ERROR that names the argument, says what it must be (from
the catalog's inputSchema) and hints how to get a good value — never a regex or a type name."""

from __future__ import annotations

import pytest

from service.errors import ValidationError
from service.tools.setup import all_tools

pytestmark = pytest.mark.unit

WS = '"workspaceId":"11111111-1111-4111-8111-111111111111"'


@pytest.mark.parametrize(
    ("tool", "arguments", "message", "hint_has"),
    [
        ("get_workspace", '{"workspaceId":"not-a-uuid"}',
         "`workspaceId` must be a UUID such as 11111111-1111-4111-8111-111111111111.",
         "returned by get_many_workspaces"),
        ("get_execution_stats", "{" + WS + ',"period":"yesterday","timeZone":"UTC"}',
         "`period` must be one of: today, 7d, 30d, all.", "period"),
        ("get_many_executions", "{" + WS + ',"status":"oops"}',
         "`status` must be one of: success, failed, error, crashed, running, waiting, canceled,"
         " new, unknown.", "failed matches error and crashed"),
        ("get_many_workspaces", '{"limit":0}', "`limit` must be a whole number from 1 to 50.",
         "defaults to 50"),
        ("get_many_workspaces", '{"limit":5.5}', "`limit` must be a whole number from 1 to 50.",
         "defaults to 50"),
        ("get_many_workspaces", '{"limit":"5"}', "`limit` must be a whole number from 1 to 50.",
         "defaults to 50"),
        ("get_many_workspaces", '{"limit":1e2}', "`limit` must be a whole number from 1 to 50.",
         "defaults to 50"),
        ("get_execution_stats", "{" + WS + ',"timeZone":"UTC"}',
         "Missing required argument `period`.", "period"),
        ("get_many_workspaces", '{"x":1}',
         "Unknown argument `x`: get_many_workspaces accepts `limit`, `cursor`.", "inputSchema"),
        ("get_many_workspaces", "[1]", "The arguments must be a JSON object.",
         "get_many_workspaces accepts `limit`, `cursor`."),
        ("get_many_executions", "{" + WS + ',"timeZone":""}',
         "`timeZone` must be a string of 1 to 100 characters.", "IANA"),
    ],
)  # fmt: skip
def test_bad_arguments_are_explained(
    tool: str, arguments: str, message: str, hint_has: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        all_tools()[tool].decode(arguments.encode())
    assert refused.value.message == message
    assert refused.value.hint is not None and hint_has in refused.value.hint


def test_integral_floats_are_integers() -> None:
    params = all_tools()["get_many_workspaces"].decode(b'{"limit":5.0}')
    assert params.limit == 5 and isinstance(params.limit, int)
