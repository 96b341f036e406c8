"""A load generator's job run by wrk (Debian's package, a native generator driven by a Lua
script) instead of tests/bench/loadgen.py: the same request on every connection, each
answer checked for the job's `expect` text, the same `Result` back.

Used by the CPU-a-call section (tests/bench/profiles_bench.py) where wrk is installed: its
C event loop needs a fraction of the Python generator's CPU a request, so the load core
(shared with our redis-server) is less crowded and every server is kept as busy as it can
be. Only jobs of one request with no per-connection opening (no sessions) run here; the
others keep the Python generator (`supports`).

wrk reports latency percentiles in microseconds and counts answers that are not 2xx/3xx as
errors (so a job expecting refusals reads `statuses`, as with the Python generator); the Lua
script counts answers by status and the 200s that lack `expect`, and keeps the first of
those. As with the Python generator, `completed` counts the good answers (a 200 with
`expect`) and `errors` every other.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.bench.loadgen import Job, Result

# The script's `done` writes one JSON object to the file named in the environment-free
# way wrk allows: its path is baked into the script.
_SCRIPT = """
wrk.method = "POST"
wrk.path = {path}
wrk.body = {body}
wrk.headers = {{}}
{headers}
local expect = {expect}
local threads = {{}}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  missing = 0
  first = ""
  statuses = {{}}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  local good = status == 200
    and (expect == "" or (body ~= nil and string.find(body, expect, 1, true) ~= nil))
  if not good then
    if status == 200 then missing = missing + 1 end
    if first == "" then first = tostring(status) .. " " .. string.sub(body or "", 1, 300) end
  end
end

local function quoted(s)
  return '"' .. string.gsub(s, '[%c"\\\\]', function(c)
    return string.format("\\\\u%04x", string.byte(c))
  end) .. '"'
end

function done(summary, latency, requests)
  local missing_total, first_error, by_status = 0, "", {{}}
  for _, thread in ipairs(threads) do
    missing_total = missing_total + thread:get("missing")
    if first_error == "" then first_error = thread:get("first") end
    for status, n in pairs(thread:get("statuses")) do
      by_status[status] = (by_status[status] or 0) + n
    end
  end
  local counted = {{}}
  for status, n in pairs(by_status) do
    table.insert(counted, string.format('"%d": %d', status, n))
  end
  local e = summary.errors
  local out = io.open({out}, "w")
  out:write(string.format(
    '{{"requests": %d, "duration_us": %d, "status_errors": %d, "socket_errors": %d, ' ..
    '"missing": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, ' ..
    '"first_error": %s, "statuses": {{%s}}}}',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    missing_total, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, quoted(first_error), table.concat(counted, ", ")))
  out:close()
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def supports(job: Job) -> bool:
    return len(job.requests) == 1 and not job.opening and job.max_requests == 0


def _lua(text: str) -> str:
    """A Lua string literal of `text` (long brackets would need a level; escapes are exact)."""
    escaped = re.sub(r'[\x00-\x1f"\\\x7f]', lambda m: f"\\{ord(m.group()):03d}", text)
    return f'"{escaped}"'


def script(job: Job, out: Path) -> str:
    request = job.requests[0]
    headers = "\n".join(
        f"wrk.headers[{_lua(name)}] = {_lua(value)}" for name, value in request.headers.items()
    )
    return _SCRIPT.format(
        path=_lua(request.path),
        body=_lua(request.body),
        headers=headers,
        expect=_lua(job.expect),
        out=_lua(str(out)),
    )


def run(job: Job, prefix: list[str] | None = None) -> Result:
    """Run `job` with wrk (one thread; `prefix` e.g. a `taskset` pinning) and read its
    result. A warm-up, when the job has one, is a wrk run of its own whose answers are
    checked too but not counted. wrk counts whole seconds: each run lasts its seconds
    rounded up."""
    with tempfile.TemporaryDirectory(prefix="elova-wrk-") as folder:
        if job.warmup_seconds > 0:
            _one(job, job.warmup_seconds, Path(folder), prefix)
        return _one(job, job.duration_seconds, Path(folder), prefix)


def _one(job: Job, seconds: float, folder: Path, prefix: list[str] | None) -> Result:
    out = folder / "result.json"
    out.unlink(missing_ok=True)
    lua = folder / "job.lua"
    lua.write_text(script(job, out))
    argv = [*(prefix or []), "wrk", "-t1", f"-c{job.concurrency}",
            f"-d{max(math.ceil(seconds), 1)}s", "--timeout", "10s", "-s", str(lua),
            f"http://{job.host}:{job.port}"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, timeout=seconds + 60, check=False)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    found = json.loads(out.read_text())
    measured_seconds = found["duration_us"] / 1e6
    statuses: dict[str, int] = found["statuses"]
    # As tests/bench/loadgen.py counts: an answer is good when it is a 200 with `expect`.
    completed = statuses.get("200", 0) - found["missing"]
    errors = found["requests"] - completed + found["socket_errors"]
    return Result(
        completed=completed,
        errors=errors,
        seconds=measured_seconds,
        rps=completed / measured_seconds if measured_seconds else 0.0,
        p50_ms=found["p50_us"] / 1000,
        p90_ms=found["p90_us"] / 1000,
        p99_ms=found["p99_us"] / 1000,
        max_ms=found["max_us"] / 1000,
        first_error=found["first_error"],
        statuses=statuses,
    )
