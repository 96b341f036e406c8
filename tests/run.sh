#!/usr/bin/env bash
# `make test`: the whole suite in three pytest runs, with branch coverage of service/ over
# all three and the floor of pyproject's [tool.coverage.report] on the sum
# (docs/decisions/tooling.md, "Test wall time"):
#   slow   the `slow` tests (end-to-end runs of real processes, mostly waiting on them),
#          one after another as before, while beside them
#   rest   every other test runs, one after another as before;
#   alone  then the `alone` tests (timing that another run's load beside them would
#          disturb), with nothing beside them.
# Each run has its own database and Redis prefix (tests/support/services.py) and its own
# coverage data file; the slow run's output follows the rest's. Arguments go to every run.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
DATA="$PWD/.coverage"
COV=(--cov=service --cov-branch --cov-report= --cov-fail-under=0)
rm -f "$DATA" "$DATA".*

# A run that outlasts this has hung where pytest-timeout could not break it (a fixture's
# teardown inside the event loop): interrupted, it still prints its failures and summary.
PART_LIMIT="${PART_LIMIT:-30m}"

part() {  # NAME MARKEXPR [pytest args]: one run, writing $DATA.NAME (and its subprocesses')
  local name=$1 marks=$2
  shift 2
  COVERAGE_FILE="$DATA.$name" timeout --signal=INT --kill-after=60 "$PART_LIMIT" \
    "$BIN/pytest" -m "$marks" "${COV[@]}" "$@"
  local rc=$?
  [ "$rc" -eq 5 ] && rc=0  # no test of this part selected: not a failure of the suite
  return "$rc"
}

slow_log="$(mktemp)"
trap 'rm -f "$slow_log"' EXIT
part slow "slow and not alone" "$@" >"$slow_log" 2>&1 &
slow_pid=$!
part rest "not slow and not alone" "$@"
rest=$?
wait "$slow_pid"
slow=$?
echo "---------- the slow tests (run beside the rest) ----------"
cat "$slow_log"
echo "---------- the alone tests ----------"
part alone "alone" "$@"
alone=$?

echo "---------- coverage of service/, all three runs ----------"
"$BIN/coverage" combine --quiet --data-file="$DATA" "$DATA.slow" "$DATA.rest" "$DATA.alone"
"$BIN/coverage" report --data-file="$DATA"
covered=$?
echo "test runs: rest exit $rest, slow exit $slow, alone exit $alone; coverage floor exit $covered"
[ "$rest" -eq 0 ] && [ "$slow" -eq 0 ] && [ "$alone" -eq 0 ] && [ "$covered" -eq 0 ]
