#!/usr/bin/env bash
# The supported Pythons other than the one `make test` ran on: for each, a venv of its own
# (.venv-3.X, from the same lockfile, as `make install` does), the fast suite (`pytest -m
# unit`) and a served smoke call (.ci/smoke.sh). Under CI a missing version fails the run;
# elsewhere it is skipped with a line saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
default=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
find_python() {  # the same search as the Makefile's: python3.X on PATH if it runs, else pyenv's
  local v=$1 c
  for c in "python$v" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v"*/bin/python"$v" \
      2>/dev/null | sort -V -r); do
    "$c" -c '' >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}
for v in 3.13 3.12 3.11; do
  [ "$v" = "$default" ] && continue
  if ! py=$(find_python "$v"); then
    if [ -n "${CI:-}" ]; then echo "Python $v is not installed: CI tests every supported version" >&2; exit 1; fi
    echo "Python $v is not installed: skipped"; continue
  fi
  echo "== Python $v ($py): install, unit tests, smoke call"
  start=$SECONDS
  make --no-print-directory install PYTHON="$py" VENV=".venv-$v" >/dev/null
  ".venv-$v/bin/pytest" -q -p no:cacheprovider -m unit
  bash .ci/smoke.sh ".venv-$v"
  echo "== Python $v: passed in $((SECONDS - start)) s"
done
