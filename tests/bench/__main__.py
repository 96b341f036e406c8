"""`make bench` → `python -m tests.bench`: the scale benchmark (tests/bench/scale.py), ours
against the SDK and the same-answer ceiling (tests/bench/ceiling_bench.py), with
`--baseline COMMIT` old against new (tests/bench/baseline.py), the floods
(tests/bench/floods.py), the pooler line (tests/bench/pooler_bench.py: through PgBouncer
next to direct), then the admission limiter's own benchmark (tests/bench/limits_bench.py).

    python -m tests.bench [--quick] [--rebuild] [--profile] [--concurrency N]
                          [--duration S] [--rounds N] [--output FILE] [--baseline COMMIT]
                          [--ceiling-only] [--flood-only] [--baseline-only] [--pooler-only]
                          [--skip-ceiling] [--skip-floods] [--skip-pooler] [--skip-limits]

`--quick` uses a 200k-execution data set and short runs (for development); the default is
ten million executions (generated once into `elova_bench`, reused by later runs;
`--rebuild` writes it anew). Each `--…-only` flag runs that section alone (several combine);
`make bench BENCH_ARGS="--baseline cf8c545"` adds old against new to the full run (and
the older commit's columns to the flood table). The
report is Markdown on stdout (and in FILE with --output); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

from tests.bench import baseline, ceiling_bench, floods, pooler_bench, scale

SECTIONS = ("ceiling", "flood", "baseline", "pooler")


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
    parser.add_argument("--skip-limits", action="store_true", help="skip limits_bench")
    parser.add_argument("--skip-pooler", action="store_true", help="skip the PgBouncer line")
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
        "pooler": not args.skip_pooler,
    }
    if only:
        wanted = {s: s in only for s in SECTIONS}
    parts = [] if only else [scale.main(settings)]
    if wanted["ceiling"]:
        parts.append(ceiling_bench.main(settings))
    if wanted["baseline"]:
        parts.append(baseline.main(settings, args.baseline))
    if wanted["flood"]:
        parts.append(floods.main(settings, args.baseline))
    if wanted["pooler"]:
        parts.append(pooler_bench.main(settings))
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
