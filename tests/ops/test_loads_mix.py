"""Many small loads while `elova-mcp serve` answers, each turning every record to the other
version (tests/ops/loads_while_serving.py, `flip`): commits land between the statements of
answers, and no answer ever shows both versions — the statements of one answer read one
snapshot (service/store/reads/same_view.py). With the scope and the rows read apart,
such a run gave 1 to 3 mixed answers."""

from __future__ import annotations

import pytest

from tests.ops.loads_while_serving import flip


@pytest.mark.timeout(60)
async def test_answers_never_mix_versions_while_loads_commit_between_their_statements() -> None:
    flips = await flip()
    assert flips.errors == [], flips.errors[0].error
    assert flips.versions == {1, 2}
    assert len(flips.calls) > 10 * flips.loads, "calls ran through every load"
    assert flips.mixed == [], [(c.kind, sorted(c.versions)) for c in flips.mixed]
