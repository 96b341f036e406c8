"""The deploy files of the PostgreSQL engines (issue 12): the PgBouncer component and its
example overlay validate strictly and switch the service to transaction mode; the read
replica's URL is an optional Secret key; compose's pooler override file starts PgBouncer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ops.test_manifests import CRD_GROUP, K8S_VERSIONS, one
from tests.ops.tooling import ROOT, require, run
from tests.ops.yamldocs import load_all

OVERLAY = ROOT / "k8s" / "overlays" / "production-pgbouncer"


def _rendered() -> list[dict[str, Any]]:
    return list(load_all(run([require("kubectl"), "kustomize", str(OVERLAY)])))


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_pgbouncer_overlay_validates_strictly(version: str, tmp_path: Path) -> None:
    core = [d for d in _rendered() if not d["apiVersion"].startswith(CRD_GROUP)]
    path = tmp_path / "pgbouncer.json"
    path.write_text("\n---\n".join(json.dumps(d) for d in core))
    validate = require("kubernetes-validate")
    output = run([validate, "--strict", "--kubernetes-version", version, str(path)])
    assert output.count("passed for resource") == len(core), output


def test_the_pgbouncer_component_switches_the_service_to_transaction_mode() -> None:
    docs = tuple(_rendered())
    assert one(docs, "ConfigMap", "elova-mcp")["data"]["ELOVA_DATABASE_POOLER"] == "transaction"
    pooler = one(docs, "Deployment", "elova-pgbouncer")
    assert pooler["metadata"]["namespace"] == "elova"
    pod = pooler["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} == {
        "elova-pgbouncer"
    }
    # The app's egress allows port 5432 only: the pooler listens there.
    assert one(docs, "Service", "elova-pgbouncer")["spec"]["ports"][0]["port"] == 5432
    assert container["ports"][0]["containerPort"] == 5432
    assert one(docs, "NetworkPolicy", "elova-pgbouncer")["spec"]["ingress"]


def test_the_read_replica_url_is_an_optional_secret_key() -> None:
    docs = tuple(_rendered())
    (app,) = one(docs, "Deployment", "elova-mcp")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in app["env"]}
    ref = env["ELOVA_DATABASE_READ_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "elova-mcp", "key": "database-read-url", "optional": True}


def test_compose_pooler_variant_puts_pgbouncer_between_replicas_and_postgresql() -> None:
    deploy = ROOT / "deploy"
    args = [require("docker-compose"), "-f", str(deploy / "compose.yaml"),
            "-f", str(deploy / "compose.pooler.yaml"), "config"]  # fmt: skip
    (config,) = load_all(run(args))
    services = config["services"]
    assert services["pgbouncer"]["environment"]["POOL_MODE"] == "transaction"
    for replica in ("mcp-1", "mcp-2"):
        service = services[replica]
        assert "@pgbouncer:5432/" in service["environment"]["ELOVA_DATABASE_URL"]
        assert service["environment"]["ELOVA_DATABASE_POOLER"] == "transaction"
        # Merged, not replaced: the rest of the replica's settings stay.
        assert service["environment"]["ELOVA_METRICS_PORT"] == "9090"
        assert service["depends_on"]["pgbouncer"]["condition"] == "service_healthy"
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "@postgres:5432/" in services["migrate"]["environment"]["ELOVA_DATABASE_URL"]
    assert "ELOVA_DATABASE_POOLER" not in services["migrate"]["environment"]
