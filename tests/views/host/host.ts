// A web host as the MCP Apps spec describes one, built on the SDK's AppBridge: the view's
// HTML goes to a sandbox proxy on another origin, which runs it in an inner srcdoc frame
// under the CSP its resource declares. Calls go to the test server's /relay, which sends
// them to the running Elova service with the person's token (as a real host proxies them).
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

type Json = Record<string, any>;
const w = window as any;
w.calls = [] as Json[];
w.events = [] as string[];

async function relay(method: string, params: Json): Promise<Json> {
  const resp = await fetch("/relay", { method: "POST", body: JSON.stringify({ method, params }) });
  const answer = await resp.json();
  if (answer.error) throw new Error(answer.error.message);
  return answer.result;
}

// toolInfo: whether the host context names the tool call that opened the view (the spec's
// hostContext.toolInfo, its definition from tools/list); without it the view goes by the
// result's shape.
w.runCase = async (c: { uri: string; tool: string; arguments: Json; theme: "light" | "dark"; sandbox: string; toolInfo: boolean }) => {
  document.body.className = c.theme;
  const read = await relay("resources/read", { uri: c.uri });
  const content = read.contents[0];
  const context: Json = { theme: c.theme, platform: "web", locale: "en-US", displayMode: "inline" };
  if (c.toolInfo) {
    const listed = await relay("tools/list", {});
    context.toolInfo = { id: 1, tool: listed.tools.find((t: Json) => t.name === c.tool) };
  }
  const frame = document.createElement("iframe");
  frame.id = "frame";
  frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
  frame.src = c.sandbox;
  document.getElementById("slot")!.append(frame);
  const bridge = new AppBridge(
    null,
    { name: "elova-test-host", version: "1" },
    { serverTools: {}, logging: {} },
    { hostContext: context },
  );
  bridge.oncalltool = async (params) => {
    w.calls.push(params);
    return (await relay("tools/call", params)) as any;
  };
  bridge.onsizechange = ({ height }) => {
    if (height) frame.style.height = `${Math.ceil(height)}px`;
  };
  bridge.onloggingmessage = (params) => w.events.push(`log: ${JSON.stringify(params)}`);
  bridge.onsandboxready = () => {
    w.events.push("sandbox-ready");
    bridge.sendSandboxResourceReady({ html: content.text, csp: content._meta?.ui?.csp });
  };
  bridge.oninitialized = async () => {
    w.events.push("initialized");
    bridge.sendToolInput({ arguments: c.arguments });
    const result = await relay("tools/call", { name: c.tool, arguments: c.arguments });
    bridge.sendToolResult(result as any);
    w.events.push("result-sent");
  };
  await bridge.connect(new PostMessageTransport(frame.contentWindow!, frame.contentWindow!));
};
