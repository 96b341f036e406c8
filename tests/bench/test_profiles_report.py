"""The report of CPU a call as shipped (tests/bench/profiles_bench.py): the judged ratios, and
the instruction counts beside them when callgrind ran."""

from __future__ import annotations

import pytest

from tests.bench.profiles_bench import CEILING, OURS_QUIET, OURS_SHIPPED, SDK, Run, report

pytestmark = pytest.mark.unit


def _runs() -> dict[str, list[Run]]:
    return {
        OURS_SHIPPED: [Run(1.0, 0.1, 900.0, 12.0), Run(1.2, 0.1, 800.0, 13.0)],
        OURS_QUIET: [Run(1.0, 0.1, 950.0, 11.0), Run(1.0, 0.1, 940.0, 11.5)],
        SDK: [Run(4.4, 0.0, 250.0, 60.0), Run(3.9, 0.0, 260.0, 58.0)],
        CEILING: [Run(1.0, 0.0, 1000.0, 10.0), Run(1.0, 0.0, 1010.0, 9.0)],
    }


def test_the_instructions_table_follows_the_cpu_ratios_when_callgrind_ran() -> None:
    counted = {OURS_SHIPPED: 3_420_000.0, OURS_QUIET: 3_358_000.0, CEILING: 2_811_000.0}
    text = report(_runs(), 2, 4.0, 16, 200_000, [], counted)
    cpu, _, counts = text.partition("Instructions a call")
    assert "| Python SDK CPU a call ÷ ours shipped (server + Redis) | **3.50×** (4.00, 3.00)" in cpu
    assert "| ours shipped (server + Redis) ÷ same-answer ceiling | **1.20×** (1.10, 1.30)" in cpu
    assert "| ours, shipped | 3,420k |" in counts
    assert "| same-answer ceiling | 2,811k |" in counts
    assert "- ours shipped ÷ the same-answer ceiling, instructions: **1.22**" in counts
    assert "- ours shipped ÷ ours quiet, instructions: **1.02**" in counts


def test_without_callgrind_the_report_has_no_instructions_table() -> None:
    assert "Instructions a call" not in report(_runs(), 2, 4.0, 16, 200_000, [])
    assert "Instructions a call" not in report(_runs(), 2, 4.0, 16, 200_000, [], {})
