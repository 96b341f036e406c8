#!/usr/bin/env bash
# Debian packages the test suite uses (each is checked before apt runs).
set -euo pipefail
need=()
for pair in $(cat .ci/debian-packages.txt 2>/dev/null | grep -v '^#' || true); do
  pkg="${pair%%:*}"; cmd="${pair##*:}"
  command -v "$cmd" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
