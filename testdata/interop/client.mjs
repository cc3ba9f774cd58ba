// Drives pybox with the official TypeScript MCP SDK client.
//
//   node client.mjs stdio PYBOX_BINARY
//   node client.mjs http  http://127.0.0.1:PORT/mcp  [TOKEN]
//   node client.mjs sse   http://127.0.0.1:PORT/sse  [TOKEN]
//
// It lists the tools, checks run_python's schemas, runs one computation and
// checks the result; it prints one JSON line and exits non-zero on failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";

const [mode, target, token] = process.argv.slice(2);
const headers = token ? { Authorization: `Bearer ${token}` } : {};
let transport;
switch (mode) {
  case "stdio":
    transport = new StdioClientTransport({ command: target, args: [], env: process.env, stderr: "inherit" });
    break;
  case "http":
    transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
    break;
  case "sse":
    transport = new SSEClientTransport(new URL(target), {
      requestInit: { headers },
      eventSourceInit: { fetch: (url, init) => fetch(url, { ...init, headers: { ...(init?.headers ?? {}), ...headers } }) },
    });
    break;
  default:
    console.error(`unknown mode ${mode}`);
    process.exit(2);
}

const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); };

const client = new Client({ name: "pybox-interop", version: "1.0.0" });
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === "run_python");
  check(tool, "tools/list has run_python");
  check(tool?.inputSchema?.type === "object" && tool.inputSchema.properties?.code?.type === "string", "inputSchema describes code");
  check(tool?.outputSchema?.type === "object" && ["stdout", "stderr", "exit_code", "execution_time"].every((k) => tool.outputSchema.required?.includes(k)), "outputSchema requires the four fields");

  // callTool validates structuredContent against the tool's outputSchema.
  const res = await client.callTool({ name: "run_python", arguments: { code: "print(round(47/1283*100, 3))" } });
  const sc = res.structuredContent ?? {};
  check(sc.stdout === "3.663\n", `stdout is "3.663\\n" (got ${JSON.stringify(sc.stdout)})`);
  check(sc.exit_code === 0, `exit_code 0 (got ${sc.exit_code})`);
  check(typeof sc.execution_time === "number" && sc.execution_time > 0, `positive execution_time (got ${sc.execution_time})`);
  check(res.isError !== true, "isError is not set");
  const text = res.content?.find((c) => c.type === "text")?.text;
  check(text && JSON.parse(text).stdout === "3.663\n", "the text block carries the same JSON");

  const bad = await client.callTool({ name: "run_python", arguments: { code: 42 } });
  check(bad.isError === true && bad.structuredContent?.error === "invalid_input", "bad input is an in-band invalid_input");

  console.log(JSON.stringify({ mode, ok: failures.length === 0, failures, result: sc }));
} catch (err) {
  failures.push(String(err?.stack ?? err));
  console.log(JSON.stringify({ mode, ok: false, failures }));
} finally {
  await client.close().catch(() => {});
}
process.exit(failures.length === 0 ? 0 : 1);
