// get_many_executions: the page as a table. A row opens its execution by asking the host
// to call get_execution; "More" asks it to call get_many_executions with nextCursor.
import type { App } from "@modelcontextprotocol/ext-apps";
import { el, formatDateTime, formatDuration, notice, resultData, setTimeZone, statusBadge, type Json } from "./common";
import { renderExecution } from "./execution-render";

function rowOf(item: Json, open: (item: Json) => void): HTMLTableRowElement {
  const name = item.workflowName + (item.workflowNameTruncated ? "…" : "");
  const row = el(
    "tr",
    { class: "row", tabindex: "0", role: "button", "data-testid": "execution-row", "data-id": item.id, title: "Open this execution" },
    el("td", {}, statusBadge(item.status)),
    el("td", {}, el("span", { class: "node" }, name), el("div", { class: "sub narrow" }, item.instanceName)),
    el("td", { class: "wide" }, item.instanceName),
    el("td", {}, formatDateTime(item.startedAt ?? item.createdAt)),
    el("td", { class: "num" }, formatDuration(item.durationMs)),
  );
  row.addEventListener("click", () => open(item));
  row.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      open(item);
    }
  });
  return row;
}

export function renderExecutions(root: HTMLElement, data: Json, app: App, input: Json): void {
  setTimeZone(data.timeZone);
  const list = el("section", {});
  const detail = el("section", { hidden: "" });
  const body = el("tbody", {});
  const status = el("p", { class: "sub", role: "status" });
  let cursor: string | null = data.nextCursor ?? null;
  const more = el("button", { class: "more", type: "button" }, "More executions");

  async function open(item: Json): Promise<void> {
    status.textContent = `Opening ${item.workflowName}…`;
    try {
      const result = await app.callServerTool({ name: "get_execution", arguments: { workspaceId: data.workspaceId, executionId: item.id } });
      const got = resultData(result as any);
      detail.replaceChildren(el("button", { class: "back", type: "button" }, "← All executions"));
      detail.firstElementChild!.addEventListener("click", () => {
        detail.hidden = true;
        list.hidden = false;
      });
      if (got.ok) renderExecution(detail, got.data);
      else detail.append(notice("error", got.message));
      list.hidden = true;
      detail.hidden = false;
      status.textContent = "";
    } catch (err) {
      status.textContent = `The host could not open it: ${String(err)}`;
    }
  }

  function add(items: Json[]): void {
    for (const item of items) body.append(rowOf(item, open));
    more.hidden = !cursor;
  }

  more.addEventListener("click", async () => {
    if (!cursor) return;
    more.disabled = true;
    try {
      const args = { ...input, workspaceId: data.workspaceId, cursor };
      const got = resultData((await app.callServerTool({ name: "get_many_executions", arguments: args })) as any);
      if (got.ok) {
        cursor = got.data.nextCursor ?? null;
        add((got.data.executions ?? []) as Json[]);
      } else status.textContent = got.message;
    } catch (err) {
      status.textContent = `The host could not load more: ${String(err)}`;
    } finally {
      more.disabled = false;
    }
  });

  const items = (data.executions ?? []) as Json[];
  list.append(
    el("header", { class: "head" }, el("h1", { class: "title" }, "Executions"), el("p", { class: "sub" }, `Times in ${data.timeZone}`)),
  );
  if (!items.length) list.append(notice("info", "No executions match."));
  else {
    list.append(
      el(
        "div",
        { class: "scroll" },
        el(
          "table",
          { class: "grid", "data-testid": "executions" },
          el("thead", {}, el("tr", {}, el("th", {}, "Status"), el("th", {}, "Workflow"), el("th", { class: "wide" }, "Instance"), el("th", {}, "Started"), el("th", { class: "num" }, "Duration"))),
          body,
        ),
      ),
    );
  }
  list.append(more, status);
  add(items);
  root.append(list, detail);
}
