// The official TypeScript client 2.x (@modelcontextprotocol/client) in the Enterprise-Managed
// Authorization flow against a running Elova MCP service: CrossAppAccessProvider, whose
// assertion callback asks the test IdP for an ID-JAG (requestJwtAuthorizationGrant, RFC
// 8693), then presents it at Elova's /token (RFC 7523, client_secret_basic, with resource).
// It lists the tools, calls one, and prints one JSON document on stdout for pytest.
//
//   node enterprise_v2.mjs <mcp-url>
//   env: ELOVA_CLIENT_ID, ELOVA_CLIENT_SECRET, ELOVA_ISSUER, IDP_TOKEN_ENDPOINT,
//        IDP_ID_TOKEN, IDP_CLIENT_ID, CALL_ARGUMENTS (JSON)
import {
  Client,
  CrossAppAccessProvider,
  StreamableHTTPClientTransport,
  requestJwtAuthorizationGrant,
} from "@modelcontextprotocol/client";

async function main() {
  const url = process.argv[2];
  const env = process.env;
  const asked = [];
  const provider = new CrossAppAccessProvider({
    assertion: async (ctx) => {
      asked.push({
        authorizationServerUrl: String(ctx.authorizationServerUrl),
        resourceUrl: String(ctx.resourceUrl),
        scope: ctx.scope ?? null,
      });
      const grant = await requestJwtAuthorizationGrant({
        tokenEndpoint: env.IDP_TOKEN_ENDPOINT,
        audience: ctx.authorizationServerUrl,
        resource: ctx.resourceUrl,
        idToken: env.IDP_ID_TOKEN,
        clientId: env.IDP_CLIENT_ID,
        scope: ctx.scope,
        fetchFn: ctx.fetchFn,
      });
      return grant.jwtAuthGrant;
    },
    clientId: env.ELOVA_CLIENT_ID,
    clientSecret: env.ELOVA_CLIENT_SECRET,
    expectedIssuer: env.ELOVA_ISSUER,
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = new Client({ name: "elova-enterprise-test", version: "1.0.0" });
  await client.connect(transport);
  const tools = (await client.listTools()).tools.map((t) => t.name);
  const called = await client.callTool({
    name: "get_many_workspaces",
    arguments: JSON.parse(env.CALL_ARGUMENTS ?? "{}"),
  });
  const tokens = provider.tokens() ?? {};
  await client.close();
  process.stdout.write(
    JSON.stringify({
      asked,
      tools,
      called,
      tokenType: tokens.token_type ?? null,
      refreshToken: tokens.refresh_token ?? null,
      scope: tokens.scope ?? null,
    }),
  );
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
