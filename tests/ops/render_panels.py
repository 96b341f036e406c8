"""Render the dashboard's main panels from Prometheus query_range results to one PNG.

Run by prometheus_smoke.py with the tools interpreter (matplotlib lives in .tools/ops-venv):
    render_panels.py panels.json out.png
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MAIN = [
    "Error budget burn rate",
    "Tool calls per second by tool",
    "Failed tool calls per second by tool and code",
    "Tool call latency quantiles",
    "p99 latency by tool",
    "429 refusals per second by limit",
    "In-flight requests vs caps",
    "Auth failures per second by reason",
    "PostgreSQL p99 latency and errors",
    "PostgreSQL pool connections",
    "Event-loop lag p99 per replica",
    "CPU per replica",
]


def legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for key, value in labels.items():
        text = text.replace("{{" + key + "}}", value)
    return text.replace("{{", "").replace("}}", "") or json.dumps(labels)


def main(source: str, target: str) -> None:
    with open(source) as fh:
        data = json.load(fh)
    start = data["start"]
    by_panel: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in data["panels"]:
        by_panel[entry["panel"]].append(entry)
    fig, axes = plt.subplots(4, 3, figsize=(18, 16))
    fig.suptitle("Elova MCP — main panels (Prometheus smoke run)", fontsize=15)
    for ax, title in zip(axes.flat, MAIN, strict=True):
        ax.set_title(title, fontsize=10)
        for entry in by_panel.get(title, []):
            for series in entry["series"]:
                points = [(float(t) - start, float(v)) for t, v in series["values"]]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, label=legend(entry["legend"], series["metric"])[:40])
        if title == "Tool call latency quantiles":
            ax.axhline(0.25, color="red", linestyle="--", linewidth=1, label="SLO 250 ms")
        if title == "Error budget burn rate":
            ax.axhline(14.4, color="red", linestyle="--", linewidth=1, label="page (14.4)")
        ax.set_xlabel("seconds since load start", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(target, dpi=80)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
