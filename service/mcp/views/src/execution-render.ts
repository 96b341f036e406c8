// One execution (get_execution's result) as a person reads it: the header, the diagnostic
// text, the node runs in order on a timeline (the failing run marked), model tokens per run
// and the execution's model-token reference cost, and what the report leaves out.
import {
  el,
  formatCount,
  formatDateTime,
  formatDuration,
  formatUsd,
  notice,
  statusBadge,
  type Json,
} from "./common";

interface Run {
  node: Json;
  run: Json;
  start: number | null;
  failing: boolean;
  tokens: number | null;
  models: string[];
}

const FAILED = new Set(["error", "crashed"]);

function runsOf(history: Json): Run[] {
  const failure = history.failure as Json | null;
  const runs: Run[] = [];
  for (const node of (history.nodes ?? []) as Json[]) {
    for (const run of (node.runs ?? []) as Json[]) {
      const start = run.startedAt ? Date.parse(run.startedAt) : NaN;
      const usage = (run.usage ?? []) as Json[];
      let tokens: number | null = null;
      for (const u of usage) {
        const t = u.totalTokens ?? (u.inputTokens ?? 0) + (u.outputTokens ?? 0);
        if (typeof t === "number") tokens = (tokens ?? 0) + t;
      }
      const models = [...new Set(usage.map((u) => u.model).filter((m): m is string => !!m))];
      const failing = failure
        ? failure.nodeId === node.id && failure.runId === run.id
        : FAILED.has(run.status);
      runs.push({ node, run, start: Number.isNaN(start) ? null : start, failing, tokens, models });
    }
  }
  if (history.order !== "recorded") {
    // No recorded order: by start time, the runs without one last.
    runs.sort((a, b) => (a.start ?? Infinity) - (b.start ?? Infinity));
  }
  return runs;
}

function header(execution: Json): HTMLElement {
  const name = execution.workflowName + (execution.workflowNameTruncated ? "…" : "");
  const cost = execution.cost as Json | null;
  const coverage = execution.costCoverage as Json | undefined;
  const facts: [string, string][] = [
    ["Instance", execution.instanceName],
    ["Started", formatDateTime(execution.startedAt ?? execution.createdAt, true)],
    ["Duration", formatDuration(execution.durationMs)],
    [
      "Reference cost",
      cost ? `${formatUsd(cost.amount)} (estimated, OpenRouter)` : "none retained",
    ],
  ];
  if (coverage && coverage.state !== "complete" && coverage.state !== "not_applicable") {
    facts.push(["Cost coverage", coverage.state]);
  }
  return el(
    "header",
    { class: "head" },
    el("h1", { class: "title", "data-testid": "workflow-name" }, name, " ", statusBadge(execution.status)),
    el(
      "dl",
      { class: "facts" },
      ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]),
    ),
  );
}

function diagnostics(history: Json, runs: Run[]): HTMLElement[] {
  const out: HTMLElement[] = [];
  const error = history.executionError as Json | null;
  if (error) {
    out.push(
      el(
        "div",
        { class: "diagnostic", role: "note", "data-testid": "execution-error" },
        el("strong", {}, error.name ? `${error.name}: ` : "Execution error: "),
        el("span", { class: "mono" }, error.message),
      ),
    );
  }
  const failing = runs.find((r) => r.failing && r.run.error);
  if (failing) {
    out.push(
      el(
        "div",
        { class: "diagnostic", role: "note" },
        el("strong", {}, `Failed at ${failing.node.name}: `),
        el("span", { class: "mono" }, failing.run.error.message),
      ),
    );
  }
  return out;
}

function coverageNotes(history: Json, runs: Run[]): HTMLElement[] {
  const out: HTMLElement[] = [];
  if (history.availability === undefined) {
    out.push(notice("info", "No history report was retained for this execution."));
  } else if (history.availability !== "available") {
    const reason = history.reason ? ` (${history.reason})` : "";
    out.push(notice("warn", `History is ${history.availability}${reason}: the runs below are what was retained.`));
  }
  if (history.truncated) {
    out.push(
      notice(
        "warn",
        "History truncated: the report was bounded, so some nodes, runs or messages are " +
          "missing or shortened here. What is not shown was not retained in this answer.",
      ),
    );
  }
  if (history.order !== "recorded" && runs.length > 1) {
    out.push(notice("info", "The recorded order is unknown: runs are sorted by start time."));
  }
  return out;
}

function timeline(runs: Run[], execution: Json): HTMLElement {
  const starts = runs.map((r) => r.start).filter((s): s is number => s !== null);
  const execStart = execution.startedAt ? Date.parse(execution.startedAt) : NaN;
  const t0 = Math.min(...starts, Number.isNaN(execStart) ? Infinity : execStart);
  const ends = runs.map((r) => (r.start ?? t0) + (r.run.durationMs ?? 0));
  const execEnd = Number.isNaN(execStart) ? -Infinity : execStart + (execution.durationMs ?? 0);
  const span = Math.max(Math.max(...ends, execEnd) - t0, 1);
  const list = el("ol", { class: "timeline", "aria-label": "Node runs in order" });
  runs.forEach((r, index) => {
    const bar = el("div", { class: "track" });
    if (r.start !== null && Number.isFinite(t0)) {
      const left = ((r.start - t0) / span) * 100;
      const width = Math.max(((r.run.durationMs ?? 0) / span) * 100, 0.6);
      bar.append(
        el("span", {
          class: `bar ${r.failing ? "bad" : r.run.status === "success" ? "ok" : "other"}`,
          style: `left:${left.toFixed(3)}%;width:${Math.min(width, 100 - left).toFixed(3)}%`,
        }),
      );
    }
    const offset = r.start !== null && Number.isFinite(t0) ? `+${formatDuration(r.start - t0)}` : "start not recorded";
    const tokens =
      r.tokens === null
        ? (r.run.usage ?? []).length
          ? "tokens unknown"
          : ""
        : `${formatCount(r.tokens)} tokens${r.models.length ? ` · ${r.models.join(", ")}` : ""}`;
    list.append(
      el(
        "li",
        { class: `run${r.failing ? " failing" : ""}`, "data-testid": "run" },
        el("span", { class: "seq" }, String(index + 1)),
        el(
          "div",
          { class: "what" },
          el("span", { class: "node", "data-testid": "node-name" }, r.node.name),
          " ",
          statusBadge(r.run.status),
          r.failing ? el("span", { class: "marker" }, " ◀ failed here") : null,
          el("div", { class: "sub" }, `${r.node.type} · ${offset} · ${formatDuration(r.run.durationMs)}`),
          tokens ? el("div", { class: "sub tokens" }, tokens) : null,
          r.run.error && !r.failing ? el("div", { class: "sub mono" }, r.run.error.message) : null,
        ),
        bar,
      ),
    );
  });
  return list;
}

export function renderExecution(root: HTMLElement, data: Json): void {
  const execution = data.execution as Json;
  const history = (data.history ?? { nodes: [] }) as Json;
  const runs = runsOf(history);
  const total = runs.reduce<number | null>((sum, r) => (r.tokens === null ? sum : (sum ?? 0) + r.tokens), null);
  root.append(header(execution), ...diagnostics(history, runs), ...coverageNotes(history, runs));
  root.append(
    el(
      "h2",
      {},
      `Node runs (${runs.length})`,
      total !== null ? el("span", { class: "total", "data-testid": "total-tokens" }, ` · ${formatCount(total)} model tokens in total`) : null,
    ),
  );
  if (runs.length) root.append(timeline(runs, execution));
  else if (history.availability !== undefined) {
    root.append(notice("info", "No node runs were retained for this execution."));
  }
  root.append(
    el(
      "p",
      { class: "foot" },
      "Model tokens as the runs reported them; missing usage is unknown, not zero. The " +
        "reference cost is an estimated OpenRouter token valuation, not an invoice.",
    ),
  );
}
