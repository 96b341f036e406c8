// The one document behind the three ui:// resources: it picks its view at run time. The
// host's `toolInfo` (hostContext, the tool call that opened it) names the tool; a tool of
// ours whose result has that view's shape decides. Else (no toolInfo, another tool, or a
// result of another shape) the result's shape alone: an execution, a stats answer with its
// buckets, a page of executions. Anything else is said, not guessed (docs/views.md).
import type { App } from "@modelcontextprotocol/ext-apps";
import { notice, start, type Json } from "./common";
import { renderExecution } from "./execution-render";
import { renderStats } from "./execution-stats";
import { renderExecutions } from "./executions";

interface View {
  tool: string;
  title: string;
  fits: (data: Json) => boolean;
  render: (root: HTMLElement, data: Json, app: App, input: Json) => void;
}

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

// In the order the shapes are tried (each shape has a member the others lack).
const VIEWS: readonly View[] = [
  {
    tool: "get_execution",
    title: "Execution",
    fits: (d) => isObject(d.execution) && typeof d.execution.id === "string",
    render: (root, data) => renderExecution(root, data),
  },
  {
    tool: "get_execution_stats",
    title: "Execution statistics",
    fits: (d) => Array.isArray(d.buckets) && isObject(d.totals),
    render: (root, data) => renderStats(root, data),
  },
  {
    tool: "get_many_executions",
    title: "Executions",
    fits: (d) => Array.isArray(d.executions),
    render: renderExecutions,
  },
];

/** The view for `data` and what chose it: the host's tool if the data fits its view, else
 * the data's shape. */
function pick(data: Json, tool: string | undefined): [View, "toolInfo" | "shape"] | undefined {
  const named = VIEWS.find((v) => v.tool === tool);
  if (named?.fits(data)) return [named, "toolInfo"];
  const shaped = VIEWS.find((v) => v.fits(data));
  return shaped && [shaped, "shape"];
}

const root = document.getElementById("app")!;
start("elova-views", root, (data, app, input) => {
  const tool = app.getHostContext()?.toolInfo?.tool?.name;
  const picked = pick(data, typeof tool === "string" ? tool : undefined);
  if (!picked) {
    root.append(notice("error", "This tool result is not one these views show (an execution, its statistics or a page of executions)."));
    return;
  }
  const [view, by] = picked;
  document.title = `${view.title} · Elova`;
  // What a test (or a person with devtools) can read: the view and what chose it.
  document.body.dataset.view = view.tool;
  document.body.dataset.viewBy = by;
  view.render(root, data, app, input);
});
