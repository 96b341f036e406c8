"""The container image recipe and the compose stack, checked without a Docker daemon."""

from __future__ import annotations

import re

from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_all

DEPLOY = ROOT / "deploy"


def test_hadolint_accepts_the_dockerfile() -> None:
    run([require("hadolint"), str(DEPLOY / "Dockerfile")])


def test_dockerfile_is_multi_stage_pinned_and_unprivileged() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base[1])
    stages = re.findall(r"^FROM (\S+) AS (\w+)$", text, re.M)
    assert [name for _, name in stages] == ["build", "runtime"]
    runtime = text.split("AS runtime", 1)[1]
    assert re.search(r"^USER 10001:10001$", runtime, re.M)
    # Only the built virtual environment reaches the final image: no sources, no toolchain.
    assert re.findall(r"^COPY .*$", runtime, re.M) == ["COPY --from=build /opt/elova /opt/elova"]
    assert not re.search(r"apt-get|gcc|build-essential", runtime)


def test_compose_file_is_valid() -> None:
    run([require("docker-compose"), "-f", str(DEPLOY / "compose.yaml"), "config", "-q"])


def test_compose_runs_the_whole_stack() -> None:
    text = run([require("docker-compose"), "-f", str(DEPLOY / "compose.yaml"), "config"])
    (config,) = load_all(text)
    services = config["services"]
    assert set(services) == {
        "postgres", "redis", "migrate", "mcp-1", "mcp-2", "lb", "prometheus", "grafana",
    }  # fmt: skip
    assert services["migrate"]["command"] == ["migrate"]
    for replica in ("mcp-1", "mcp-2"):
        service = services[replica]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert service["environment"]["ELOVA_METRICS_PORT"] == "9090"
    haproxy = (DEPLOY / "haproxy.cfg").read_text()
    assert "option httpchk GET /readyz" in haproxy
    assert "server mcp-1 mcp-1:8080 check" in haproxy and "server mcp-2 mcp-2:8080 check" in haproxy
    mounts = " ".join(str(v) for v in services["prometheus"]["volumes"])
    assert "elova-mcp.rules.yaml" in mounts
    mounts = " ".join(str(v) for v in services["grafana"]["volumes"])
    assert "provisioning" in mounts and "dashboards" in mounts


def test_prometheus_config_is_valid_and_scrapes_both_replicas() -> None:
    run([require("promtool"), "check", "config", str(DEPLOY / "prometheus.yml")])
    text = (DEPLOY / "prometheus.yml").read_text()
    assert "job_name: elova-mcp" in text and '"mcp-1:9090", "mcp-2:9090"' in text
