#!/usr/bin/env bash
# A served smoke call, as an operator would make one: `.ci/smoke.sh VENV` uses VENV's
# elova-mcp to migrate a fresh database on the machine's PostgreSQL, load the example
# snapshot, approve its account, serve on a free port, wait for /readyz, then list the tools
# and call get_many_workspaces with curl (stateless revision). Exits non-zero when any step
# fails, printing the server's log. The database is dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:?usage: .ci/smoke.sh VENV}"
ELOVA="$VENV/bin/elova-mcp"
PY="$VENV/bin/python"
PG_ADMIN="${ELOVA_TEST_ADMIN_DSN:-postgresql://postgres@127.0.0.1:5432/postgres}"
DB="elova_smoke_$$"
WORK=$(mktemp -d)
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SERVER=""
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
  psql -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

psql -q "$PG_ADMIN" -c "CREATE DATABASE \"$DB\""
openssl genpkey -algorithm ed25519 -out "$WORK/signing-key.pem" 2>/dev/null
export ELOVA_DATABASE_URL="${PG_ADMIN%/*}/$DB"
export ELOVA_REDIS_URL="${ELOVA_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
export ELOVA_REDIS_KEY_PREFIX="elova-smoke-$$:"
export ELOVA_SIGNING_KEY_FILE="$WORK/signing-key.pem"
export ELOVA_HOST=127.0.0.1 ELOVA_PORT="$PORT" ELOVA_PUBLIC_URL="http://127.0.0.1:$PORT"

"$ELOVA" migrate >/dev/null
"$ELOVA" load docs/examples/snapshot.json >/dev/null
TOKEN=$("$ELOVA" approve --account dana@example.com \
  --workspace 11111111-1111-4111-8111-111111111111 \
  | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["accessToken"])')

"$ELOVA" serve >"$WORK/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log"; exit 1; }
  sleep 0.2
done

META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
call() {  # METHOD NAME BODY
  curl -sf "http://127.0.0.1:$PORT/mcp" -H "Authorization: Bearer $TOKEN" \
    -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" \
    -H "MCP-Protocol-Version: 2026-07-28" -H "Mcp-Method: $1" ${2:+-H "Mcp-Name: $2"} -d "$3"
}
tools=$(call tools/list "" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{$META}}") \
  || { cat "$WORK/server.log"; exit 1; }
answer=$(call tools/call get_many_workspaces "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"get_many_workspaces\",\"arguments\":{},$META}}") \
  || { cat "$WORK/server.log"; exit 1; }
TOOLS="$tools" ANSWER="$answer" "$PY" - <<'PY'
import json, os, sys
tools = json.loads(os.environ["TOOLS"])["result"]["tools"]
result = json.loads(os.environ["ANSWER"])["result"]
names = [w["name"] for w in result["structuredContent"]["workspaces"]]
ok = len(tools) == 9 and not result.get("isError") and names
print(f"smoke on Python {sys.version.split()[0]}: {len(tools)} tools, get_many_workspaces -> {names}")
sys.exit(0 if ok else 1)
PY
