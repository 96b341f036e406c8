// What every view shares: the connection to the host (the SDK's App over postMessage), the
// host's theme and style variables, the tool result as data, and text-only DOM building
// (customer text never becomes markup).
import "./jitless";
import {
  App,
  applyDocumentTheme,
  applyHostStyleVariables,
  type McpUiHostContext,
} from "@modelcontextprotocol/ext-apps";

export type Json = Record<string, any>;
export type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { class?: string; title?: string; [attr: string]: string | undefined } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/** The structured result of a tools/call, or the error text it carried. */
export function resultData(result: { structuredContent?: unknown; content?: unknown; isError?: boolean }):
  | { ok: true; data: Json }
  | { ok: false; message: string } {
  const text = Array.isArray(result.content)
    ? result.content.map((c: any) => (c && c.type === "text" ? String(c.text) : "")).join("\n")
    : "";
  if (result.isError) return { ok: false, message: errorText(result, text) };
  if (result.structuredContent && typeof result.structuredContent === "object") {
    return { ok: true, data: result.structuredContent as Json };
  }
  try {
    return { ok: true, data: JSON.parse(text) as Json };
  } catch {
    return { ok: false, message: text || "The tool returned no data." };
  }
}

function errorText(result: { structuredContent?: unknown }, text: string): string {
  const s = result.structuredContent as Json | undefined;
  const error = s && typeof s.error === "object" ? s.error : s;
  if (error && typeof error.message === "string") return error.message;
  return text || "The tool call failed.";
}

let zone: string | undefined;
let locale: string | undefined;

export function setTimeZone(tz: string | undefined): void {
  zone = validZone(tz) ?? zone;
}

function validZone(tz: string | undefined): string | undefined {
  if (!tz) return undefined;
  try {
    new Intl.DateTimeFormat("en", { timeZone: tz });
    return tz;
  } catch {
    return undefined;
  }
}

export function timeZone(): string {
  return zone ?? Intl.DateTimeFormat().resolvedOptions().timeZone ?? "UTC";
}

export function formatDateTime(iso: string | null | undefined, withSeconds = false): string {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return new Intl.DateTimeFormat(locale, {
    timeZone: timeZone(),
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    second: withSeconds ? "2-digit" : undefined,
  }).format(date);
}

export function formatDay(iso: string, period: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const opts: Intl.DateTimeFormatOptions =
    period === "today"
      ? { hour: "2-digit", minute: "2-digit" }
      : period === "all"
        ? { year: "numeric", month: "short" }
        : { month: "short", day: "numeric" };
  return new Intl.DateTimeFormat(locale, { timeZone: timeZone(), ...opts }).format(date);
}

export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s - m * 60)} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m - h * 60} min`;
}

export function formatCount(n: number | null | undefined): string {
  return n === null || n === undefined ? "—" : new Intl.NumberFormat(locale).format(n);
}

/** An exact decimal USD amount as text (never through a float: the tool sends a string). */
export function formatUsd(amount: string): string {
  const [whole, fraction = ""] = amount.split(".");
  const digits = fraction.replace(/0+$/, "");
  const shown = digits.length <= 2 ? digits.padEnd(2, "0") : digits.slice(0, 6);
  return `$${whole}.${shown}${digits.length > 6 ? "…" : ""}`;
}

export const STATUS_LABEL: Record<string, string> = {
  success: "succeeded",
  error: "failed",
  crashed: "crashed",
  canceled: "canceled",
  new: "new",
  running: "running",
  waiting: "waiting",
  unknown: "unknown",
};

export function statusBadge(status: string): HTMLElement {
  const kind = status === "success" ? "ok" : status === "error" || status === "crashed" ? "bad" : "other";
  return el("span", { class: `badge ${kind}` }, STATUS_LABEL[status] ?? status);
}

export function notice(kind: "warn" | "info" | "error", ...children: Child[]): HTMLElement {
  return el("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "note" }, ...children);
}

function applyContext(ctx: McpUiHostContext | undefined): void {
  if (!ctx) return;
  if (ctx.theme) applyDocumentTheme(ctx.theme);
  if (ctx.styles?.variables) applyHostStyleVariables(ctx.styles.variables);
  if (ctx.locale) locale = ctx.locale;
  if (ctx.timeZone && !zone) zone = validZone(ctx.timeZone);
  // Host fonts are not applied: they may name another origin, and a view loads nothing.
}

/** Connect to the host and render each tool result it hands over with `render`. */
export function start(
  name: string,
  root: HTMLElement,
  render: (data: Json, app: App, input: Json) => void,
): App {
  const app = new App({ name, version: "1" }, {}, { autoResize: true });
  let input: Json = {};
  app.ontoolinput = (params) => {
    input = (params.arguments as Json) ?? {};
  };
  app.ontoolresult = (result) => {
    const got = resultData(result as any);
    root.replaceChildren();
    if (!got.ok) root.append(notice("error", got.message));
    else {
      try {
        render(got.data, app, input);
      } catch (err) {
        root.replaceChildren(notice("error", `This result could not be shown: ${String(err)}`));
      }
    }
    document.body.dataset.ready = "true";
  };
  app.ontoolcancelled = (params) => {
    root.replaceChildren(notice("info", `The tool call was cancelled${params.reason ? `: ${params.reason}` : "."}`));
  };
  app.onhostcontextchanged = (ctx) => applyContext({ ...app.getHostContext(), ...ctx });
  app.onteardown = async () => ({});
  app.connect().then(
    () => applyContext(app.getHostContext()),
    (err: unknown) => root.replaceChildren(notice("error", `Could not reach the host: ${String(err)}`)),
  );
  return app;
}
