"""Render k8s/components/prometheus-operator/prometheusrule.yaml from the alerts file
grafana/alerts/elova-mcp.rules.yaml.

The rules file is the one source (Prometheus in compose loads it directly); the Kubernetes
PrometheusRule embeds the same groups. Run with the tools interpreter (it needs PyYAML):
    .tools/ops-venv/bin/python tests/ops/render_prometheusrule.py          # write
    .tools/ops-venv/bin/python tests/ops/render_prometheusrule.py --check  # exit 1 if stale
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "grafana" / "alerts" / "elova-mcp.rules.yaml"
TARGET = ROOT / "k8s" / "components" / "prometheus-operator" / "prometheusrule.yaml"
HEADER = (
    "# GENERATED from grafana/alerts/elova-mcp.rules.yaml by\n"
    "# tests/ops/render_prometheusrule.py: edit the rules file, then re-run the script.\n"
)


def render() -> str:
    rules = yaml.safe_load(SOURCE.read_text())
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "elova-mcp"},
        "spec": {"groups": rules["groups"]},
    }
    body: str = yaml.safe_dump(resource, sort_keys=False, width=100)
    return HEADER + body


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run {Path(__file__).relative_to(ROOT)}")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
