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

# wrk, the native load generator of the CPU-a-call section (tests/bench/wrk_load.py), from
# Debian's packages where this user may install them; without it that section uses the
# Python generator and says so in its report.
if ! command -v wrk >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing wrk (Debian's package)"
        apt-get install -y -qq --no-install-recommends wrk >/dev/null \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk >/dev/null; } \
            || echo "wrk could not be installed: the Python load generator is used"
    else
        echo "wrk is not installed (apt-get install wrk): the Python load generator is used"
    fi
fi
