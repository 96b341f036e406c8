"""`make bench` → `python -m tests.bench`: the scale benchmark (tests/bench/scale.py), how
cost grows with data and tenants (tests/bench/growth_bench.py), the session path beside the
stateless one (tests/bench/sessions_bench.py), ours
against the SDK and the same-answer ceiling (tests/bench/ceiling_bench.py), with
`--baseline COMMIT` old against new (tests/bench/baseline.py), the floods
(tests/bench/floods.py), the overload line (tests/bench/overload_bench.py: the adaptive
in-flight limit beside fixed caps at 4× overload), the pooler line
(tests/bench/pooler_bench.py: through PgBouncer next to direct), the tracing line
(tests/bench/tracing_bench.py: off, 1% and 100% sampled, interleaved), the fleet line
(tests/bench/fleet_bench.py: simulated replicas' limiters on a 3-master Redis Cluster), CPU a
call as shipped (tests/bench/profiles_bench.py: ours in the shipped and the quiet profile,
the peers as they ship and the same-answer ceiling, each pinned alone on one core, judged
against issue 40's targets), refusals against a same-work floor
(tests/bench/refusal_floor.py), then the admission limiter's own benchmark
(tests/bench/limits_bench.py).

    python -m tests.bench [--quick] [--rebuild] [--profile] [--concurrency N]
                          [--duration S] [--rounds N] [--output FILE] [--baseline COMMIT]
                          [--ceiling-only] [--flood-only] [--baseline-only] [--pooler-only]
                          [--tracing-only] [--overload-only] [--growth-only]
                          [--sessions-only] [--profiles-only] [--floor-only]
                          [--skip-ceiling] [--skip-floods]
                          [--skip-overload] [--skip-pooler] [--skip-tracing] [--skip-limits]
                          [--skip-growth] [--skip-sessions] [--skip-profiles]
                          [--skip-floor]

`--quick` uses a 200k-execution data set and short runs (for development); the default is
ten million executions (generated once into `elova_bench`, reused by later runs;
`--rebuild` writes it anew; the growth section adds a 1M set and a 50-workspace one, 50k
and 50k over 50 workspaces with `--quick`). Each `--…-only` flag runs that section alone
(several combine); `make bench BENCH_ARGS="--baseline cf8c545"` adds old against new to the
full run (and the older commit's columns to the flood table). The report is Markdown on
stdout (and in FILE with --output); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.bench import (
    baseline,
    ceiling_bench,
    fleet_bench,
    floods,
    growth_bench,
    overload_bench,
    pooler_bench,
    profiles_bench,
    refusal_floor,
    scale,
    sessions_bench,
    tracing_bench,
)

SECTIONS = (
    "ceiling",
    "flood",
    "overload",
    "baseline",
    "pooler",
    "tracing",
    "growth",
    "sessions",
    "fleet",
    "profiles",
    "floor",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench")
    parser.add_argument("--quick", action="store_true", help="200k executions, short runs")
    parser.add_argument("--rebuild", action="store_true", help="generate the data set anew")
    parser.add_argument("--profile", action="store_true", help="add a cProfile run")
    parser.add_argument("--concurrency", type=int, help="concurrent connections (default 16)")
    parser.add_argument("--duration", type=float, help="seconds a throughput run")
    parser.add_argument("--rounds", type=int, help="throughput rounds (default 3; --quick 1)")
    parser.add_argument("--executions", type=int, help="override the data set size")
    parser.add_argument("--output", type=Path, help="also write the report here")
    parser.add_argument(
        "--baseline", metavar="COMMIT", help="also run COMMIT's server beside this one"
    )
    for section in SECTIONS:
        parser.add_argument(
            f"--{section}-only", action="store_true", help=f"only the {section} section"
        )
    parser.add_argument("--skip-ceiling", action="store_true", help="skip ours/SDK/ceiling")
    parser.add_argument("--skip-floods", action="store_true", help="skip the flood section")
    parser.add_argument("--skip-overload", action="store_true", help="skip the overload line")
    parser.add_argument("--skip-limits", action="store_true", help="skip limits_bench")
    parser.add_argument("--skip-pooler", action="store_true", help="skip the PgBouncer line")
    parser.add_argument("--skip-tracing", action="store_true", help="skip the tracing line")
    parser.add_argument("--skip-growth", action="store_true", help="skip the growth table")
    parser.add_argument("--skip-sessions", action="store_true", help="skip the session path")
    parser.add_argument("--skip-fleet", action="store_true", help="skip the Cluster fleet line")
    parser.add_argument("--skip-profiles", action="store_true", help="skip CPU a call as shipped")
    parser.add_argument("--skip-floor", action="store_true", help="skip the same-work floor")
    args = parser.parse_args(argv)
    only = {s for s in SECTIONS if getattr(args, f"{s}_only")}
    if "baseline" in only and not args.baseline:
        parser.error("--baseline-only needs --baseline COMMIT")
    settings = scale.QUICK if args.quick else scale.FULL
    changes: dict[str, object] = {"rebuild": args.rebuild, "profile": args.profile}
    for name in ("concurrency", "duration", "executions", "rounds"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    wanted = {
        "ceiling": not args.skip_ceiling,
        "baseline": bool(args.baseline),
        "flood": not args.skip_floods,
        "overload": not args.skip_overload,
        "pooler": not args.skip_pooler,
        "tracing": not args.skip_tracing,
        "growth": not args.skip_growth,
        "sessions": not args.skip_sessions,
        "fleet": not args.skip_fleet,
        "profiles": not args.skip_profiles,
        "floor": not args.skip_floor,
    }
    if only:
        wanted = {s: s in only for s in SECTIONS}
    parts = [] if only else [scale.main(settings)]
    runs: dict[str, Callable[[], str]] = {  # in the report's order
        "growth": lambda: growth_bench.main(settings),
        "sessions": lambda: sessions_bench.main(settings),
        "ceiling": lambda: ceiling_bench.main(settings),
        "baseline": lambda: baseline.main(settings, args.baseline),
        "flood": lambda: floods.main(settings, args.baseline),
        "overload": lambda: overload_bench.main(settings),
        "pooler": lambda: pooler_bench.main(settings),
        "tracing": lambda: tracing_bench.main(settings),
        "fleet": lambda: fleet_bench.report(5.0 if args.quick else 15.0),
        "profiles": lambda: profiles_bench.main(settings, args.rounds or profiles_bench.ROUNDS),
        "floor": lambda: refusal_floor.main(settings, args.rounds or refusal_floor.ROUNDS),
    }
    parts += [run() for name, run in runs.items() if wanted[name]]
    report = "\n".join(parts)
    sys.stdout.write(report)
    sys.stdout.flush()
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    if args.skip_limits or only:
        return 0
    print("\n# Admission limiter benchmark (tests/bench/limits_bench.py)\n", flush=True)
    return subprocess.run(
        [sys.executable, "-m", "tests.bench.limits_bench"], check=False
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
