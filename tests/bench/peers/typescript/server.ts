// The TypeScript SDK peer of `make bench`: `get_many_executions` (first page) as a server on
// the official TypeScript SDK would be written by a user who picks it, run on Node 22
// (type stripping: no build step):
//
//   PEER_PAGE_STATEMENT='SELECT …' node server.ts --port P --dsn DSN
//
// The SDK's stateless streamable HTTP as its docs write it (simpleStatelessStreamableHttp):
// the SDK's Express app (createMcpExpressApp: Host check, JSON body), and for each POST a
// new McpServer and StreamableHTTPServerTransport (sessionIdGenerator undefined,
// enableJsonResponse: true), closed when the answer is sent; a stateless transport cannot be
// reused across requests. `pg` with a pool of 10 (TimeZone UTC, jit off as ours) runs the
// page statement our tool embeds, its text handed over by the bench (PEER_PAGE_STATEMENT,
// $1 the workspace), as a named statement (prepared once per connection). Rows are shaped
// as our tool shapes them (the same fields in the same order, so the `executions` array is
// byte for byte ours) and returned as structuredContent with its JSON text copy.
//
// What it does not do that our service does: no authorization (no bearer token, approval or
// scope read), no admission or limits, no metrics or request log, no coverage, asOf or
// cursor in the answer.
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import pg from 'pg';
import * as z from 'zod/v4';
import { shape } from './shaping.ts';

const POOL_SIZE = 10;

const { values: args } = parseArgs({
  options: { port: { type: 'string' }, dsn: { type: 'string' } },
});
const statement = process.env.PEER_PAGE_STATEMENT;
if (!args.port || !args.dsn || !statement) {
  throw new Error('usage: PEER_PAGE_STATEMENT=… node server.ts --port P --dsn DSN');
}

// int8 columns (durationMs, the cost coverage counts) as numbers: they fit.
pg.types.setTypeParser(pg.types.builtins.INT8, (text: string) => Number(text));
const pool = new pg.Pool({
  connectionString: args.dsn,
  max: POOL_SIZE,
  options: '-c TimeZone=UTC -c jit=off',
});

const tool = {
  description: 'Retained executions of a workspace, newest first (first page).',
  inputSchema: { workspaceId: z.string(), limit: z.number().int().default(50) },
  // As loose as the object schema the Python SDK and FastMCP derive from `dict[str, Any]`:
  // the SDK validates every answer against it.
  outputSchema: { workspaceId: z.string(), executions: z.array(z.unknown()) },
};

async function getManyExecutions({ workspaceId, limit }: { workspaceId: string; limit: number }) {
  const result = await pool.query({ name: 'first-page', text: statement, values: [workspaceId] });
  const output = { workspaceId, executions: result.rows.slice(0, limit).map(shape) };
  return {
    content: [{ type: 'text' as const, text: JSON.stringify(output) }],
    structuredContent: output,
  };
}

function server(): McpServer {
  const mcp = new McpServer({ name: 'elova-peer-typescript', version: '1.0.0' });
  mcp.registerTool('get_many_executions', tool, getManyExecutions);
  return mcp;
}

const app = createMcpExpressApp({ host: '127.0.0.1' });
app.post('/mcp', async (req: any, res: any) => {
  const mcp = server();
  try {
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      transport.close();
      mcp.close();
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, req.body);
  } catch (error) {
    console.error('error handling an MCP request:', error);
    if (!res.headersSent) {
      res.status(500).json({
        jsonrpc: '2.0',
        error: { code: -32603, message: 'Internal server error' },
        id: null,
      });
    }
  }
});

const listening = app.listen(Number(args.port), '127.0.0.1');
process.on('SIGTERM', () => {
  listening.close();
  listening.closeAllConnections();
  void pool.end();
});
