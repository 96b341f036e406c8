// The official TypeScript client 2.x (@modelcontextprotocol/client) against a running Elova MCP
// service: connects with a bearer header (requestInit), lists the tools, runs every call of
// the plan and prints one JSON document on stdout for pytest to validate.
//
//   node call_tools_v2.mjs <mcp-url>   (env ELOVA_TOKEN; the plan as JSON on stdin:
//   {"calls": [[tool, arguments], ...], "refused": [[tool, arguments], ...],
//    "parallel": [[tool, arguments], ...]}: the parallel calls are sent all at once)
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function main() {
  const url = process.argv[2];
  const token = process.env.ELOVA_TOKEN;
  if (!url || !token) throw new Error("usage: ELOVA_TOKEN=... node call_tools_v2.mjs <mcp-url>");
  const plan = await readStdin();

  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "elova-ts-client-v2-test", version: "1.0.0" });
  await client.connect(transport);

  const out = {
    protocolVersion: transport.protocolVersion ?? null,
    sessionId: transport.sessionId ?? null,
    serverCapabilities: client.getServerCapabilities() ?? null,
    serverVersion: client.getServerVersion() ?? null,
    tools: [],
    results: [],
    refused: [],
    parallel: [],
  };
  // listTools also arms the client's own outputSchema validation of every later call.
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    out.tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);

  for (const [name, args] of plan.calls) {
    out.results.push({ tool: name, result: await client.callTool({ name, arguments: args }) });
  }
  for (const [name, args] of plan.refused ?? []) {
    out.refused.push({ tool: name, result: await client.callTool({ name, arguments: args }) });
  }
  const parallel = (plan.parallel ?? []).map(([name, args]) =>
    client.callTool({ name, arguments: args }).then((result) => ({ tool: name, result })),
  );
  out.parallel = await Promise.all(parallel);
  await transport.terminateSession();
  await client.close();
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  process.stderr.write(`call_tools_v2.mjs failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
