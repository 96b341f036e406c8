#!/usr/bin/env bash
# Installs the bench's peers (tests/bench/peers/): `make bench` runs it, `make test` and
# `make tools` do not (it is not a tests/*/install.sh), so CI's test run does not pay for it.
#   - the TypeScript SDK peer: `npm ci` of tests/bench/peers/typescript (package-lock.json)
#     with the Node 22 that tests/clients/install.sh puts under .tools/node22;
#   - the FastMCP peer: a venv of its own, .tools/bench-fastmcp, from the pinned
#     tests/bench/peers/fastmcp/requirements.txt (FastMCP 2.x pins an `mcp` 1.x; our dev
#     lockfile has 2.x). To move a pin: edit requirements.in, then from the repository root
#     uv pip compile --universal --python-version 3.11 \
#       tests/bench/peers/fastmcp/requirements.in -o tests/bench/peers/fastmcp/requirements.txt
# Idempotent and quick when nothing changed: each stamp records its lockfile's hash.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PEERS="$ROOT/tests/bench/peers"
PYTHON="${PYTHON:-python3.11}"

NODE_BIN_DIR="$(echo "$ROOT"/.tools/node22/node_modules/node-linux-*/bin)"
if [ ! -x "$NODE_BIN_DIR/node" ]; then
    bash "$ROOT/tests/clients/install.sh"
    NODE_BIN_DIR="$(echo "$ROOT"/.tools/node22/node_modules/node-linux-*/bin)"
fi
export PATH="$NODE_BIN_DIR:$PATH"

TS_DIR="$PEERS/typescript"
ts_stamp="$TS_DIR/node_modules/.elova-installed"
want="$(sha256sum "$TS_DIR/package-lock.json" | cut -d' ' -f1)-$(node --version)"
if [ ! -f "$ts_stamp" ] || [ "$(cat "$ts_stamp")" != "$want" ]; then
    echo "installing the TypeScript SDK peer (npm ci in tests/bench/peers/typescript)"
    (cd "$TS_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$want" >"$ts_stamp"
fi

VENV="$ROOT/.tools/bench-fastmcp"
fm_stamp="$VENV/.elova-installed"
want="$(sha256sum "$PEERS/fastmcp/requirements.txt" | cut -d' ' -f1)"
if [ ! -f "$fm_stamp" ] || [ "$(cat "$fm_stamp")" != "$want" ]; then
    echo "installing the FastMCP peer (venv .tools/bench-fastmcp)"
    rm -rf "$VENV"
    mkdir -p "$ROOT/.tools"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    # --no-deps: exactly the locked set, nothing resolved anew.
    "$VENV/bin/pip" install -q --no-deps -r "$PEERS/fastmcp/requirements.txt"
    "$VENV/bin/python" -c "import fastmcp, asyncpg, uvicorn, uvloop, httptools"
    echo "$want" >"$fm_stamp"
fi
