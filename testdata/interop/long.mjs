// Long calls through the official TypeScript MCP SDK client: progress with
// live output, MCP tasks (2025-11-25), and cancellation.
//
//   node long.mjs stdio PYBOX_BINARY
//   node long.mjs http  http://127.0.0.1:PORT/mcp TOKEN SERVER_PID
//
// PYBOX_PLANTED_SECRET is a value the server redacts (the test gives it to
// the server as PYBOX_REDACT_VALUE); the code prints it mid-run. Sandboxes
// are counted with the docker CLI by the server's owner label
// (host/pid/...), so the server must run without a warm pool.
//
// It prints one JSON line {ok, failures, result} and exits non-zero on
// failure.
import { execFileSync } from "node:child_process";
import { hostname } from "node:os";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  GetTaskResultSchema,
  ListTasksResultSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [mode, target, token, pidArg] = process.argv.slice(2);
const secret = process.env.PYBOX_PLANTED_SECRET;
const SECONDS = Number(process.env.PYBOX_LONG_SECONDS ?? 90);
const failures = [];
const result = {};
const check = (ok, what) => { if (!ok) failures.push(what); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const transports = [];
function transport() {
  let t;
  if (mode === "stdio") {
    t = new StdioClientTransport({ command: target, args: [], env: { ...process.env, PYBOX_POOL: "0", PYBOX_REDACT_VALUE: secret }, stderr: "inherit" });
  } else {
    t = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  }
  transports.push(t);
  return t;
}

async function connect(name) {
  const c = new Client({ name, version: "1.0.0" });
  const seen = { progress: [], status: [], other: [] };
  c.fallbackNotificationHandler = async (n) => {
    if (n.method === "notifications/tasks/status") seen.status.push(n.params);
    else seen.other.push(n);
  };
  await c.connect(transport());
  return { c, seen };
}

// The sandboxes of the server under test, by its owner label.
let serverPid = pidArg ? Number(pidArg) : 0;
function sandboxes() {
  const out = execFileSync("docker", ["ps", "-a", "--filter", "label=pybox.managed=true", "--format", '{{.Label "pybox.owner"}}'], { encoding: "utf8" });
  return out.split("\n").filter((l) => l.startsWith(`${hostname()}/${serverPid}/`)).length;
}
async function goneWithin(ms) {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (sandboxes() === 0) return Date.now() - start;
    await sleep(50);
  }
  return -1;
}

const counting = `import time\nfor i in range(${SECONDS}):\n    print(i, flush=True)\n    if i == ${Math.floor(SECONDS / 2)}:\n        print("the key is ${secret}", flush=True)\n    time.sleep(1)\n`;
const expectedStdout = Array.from({ length: SECONDS }, (_, i) =>
  `${i}\n` + (i === Math.floor(SECONDS / 2) ? "the key is [REDACTED:known_secret]\n" : "")).join("");
const fourFields = (sc) => ["stdout", "stderr", "exit_code", "execution_time"].every((k) => k in (sc ?? {}));

// 1. A call as long as SECONDS with a 60 s request timeout, kept alive by
// progress.
async function progressCall(a) {
  const notes = [];
  const t0 = Date.now();
  const res = await a.c.callTool({ name: "run_python", arguments: { code: counting, timeout: 120 } }, CallToolResultSchema, {
    timeout: 60000,
    resetTimeoutOnProgress: true,
    maxTotalTimeout: 200000,
    onprogress: (p) => notes.push({ at: Date.now() - t0, ...p }),
  });
  const sc = res.structuredContent ?? {};
  check(sc.exit_code === 0, `progress call: exit_code 0 (got ${sc.exit_code}: ${JSON.stringify(sc.stderr)})`);
  check(sc.stdout === expectedStdout, `progress call: stdout is the numbers, the secret redacted (got ${JSON.stringify(sc.stdout?.slice(0, 200))})`);
  check(notes.length >= 15, `progress call: at least 15 progress notifications (got ${notes.length})`);
  const messages = notes.map((n) => n.message ?? "").join("\n");
  const numbers = messages.split("\n").filter((l) => /^\d+$/.test(l)).map(Number);
  check(numbers.every((n, i) => i === 0 || n > numbers[i - 1]), `progress call: the numbers come in order (got ${numbers.join(",")})`);
  check(numbers.length >= SECONDS * 0.9, `progress call: the messages show the numbers (got ${numbers.length} of ${SECONDS})`);
  check(!messages.includes(secret), "progress call: no message shows the planted secret");
  check(messages.includes("the key is [REDACTED:known_secret]"), "progress call: a message shows it redacted");
  check(notes.every((n, i) => i === 0 || n.progress > notes[i - 1].progress), "progress call: progress grows");
  check(notes.every((n) => n.total === 120), "progress call: total is the timeout");
  const gaps = notes.map((n, i) => (i === 0 ? n.at : n.at - notes[i - 1].at));
  check(Math.max(...gaps) <= 5000, `progress call: never 5 s without a notification (longest gap ${Math.max(...gaps)} ms)`);
  check(notes.every((n) => (n.message ?? "").length <= 2048), "progress call: messages are bounded");
  result.progress = { notifications: notes.length, seconds: (Date.now() - t0) / 1000, longest_gap_ms: Math.max(...gaps), first: notes[0]?.message, numbers: numbers.length };
  return res;
}

// 2. The same call as a task, polled to completion, by another connection.
async function taskCall(b, other) {
  const t0 = Date.now();
  const created = await b.c.request({ method: "tools/call", params: { name: "run_python", arguments: { code: counting, timeout: 120 }, task: { ttl: 60000 } } }, CreateTaskResultSchema);
  const createdMs = Date.now() - t0;
  const task = created.task;
  check(createdMs < 2000, `task: created at once (took ${createdMs} ms)`);
  check(task.status === "working", `task: starts working (got ${task.status})`);
  check(typeof task.ttl === "number" && task.ttl >= 120000, `task: its ttl covers the call (got ${task.ttl})`);

  // Another connection sees nothing of it.
  let foreign = "none";
  try {
    await other.c.request({ method: "tasks/get", params: { taskId: task.taskId } }, GetTaskResultSchema);
    foreign = "answered";
  } catch (e) {
    foreign = e.message;
  }
  check(foreign !== "answered", "task: another connection cannot get it");
  try {
    await other.c.request({ method: "tasks/cancel", params: { taskId: task.taskId } }, CancelTaskResultSchema);
    check(false, "task: another connection cannot cancel it");
  } catch {}
  const otherList = await other.c.request({ method: "tasks/list", params: {} }, ListTasksResultSchema);
  check(!otherList.tasks.some((t) => t.taskId === task.taskId), "task: another connection does not list it");
  const ownList = await b.c.request({ method: "tasks/list", params: {} }, ListTasksResultSchema);
  check(ownList.tasks.some((t) => t.taskId === task.taskId), "task: its connection lists it");

  const statuses = [];
  let polls = 0;
  for (;;) {
    await sleep(2000);
    const got = await b.c.request({ method: "tasks/get", params: { taskId: task.taskId } }, GetTaskResultSchema);
    polls++;
    statuses.push(got.status);
    if (["completed", "failed", "cancelled"].includes(got.status)) break;
    if (Date.now() - t0 > 200000) { check(false, "task: ends"); break; }
  }
  check(statuses.at(-1) === "completed", `task: completes (statuses ${[...new Set(statuses)].join(",")})`);
  const res = await b.c.request({ method: "tasks/result", params: { taskId: task.taskId } }, CallToolResultSchema);
  const sc = res.structuredContent ?? {};
  check(fourFields(sc), "task: the result has the four fields");
  check(sc.exit_code === 0 && sc.stdout === expectedStdout, `task: the result is the call's (exit ${sc.exit_code}, stdout ${JSON.stringify(sc.stdout?.slice(0, 80))})`);
  result.task = { created_ms: createdMs, polls, seconds: (Date.now() - t0) / 1000, ttl: task.ttl, statuses: [...new Set(statuses)] };
  return { res, taskId: task.taskId };
}

// The shape of a result: its content types and structured keys.
const shape = (r) => JSON.stringify({
  content: (r.content ?? []).map((c) => c.type),
  keys: Object.keys(r.structuredContent ?? {}).sort(),
  isError: !!r.isError,
  text: Object.keys(JSON.parse(r.content?.[0]?.text ?? "{}")).sort(),
});

const long = `import time\nfor i in range(1000):\n    print(i, flush=True)\n    time.sleep(0.1)\n`;

// 3. Cancelling a running task stops the code and removes its sandbox.
async function cancelTask(b) {
  const created = await b.c.request({ method: "tools/call", params: { name: "run_python", arguments: { code: long, timeout: 120 }, task: {} } }, CreateTaskResultSchema);
  const id = created.task.taskId;
  await sleep(3000);
  check(sandboxes() === 1, `cancel task: one sandbox runs it (got ${sandboxes()})`);
  const t0 = Date.now();
  const cancelled = await b.c.request({ method: "tasks/cancel", params: { taskId: id } }, CancelTaskResultSchema);
  check(cancelled.status === "cancelled", `cancel task: it is cancelled (got ${cancelled.status})`);
  const gone = await goneWithin(10000);
  const total = gone < 0 ? -1 : Date.now() - t0;
  check(total >= 0 && total <= 2000, `cancel task: the sandbox is gone within 2 s (took ${total} ms)`);
  const got = await b.c.request({ method: "tasks/get", params: { taskId: id } }, GetTaskResultSchema);
  check(got.status === "cancelled", `cancel task: it stays cancelled (got ${got.status})`);
  result.cancel_task_ms = total;
}

// 4. notifications/cancelled (an aborted request) does the same.
async function cancelCall(a) {
  const ac = new AbortController();
  const p = a.c.callTool({ name: "run_python", arguments: { code: long, timeout: 120 } }, CallToolResultSchema, { signal: ac.signal }).catch((e) => e);
  await sleep(3000);
  check(sandboxes() === 1, `cancel call: one sandbox runs it (got ${sandboxes()})`);
  const t0 = Date.now();
  ac.abort("the user stopped it");
  await p;
  const gone = await goneWithin(10000);
  const total = gone < 0 ? -1 : Date.now() - t0;
  check(total >= 0 && total <= 2000, `cancel call: the sandbox is gone within 2 s (took ${total} ms)`);
  result.cancel_call_ms = total;
}

// 5. A plain call hears nothing but its result.
async function plainCall(a) {
  const before = a.seen.other.length;
  const res = await a.c.callTool({ name: "run_python", arguments: { code: "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(1)\n" } });
  check(res.structuredContent?.stdout === "0\n1\n2\n3\n4\n5\n6\n7\n", "plain call: its stdout");
  check(a.seen.other.slice(before).every((n) => n.method !== "notifications/progress"), "plain call: no progress notification");
  return res;
}

try {
  const a = await connect("pybox-long-a");
  const b = await connect("pybox-long-b");
  if (mode === "stdio") serverPid = transports[0].pid; // a's server; b has its own
  const tools = await a.c.listTools();
  const tool = tools.tools.find((t) => t.name === "run_python");
  check(tool?.execution?.taskSupport === "optional", `run_python declares task support (got ${JSON.stringify(tool?.execution)})`);
  check(a.c.getServerCapabilities()?.tasks?.requests?.tools?.call !== undefined, "the server declares tool-call tasks");

  if (mode === "stdio") {
    // Each stdio client has its own server: the task runs on a's, and the
    // other connection is a second client of the same process... which
    // stdio cannot have; b is then only a second server.
    const [p, t] = await Promise.all([progressCall(a), taskCall(a, b)]);
    check(shape(p) === shape(t.res), `task result shaped as a plain call's (${shape(p)} vs ${shape(t.res)})`);
  } else {
    const [p, t] = await Promise.all([progressCall(a), taskCall(b, a)]);
    check(shape(p) === shape(t.res), `task result shaped as a plain call's (${shape(p)} vs ${shape(t.res)})`);
    check(!a.seen.status.some((s) => s.taskId === t.taskId), "task: another connection hears no status of it");
    check(b.seen.status.some((s) => s.taskId === t.taskId && s.status === "completed"), "task: its connection hears it complete");
  }
  await cancelTask(a);
  await cancelCall(a);
  await plainCall(a);
} catch (e) {
  failures.push(`error: ${e?.stack ?? e}`);
}
for (const t of transports) await t.close().catch(() => {});
console.log(JSON.stringify({ ok: failures.length === 0, failures, result }));
process.exit(failures.length === 0 ? 0 : 1);
