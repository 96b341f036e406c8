"""FastMCP's client (the venv of tests/clients/fastmcp/requirements.txt) making parallel tool
calls with a bearer token; prints one JSON document: each call's structured result, or the
error FastMCP raised for it.

    python parallel_calls.py <mcp-url> <tool> <count>   (env ELOVA_TOKEN)
"""

import asyncio
import json
import os
import sys

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport


async def main(url: str, tool: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {os.environ['ELOVA_TOKEN']}"}
    async with Client(StreamableHttpTransport(url, headers=headers)) as client:

        async def one() -> dict[str, object]:
            try:
                result = await client.call_tool(tool, {})
            except Exception as err:  # what the model would see: the call failed
                return {"error": f"{type(err).__name__}: {err}"}
            return {
                "isError": result.is_error,
                "content": [c.model_dump(mode="json") for c in result.content],
                "structuredContent": result.structured_content,
            }

        results = await asyncio.gather(*(one() for _ in range(count)))
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
