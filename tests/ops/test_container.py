"""The container image recipe and the compose stack, checked without a Docker daemon."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis
from yarl import URL

from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_all, load_file
from tests.support.engines_redis import Node
from tests.support.server import free_port

DEPLOY = ROOT / "deploy"


def test_hadolint_accepts_the_dockerfile() -> None:
    run([require("hadolint"), str(DEPLOY / "Dockerfile")])


def test_dockerfile_is_multi_stage_pinned_and_unprivileged() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:3\.13\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base[1])
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


def _defaults(value: str) -> str:
    """A compose value with its `${VAR:-default}` references read as their defaults."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_compose_publishes_only_the_mcp_port_beyond_loopback() -> None:
    services = load_file(DEPLOY / "compose.yaml")["services"]
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert published == {
        "lb": ["8080:8080"],
        "prometheus": ["127.0.0.1:9091:9090"],
        "grafana": ["127.0.0.1:3000:3000"],
    }


def test_compose_redis_requires_the_password_the_replicas_send(tmp_path: Path) -> None:
    """The compose Redis command, run on a real redis-server: it refuses a client without
    the password, and the replicas' ELOVA_REDIS_URL and the healthcheck's redis-cli get in."""
    config = load_file(DEPLOY / "compose.yaml")
    redis_service = config["services"]["redis"]
    command = [_defaults(arg) for arg in redis_service["command"]]
    assert command[0] == "redis-server"
    password = command[command.index("--requirepass") + 1]
    assert len(password) >= 16
    for replica in ("mcp-1", "mcp-2"):
        url = URL(_defaults(config["services"][replica]["environment"]["ELOVA_REDIS_URL"]))
        assert (url.host, url.port, url.password) == ("redis", 6379, password)
    assert _defaults(redis_service["environment"]["REDISCLI_AUTH"]) == password
    assert redis_service["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]

    node = Node(free_port(), tmp_path / "redis", command[1:], password)
    node.start()
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=2).ping()
        service_url = url.with_host("127.0.0.1").with_port(node.port)
        assert redis.Redis.from_url(str(service_url), socket_timeout=2).ping()
        cli = shutil.which("redis-cli")
        if cli is not None:
            ping = [cli, "-p", str(node.port), "ping"]
            env = {"PATH": os.environ.get("PATH", "")}
            refused = subprocess.run(ping, env=env, capture_output=True, text=True, timeout=10)
            assert "NOAUTH" in refused.stdout + refused.stderr
            healthy = subprocess.run(
                ping, env={**env, "REDISCLI_AUTH": password}, capture_output=True, text=True,
                timeout=10,
            )  # fmt: skip
            assert healthy.stdout.strip() == "PONG"
    finally:
        node.stop()
