"""`make bench` → `python -m tests.bench`: the scale benchmark (tests/bench/scale.py), the
pooler line (tests/bench/pooler_bench.py: through PgBouncer next to direct), then the
admission limiter's own benchmark (tests/bench/limits_bench.py).

    python -m tests.bench [--quick] [--rebuild] [--profile] [--concurrency N]
                          [--duration S] [--rounds N] [--output FILE] [--skip-limits]
                          [--skip-pooler | --pooler-only]

`--quick` uses a 200k-execution data set and short runs (for development); the default is
ten million executions (generated once into `elova_bench`, reused by later runs;
`--rebuild` writes it anew). The report is Markdown on stdout (and in FILE with --output);
progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

from tests.bench import pooler_bench, scale


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
    parser.add_argument("--skip-limits", action="store_true", help="skip limits_bench")
    parser.add_argument("--skip-pooler", action="store_true", help="skip the PgBouncer line")
    parser.add_argument("--pooler-only", action="store_true", help="only the PgBouncer line")
    args = parser.parse_args(argv)
    settings = scale.QUICK if args.quick else scale.FULL
    changes: dict[str, object] = {"rebuild": args.rebuild, "profile": args.profile}
    for name in ("concurrency", "duration", "executions", "rounds"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    settings = dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
    report = "" if args.pooler_only else scale.main(settings)
    if not args.skip_pooler:
        report += ("\n" if report else "") + pooler_bench.main(settings)
    sys.stdout.write(report)
    sys.stdout.flush()
    if args.output:
        args.output.write_text(report, encoding="utf-8")
    if args.skip_limits:
        return 0
    print("\n# Admission limiter benchmark (tests/bench/limits_bench.py)\n", flush=True)
    return subprocess.run(
        [sys.executable, "-m", "tests.bench.limits_bench"], check=False
    ).returncode


if __name__ == "__main__":
    sys.exit(main())
