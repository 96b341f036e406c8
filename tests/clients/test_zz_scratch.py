import json, time
from pathlib import Path
import pytest
from tests.clients.node import BIN, run

@pytest.mark.parametrize("rev", ["2026-07-28", "2025-11-25"])
async def test_scratch(node_env, proxy, tmp_path: Path, rev):
    t = time.monotonic()
    done = await run([str(BIN / "conformance"), "server", "--url", proxy.url, "--requirements", rev,
                      "--output-dir", str(tmp_path)], node_env, timeout=600)
    print("ELAPSED", time.monotonic() - t)
    out = Path("/tmp/clients-conf-" + rev)
    out.mkdir(exist_ok=True)
    (out / "stdout.txt").write_text(done.stdout + "\n----\n" + done.stderr)
    for f in tmp_path.glob("*/checks.json"):
        checks = json.loads(f.read_text())
        bad = [(c["id"], c["status"], c.get("errorMessage", "")[:300]) for c in checks if c["status"] not in ("SUCCESS", "INFO")]
        print(f.parent.name, "BAD" if bad else "ok", bad)
