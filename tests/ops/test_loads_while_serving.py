"""A large snapshot loaded by `elova-mcp load` while a real `elova-mcp serve` answers a steady
load of tool calls (tests/ops/loads_while_serving.py): no answer mixes the old records and
the new, no call fails, the service never waits for a lock the loader holds, tool-call p99
during the load stays within 5× of before, and right after it p99 is the steady state's at
once (the load's own ANALYZE), not after autovacuum. (Many small loads committing between
the statements of answers: tests/ops/test_loads_mix.py.)

20,000 executions here, so the test stays under a minute; ELOVA_LOADS_EXECUTIONS=100000
runs the issue's check (about two minutes on 2 cores), as does
`python -m tests.ops.loads_while_serving`.
"""

from __future__ import annotations

import os

import pytest

from tests.ops.loads_while_serving import HARMLESS_MODES, Outcome, run

EXECUTIONS = int(os.environ.get("ELOVA_LOADS_EXECUTIONS", "20000"))
BASE = max(1000, EXECUTIONS // 10)
# p99 of a few hundred calls on a shared 2-core machine moves by milliseconds from one
# window to the next: the bound of "right after" adds that much to 1.5×. Windows of 5-6 s
# (600 calls or more) keep one stall of the machine (a checkpoint another database asked
# for) from being the p99 by itself. Without the load's
# ANALYZE the second pages right after cost 7× the steady state's (docs/operations.md).
NOISE_MS = 10.0


@pytest.mark.slow
@pytest.mark.alone  # p99 windows compared: no other test's load beside
@pytest.mark.timeout(90 if EXECUTIONS <= 30_000 else 600)
async def test_a_large_load_while_serving_mixes_nothing_stalls_nothing() -> None:
    outcome = await run(executions=EXECUTIONS, base=BASE, before_seconds=5, after_seconds=6)
    report = outcome.report()
    assert outcome.errors == [], report
    assert outcome.mixed == [], [(c.kind, sorted(c.versions)) for c in outcome.mixed[:5]]
    assert outcome.versions_before == {1} and outcome.versions_after == {2}, report
    _assert_no_lock_stalls(outcome)

    before, during = outcome.before.percentile(0.99), outcome.during.percentile(0.99)
    assert during <= 5 * before, report
    for kinds in (None, ("first_page", "first_page_filtered")):
        after = outcome.after.percentile(0.99, kinds)
        settled = outcome.settled.percentile(0.99, kinds)
        assert after <= 1.5 * settled + NOISE_MS, (kinds, report)


def _assert_no_lock_stalls(outcome: Outcome) -> None:
    assert outcome.samples >= 10, "the lock watcher sampled the load"
    assert outcome.lock_waits == [], outcome.lock_waits[:5]
    modes = {mode for _, mode in outcome.loader_locks}
    assert "RowExclusiveLock" in modes, "the watcher saw the loader's writes"
    assert modes <= HARMLESS_MODES, sorted(outcome.loader_locks)
