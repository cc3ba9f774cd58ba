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

  // Files in, files and charts out.
  const csv = "region,amount\nnorth,10.5\nsouth,20.25\neast,30\n";
  const files = await client.callTool({
    name: "run_python",
    arguments: {
      code: [
        "import pandas as pd, matplotlib.pyplot as plt",
        "df = pd.read_csv('/mnt/user-data/sales.csv')",
        "print(df.amount.sum())",
        "fig = plt.figure(figsize=(4, 3), dpi=100)",
        "plt.plot(df.amount)",
        "fig.savefig('/mnt/outputs/plot.png')",
        "plt.figure(figsize=(6, 2), dpi=100)",
        "plt.bar(df.region, df.amount)",
        "plt.show()",
      ].join("\n"),
      files: [{ path: "sales.csv", content: Buffer.from(csv).toString("base64"), encoding: "base64" }],
    },
  });
  const fsc = files.structuredContent ?? {};
  check(fsc.stdout === "60.75\n", `the CSV is summed by pandas (got ${JSON.stringify(fsc.stdout)} ${JSON.stringify(fsc.stderr)})`);
  const images = (files.content ?? []).filter((c) => c.type === "image");
  const pngSize = (b64) => {
    const b = Buffer.from(b64, "base64");
    const sig = b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    return sig && b.subarray(12, 16).toString() === "IHDR" ? [b.readUInt32BE(16), b.readUInt32BE(20)] : null;
  };
  const sizes = images.map((i) => (i.mimeType === "image/png" ? pngSize(i.data) : null));
  // plt.show() shows every open figure, as a notebook does: the saved one too.
  check(images.length === 3, `three image contents (got ${images.length})`);
  check(sizes.some((s) => s && s[0] === 400 && s[1] === 300), `the saved plot is a 400x300 PNG (got ${JSON.stringify(sizes)})`);
  check(sizes.some((s) => s && s[0] === 600 && s[1] === 200), `the figure shown with plt.show() is a 600x200 PNG (got ${JSON.stringify(sizes)})`);
  const listed = (fsc.files ?? []).map((f) => `${f.path}:${f.mime_type}`).sort();
  check(JSON.stringify(listed) === JSON.stringify(["figure_1.png:image/png", "figure_2.png:image/png", "plot.png:image/png"]), `files lists the PNGs (got ${JSON.stringify(listed)})`);

  // Sessions: state kept across calls, apart from other sessions.
  const run = async (args) => (await client.callTool({ name: "run_python", arguments: args })).structuredContent ?? {};
  const s1 = await run({ code: "x = 41\nimport pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nopen('/tmp/kept.txt', 'w').write('kept')", session_id: "new" });
  const sid = s1.session_id;
  check(typeof sid === "string" && sid.length === 32, `a new session has an id (got ${JSON.stringify(s1)})`);
  const s2 = await run({ code: "print(x + 1)", session_id: sid });
  check(s2.stdout === "42\n", `x + 1 in the same session is 42 (got ${JSON.stringify(s2)})`);
  const s3 = await run({ code: "print(df.a.sum(), pd.__name__, open('/tmp/kept.txt').read())", session_id: sid });
  check(s3.stdout === "6 pandas kept\n", `call 3 sees call 1's DataFrame, import and file (got ${JSON.stringify(s3)})`);
  const other = await run({ code: "import os\nprint('x' in globals(), 'df' in globals(), os.path.exists('/tmp/kept.txt'))", session_id: "new" });
  check(other.stdout === "False False False\n", `a second session sees none of it (got ${JSON.stringify(other)})`);
  await client.callTool({ name: "python_sessions", arguments: { end: "all" } });

  console.log(JSON.stringify({ mode, ok: failures.length === 0, failures, result: sc, files: fsc.files }));
} catch (err) {
  failures.push(String(err?.stack ?? err));
  console.log(JSON.stringify({ mode, ok: false, failures }));
} finally {
  await client.close().catch(() => {});
}
process.exit(failures.length === 0 ? 0 : 1);
