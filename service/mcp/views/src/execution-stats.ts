// get_execution_stats: the period's buckets as stacked bars (succeeded, failed, other) in
// the answer's time zone, the totals beside them, and the same numbers as a table.
import { el, formatCount, formatDateTime, formatDay, formatUsd, setTimeZone, type Json } from "./common";

const SVG = "http://www.w3.org/2000/svg";
const PERIOD: Record<string, string> = { today: "Today", "7d": "Last 7 days", "30d": "Last 30 days", all: "All retained history" };

function svg(tag: string, attrs: Record<string, string>): SVGElement {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function chart(buckets: Json[], period: string): Element {
  const max = Math.max(1, ...buckets.map((b) => b.success + b.failed + b.other));
  const w = 100 / Math.max(buckets.length, 1);
  const box = svg("svg", { viewBox: "0 0 100 50", preserveAspectRatio: "none", class: "chart", role: "img" });
  box.setAttribute("aria-label", "Executions per bucket: succeeded, failed, other");
  buckets.forEach((b, i) => {
    let y = 50;
    for (const [key, cls] of [["success", "ok"], ["failed", "bad"], ["other", "other"]] as const) {
      const h = (b[key] / max) * 48;
      if (h <= 0) continue;
      y -= h;
      const rect = svg("rect", { x: (i * w + w * 0.12).toFixed(3), y: y.toFixed(3), width: (w * 0.76).toFixed(3), height: h.toFixed(3), class: cls });
      const title = svg("title", {});
      title.textContent = `${formatDay(b.at, period)}: ${b[key]} ${key === "success" ? "succeeded" : key}`;
      rect.append(title);
      box.append(rect);
    }
  });
  const labels = el("div", { class: "axis" });
  const step = Math.ceil(buckets.length / 6);
  buckets.forEach((b, i) => {
    if (i % step === 0) labels.append(el("span", { style: `left:${(i * w).toFixed(2)}%` }, formatDay(b.at, period)));
  });
  return el("figure", { class: "figure" }, box, labels);
}

export function renderStats(root: HTMLElement, data: Json): void {
  setTimeZone(data.timeZone);
  const totals = data.totals as Json;
  const buckets = (data.buckets ?? []) as Json[];
  const period = String(data.period);
  root.append(
    el(
      "header",
      { class: "head" },
      el("h1", { class: "title" }, `Executions · ${PERIOD[period] ?? period}`),
      el("p", { class: "sub" }, `Buckets in ${data.timeZone} · as of ${formatDateTime(data.asOf)}`),
    ),
  );
  const tiles: [string, number, string][] = [
    ["Executions", totals.executions, ""],
    ["Succeeded", totals.success, "ok"],
    ["Failed", totals.failed, "bad"],
    ["Other", totals.other, "other"],
  ];
  root.append(
    el(
      "div",
      { class: "tiles", "data-testid": "totals" },
      ...tiles.map(([label, n, cls]) => el("div", { class: `tile ${cls}` }, el("span", { class: "n" }, formatCount(n)), el("span", { class: "l" }, label))),
    ),
  );
  const extra: string[] = [];
  if (totals.undatedExecutions) extra.push(`${formatCount(totals.undatedExecutions)} undated executions are in the totals but in no bucket.`);
  if (totals.excludedExecutions) extra.push(`${formatCount(totals.excludedExecutions)} executions were excluded.`);
  if (data.cost) extra.push(`Model-token reference cost: ${formatUsd(data.cost.amount)} (estimated, OpenRouter; not an invoice).`);
  for (const line of extra) root.append(el("p", { class: "sub" }, line));
  if (!buckets.length) {
    root.append(el("p", { class: "notice info" }, "No dated executions in this period."));
    return;
  }
  root.append(
    chart(buckets, period),
    el("div", { class: "legend" }, el("span", { class: "key ok" }, "succeeded"), el("span", { class: "key bad" }, "failed"), el("span", { class: "key other" }, "other")),
  );
  const table = el(
    "table",
    { class: "grid", "data-testid": "buckets" },
    el("thead", {}, el("tr", {}, el("th", {}, "Bucket"), el("th", { class: "num" }, "Succeeded"), el("th", { class: "num" }, "Failed"), el("th", { class: "num" }, "Other"))),
    el(
      "tbody",
      {},
      ...buckets.map((b) =>
        el("tr", {}, el("td", {}, formatDay(b.at, period)), el("td", { class: "num" }, formatCount(b.success)), el("td", { class: "num" }, formatCount(b.failed)), el("td", { class: "num" }, formatCount(b.other))),
      ),
    ),
  );
  root.append(el("details", {}, el("summary", {}, "Numbers per bucket"), table));
}
