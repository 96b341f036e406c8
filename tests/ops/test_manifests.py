"""Kubernetes manifests: rendered overlays validate strictly against the oldest and newest
supported Kubernetes, and say what production needs (probes, drain, hardening, policies)."""

from __future__ import annotations

import ipaddress
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from service.config import Config
from service.server.listener import DRAIN_SECONDS, shutdown_timeout
from service.settings.proxies import read_trusted_proxies
from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_all

OVERLAYS = ("staging", "production")
# Oldest and newest Kubernetes minor versions we support (docs/operations.md).
K8S_VERSIONS = ("1.30.0", "1.37.0")
CRD_GROUP = "monitoring.coreos.com/"


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = require("kubectl")
    text = run([kubectl, "kustomize", str(ROOT / "k8s" / "overlays" / overlay)])
    return tuple(load_all(text))


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_overlay_validates_strictly(overlay: str, version: str, tmp_path: Path) -> None:
    validate = require("kubernetes-validate")
    core = [d for d in rendered(overlay) if not d["apiVersion"].startswith(CRD_GROUP)]
    # The operator CRDs have no built-in schema: they are checked below (promtool, schema).
    skipped = {d["kind"] for d in rendered(overlay)} - {d["kind"] for d in core}
    assert skipped == {"ServiceMonitor", "PrometheusRule"}
    path = tmp_path / f"{overlay}.json"
    path.write_text("\n---\n".join(json.dumps(d) for d in core))
    output = run([validate, "--strict", "--kubernetes-version", version, str(path)])
    assert output.count("passed for resource") == len(core), output


def test_strict_validation_rejects_an_unknown_field(tmp_path: Path) -> None:
    # Guards the guard: a typo in a manifest must fail, not pass silently.
    validate = require("kubernetes-validate")
    deployment = dict(one(rendered("staging"), "Deployment", "elova-mcp"))
    deployment["spec"] = {**deployment["spec"], "replicaz": 3}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(deployment))
    with pytest.raises(pytest.fail.Exception):
        run([validate, "--strict", "--kubernetes-version", K8S_VERSIONS[0], str(path)])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deployment_is_probed_drained_and_hardened(overlay: str) -> None:
    docs = rendered(overlay)
    pod = one(docs, "Deployment", "elova-mcp")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/livez"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # On the metrics listener, which client traffic cannot crowd out (issue 54).
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == 9090, probe
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # The grace period covers preStop + readiness drain + in-flight requests at the deadline.
    cfg = Config(database_url="postgresql://x/y")
    worst = float(pre_stop[1]) + DRAIN_SECONDS + shutdown_timeout(cfg)
    assert pod["terminationGracePeriodSeconds"] > worst
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= container["resources"]["limits"].keys()
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8080,
        "metrics": 9090,
    }
    config = one(docs, "ConfigMap", "elova-mcp")["data"]
    assert config["ELOVA_PORT"] == "8080" and config["ELOVA_METRICS_PORT"] == "9090"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_values_in_the_repository(overlay: str) -> None:
    docs = rendered(overlay)
    assert not [d for d in docs if d["kind"] == "Secret"]
    text = json.dumps(docs)
    assert "BEGIN" not in text and "postgresql://" not in text and "redis://" not in text
    pod = one(docs, "Deployment", "elova-mcp")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["ELOVA_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "elova-mcp"
    assert env["ELOVA_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "elova-mcp"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["signing-key"]["secret"]["secretName"] == "elova-mcp-signing-key"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migration_job_hpa_and_pdb(overlay: str) -> None:
    docs = rendered(overlay)
    job = one(docs, "Job", "elova-mcp-migrate")["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["migrate"]
    assert job["securityContext"]["runAsNonRoot"] is True
    hpa = one(docs, "HorizontalPodAutoscaler", "elova-mcp")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "elova-mcp" and hpa["minReplicas"] >= 2
    pdb = one(docs, "PodDisruptionBudget", "elova-mcp")["spec"]
    assert 1 <= pdb["minAvailable"] < hpa["minReplicas"]
    selector = pdb["selector"]["matchLabels"]
    labels = one(docs, "Deployment", "elova-mcp")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_admits_only_app_and_metrics_ports(overlay: str) -> None:
    policy = one(rendered(overlay), "NetworkPolicy", "elova-mcp")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    ingress_ports = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert ingress_ports == {8080, 9090}
    metrics_rule = next(r for r in policy["ingress"] if r["ports"][0]["port"] == 9090)
    assert metrics_rule["from"], "the metrics port is open to the monitoring namespace only"
    egress_ports = {(p["port"], p["protocol"]) for r in policy["egress"] for p in r["ports"]}
    assert egress_ports == {(5432, "TCP"), (6379, "TCP"), (53, "UDP"), (53, "TCP"), (443, "TCP")}
    # HTTPS (metadata documents) only to public addresses.
    https = next(r for r in policy["egress"] if r["ports"][0]["port"] == 443)
    block = https["to"][0]["ipBlock"]
    assert block["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
        block["except"]
    )


def _serving_peers(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The peers of every ingress rule that opens the serving port (8080); an empty `from`
    (any source) is one peer that matches everything."""
    peers: list[dict[str, Any]] = []
    for rule in policy["spec"]["ingress"]:
        if any(p["port"] in (8080, "http") for p in rule.get("ports") or [{"port": 8080}]):
            peers.extend(rule.get("from") or [{}])
    return peers


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_serving_port_admits_only_the_ingress_controller(overlay: str) -> None:
    """Issue 54, finding 6: any pod that reaches port 8080 from the trusted range picks its
    client address (X-Forwarded-For); only the controller's pods may reach it."""
    peers = _serving_peers(one(rendered(overlay), "NetworkPolicy", "elova-mcp"))
    assert peers
    for peer in peers:
        assert set(peer) == {"namespaceSelector", "podSelector"}, peer
        namespace = peer["namespaceSelector"]["matchLabels"]
        assert namespace == {"kubernetes.io/metadata.name": "ingress-nginx"}
        assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"


def test_an_open_serving_rule_would_be_caught() -> None:
    # Guards the guard: the rule of before issue 54 (the port, no `from`) is one open peer.
    policy = {"spec": {"ingress": [{"ports": [{"port": 8080, "protocol": "TCP"}]}]}}
    assert _serving_peers(policy) == [{}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_proxy_trust_is_no_wider_than_documented(overlay: str) -> None:
    """ELOVA_TRUSTED_PROXIES is the range docs/deploying.md names (the controller's pods),
    never a whole private block such as 10.0.0.0/8."""
    guide = (ROOT / "docs" / "deploying.md").read_text()
    found = re.search(r"The base sets\s+`([^`]+)`", guide)
    assert found, "docs/deploying.md names the default trusted range"
    documented = ipaddress.ip_network(found[1])
    data = one(rendered(overlay), "ConfigMap", "elova-mcp")["data"]
    networks = read_trusted_proxies(data).networks
    assert networks
    for network in networks:
        assert network.is_private and network.prefixlen >= 16, network
        assert network.subnet_of(documented), (network, documented)  # type: ignore[arg-type]


# The fields of the ServiceMonitor we use, from the Prometheus Operator CRD (v1).
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object"}},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                    },
                },
            },
        },
    },
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_monitor_scrapes_the_metrics_port_of_the_service(overlay: str) -> None:
    docs = rendered(overlay)
    monitor = one(docs, "ServiceMonitor", "elova-mcp")
    jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    service = one(docs, "Service", "elova-mcp")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    # Prometheus names the job after the Service: rules and dashboard select job="elova-mcp".
    assert service["metadata"]["name"] == "elova-mcp"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_rule_passes_promtool(overlay: str, tmp_path: Path) -> None:
    promtool = require("promtool")
    rule = one(rendered(overlay), "PrometheusRule", "elova-mcp")
    path = tmp_path / "rules.json"  # promtool reads YAML, and JSON is YAML
    path.write_text(json.dumps({"groups": rule["spec"]["groups"]}))
    run([promtool, "check", "rules", str(path)])


def test_prometheus_rule_embeds_the_rules_file() -> None:
    require("kubernetes-validate")
    python = str(ROOT / ".tools" / "ops-venv" / "bin" / "python")
    run([python, str(ROOT / "tests" / "ops" / "render_prometheusrule.py"), "--check"])


def _store_rules(policy: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """The egress rules to PostgreSQL (5432) and Redis (6379), by port."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["egress"]:
        for port in rule["ports"]:
            if port["port"] in (5432, 6379):
                out.setdefault(port["port"], []).append(rule)
    return out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_database_egress_is_narrowed_to_its_destinations(overlay: str) -> None:
    """The base allows the store ports to any destination; every overlay names them."""
    rules = _store_rules(one(rendered(overlay), "NetworkPolicy", "elova-mcp"))
    assert set(rules) == {5432, 6379}
    for port_rules in rules.values():
        assert all(rule.get("to") for rule in port_rules), port_rules


def test_staging_reaches_its_database_and_cache_at_one_address_each() -> None:
    docs = rendered("staging")
    server = _store_rules(one(docs, "NetworkPolicy", "elova-mcp"))
    migrate = _store_rules(one(docs, "NetworkPolicy", "elova-mcp-migrate"))
    assert set(migrate) == {5432}
    for port_rules in (server[5432], server[6379], migrate[5432]):
        (rule,) = port_rules
        (peer,) = rule["to"]
        assert set(peer) == {"ipBlock"} and peer["ipBlock"]["cidr"].endswith("/32"), peer
        assert "except" not in peer["ipBlock"]
    database = server[5432][0]["to"][0]["ipBlock"]["cidr"]
    assert migrate[5432][0]["to"][0]["ipBlock"]["cidr"] == database
    assert server[6379][0]["to"][0]["ipBlock"]["cidr"] != database


def _render(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(load_all(run([require("kubectl"), "kustomize", str(path)])))


def test_base_holds_its_namespace_and_applies_without_the_operator_crds() -> None:
    docs = _render(ROOT / "k8s" / "base")
    assert one(docs, "Namespace", "elova")
    assert all(d["metadata"].get("namespace") == "elova" for d in docs if d["kind"] != "Namespace")
    assert not [d for d in docs if d["apiVersion"].startswith(CRD_GROUP)]
    operator = _render(ROOT / "k8s" / "components" / "prometheus-operator")
    assert {d["kind"] for d in operator} == {"ServiceMonitor", "PrometheusRule"}


def test_production_ingress_terminates_tls_for_the_public_url() -> None:
    docs = rendered("production")
    ingress = one(docs, "Ingress", "elova-mcp")
    public = one(docs, "ConfigMap", "elova-mcp")["data"]["ELOVA_PUBLIC_URL"]
    host = public.removeprefix("https://")
    assert public.startswith("https://") and "/" not in host
    assert [t["hosts"] for t in ingress["spec"]["tls"]] == [[host]]
    assert ingress["spec"]["tls"][0]["secretName"]
    assert [r["host"] for r in ingress["spec"]["rules"]] == [host]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migration_runs_before_the_server_and_proxies_are_trusted(overlay: str) -> None:
    docs = rendered(overlay)
    pod = one(docs, "Deployment", "elova-mcp")["spec"]["template"]["spec"]
    assert [(c["name"], c["args"]) for c in pod["initContainers"]] == [("migrate", ["migrate"])]
    assert pod["initContainers"][0]["image"] == pod["containers"][0]["image"]
    # the ingress controller's pods are in the trusted range, so their X-Forwarded-For counts
    data = one(docs, "ConfigMap", "elova-mcp")["data"]
    assert read_trusted_proxies(data).networks
