// Shared by the benchmark scripts: the Worker in `wrangler dev` on a free port, and percentiles.
import { spawn } from "node:child_process";
import { appendFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer } from "node:net";
import { createInterface } from "node:readline";
import WebSocket from "ws";
import { giteaSignature } from "../src/forge/gitea/signature.ts";

export function freePort() {
  return new Promise((resolve) => {
    const srv = createServer().listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

let bundled;
/** The deploy bundle, built once per process. */
function bundle() {
  bundled ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), "gdr-bundle-"));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    const child = spawn("npx", ["wrangler", "deploy", "--dry-run", "--outdir", dir], {
      stdio: "ignore",
      env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
    });
    const code = await new Promise((r) => child.on("exit", r));
    if (code !== 0) throw new Error(`wrangler deploy --dry-run exited ${code}`);
    return dir;
  })();
  return bundled;
}

/**
 * Starts the Worker with `vars`; resolves once it serves. Collects its JSON log lines. `host`
 * (BENCH_HOST): "wrangler" runs `wrangler dev` (the tests' default), "miniflare" the deploy bundle
 * in workerd without wrangler dev's proxy and inspector (bench/host.mjs; the bench's default).
 */
export async function startWorker(vars, port, host = process.env.BENCH_HOST ?? "wrangler", { inspectorPort, wranglerArgs, r2Dir } = {}) {
  port ??= await freePort();
  // With wranglerArgs (`--config FILE --env NAME`), the file's own vars and .dev.vars are the Worker's: none are added.
  const all = wranglerArgs ? vars : { ...vars, PUBLIC_URL: vars.PUBLIC_URL ?? `http://127.0.0.1:${port}` };
  let child;
  if (host === "miniflare") {
    const env = {
      ...process.env,
      GDR_HOST_BUNDLE: await bundle(),
      GDR_HOST_PORT: String(port),
      GDR_HOST_VARS: JSON.stringify(all),
      ...(inspectorPort ? { BENCH_INSPECTOR_PORT: String(inspectorPort) } : {}),
      ...(r2Dir ? { GDR_HOST_R2: r2Dir } : {}),
    };
    child = spawn(process.execPath, ["bench/host.mjs"], { stdio: ["ignore", "pipe", "pipe"], env, detached: true });
  } else {
    // Its own inspector port, so that several Workers can run side by side (the default is fixed).
    const args = [
      "wrangler",
      "dev",
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(process.env.BENCH_INSPECTOR_PORT ?? (await freePort())),
      "--test-scheduled",
      "--show-interactive-dev-session=false",
      ...(wranglerArgs ?? []),
    ];
    for (const [k, v] of Object.entries(all)) args.push("--var", `${k}:${v}`);
    child = spawn("npx", args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, detached: true });
  }
  const events = [];
  let ready;
  const isReady = new Promise((r) => (ready = r));
  // A Worker that dies under a run leaves its requests unanswered: say so, with its last words.
  const lastLines = [];
  for (const s of [child.stdout, child.stderr]) {
    createInterface({ input: s }).on("line", (line) => {
      if (lastLines.push(line) > 20) lastLines.shift();
      if (process.env.BENCH_LOG) appendFileSync(process.env.BENCH_LOG, `${Date.now()} ${port} ${line}\n`);
      if (/ready on/i.test(line)) ready();
      const i = line.indexOf('{"event"');
      if (i >= 0) {
        try {
          events.push({ ...JSON.parse(line.slice(i)), seenAt: Date.now() });
        } catch {
          // not one of ours
        }
      }
    });
  }
  let stopped = false;
  child.on("exit", (code, signal) => {
    if (!stopped) console.error(`[bench] the Worker on port ${port} exited (code ${code}, signal ${signal}); its last lines:\n${lastLines.join("\n")}`);
  });
  await isReady;
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid,
    events,
    async tick() {
      const path = host === "miniflare" ? "/cdn-cgi/local/scheduled" : "/__scheduled";
      await (await fetch(`http://127.0.0.1:${port}${path}?cron=*+*+*+*+*`)).arrayBuffer();
    },
    stop() {
      stopped = true;
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        // already gone
      }
    },
  };
}

/** CPU seconds used so far by `rootPid` and every process under it, summed by command name (Linux /proc). */
export function treeCpu(rootPid) {
  const out = {};
  for (const p of treeProcs(rootPid)) out[p.comm] = (out[p.comm] ?? 0) + p.ticks / CLOCK_TICKS;
  return out;
}

/** Resident memory (MB) of `rootPid` and every process under it, by command name (Linux /proc). */
export function treeRssMB(rootPid) {
  const out = {};
  for (const p of treeProcs(rootPid)) out[p.comm] = +((out[p.comm] ?? 0) + (p.rssPages * PAGE_BYTES) / 2 ** 20).toFixed(1);
  return out;
}
const PAGE_BYTES = 4096;

/** `rootPid` and its descendants, read from /proc/<pid>/stat. */
function treeProcs(rootPid) {
  const procs = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.push({ pid: Number(name), ppid: Number(f[1]), comm, ticks: Number(f[11]) + Number(f[12]), rssPages: Number(f[21]) });
    } catch {
      // gone meanwhile
    }
  }
  const within = new Set([rootPid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of procs) {
      if (within.has(p.pid) || !within.has(p.ppid)) continue;
      within.add(p.pid);
      grew = true;
    }
  }
  return procs.filter((p) => within.has(p.pid));
}
const CLOCK_TICKS = 100;

/** The machine's CPU counters (/proc/stat): busy share of all cores between two readings. */
export function cpuTimes() {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: f[3] + (f[4] ?? 0), total: f.reduce((a, b) => a + b, 0) };
}
export const busyBetween = (a, b) => 1 - (b.idle - a.idle) / (b.total - a.total);

export function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `fn(i)` for i < n with `concurrency` in flight; returns each call's latency in ms. */
export async function load(n, concurrency, fn) {
  const latencies = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        const t = performance.now();
        await fn(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const elapsed = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { rps: (n / elapsed) * 1000, p50: percentile(latencies, 50), p99: percentile(latencies, 99), elapsedMs: elapsed };
}

/** The fake Gitea's control API for the tenant of `vars`: GET without a body, POST with one; JSON back. */
export function giteaControl(vars) {
  return (what, body) =>
    fetch(`${vars.GITEA_URL}/_control/${what}`, body === undefined ? {} : { method: "POST", body: JSON.stringify(body) }).then((r) => r.json());
}

export const sum = (xs) => xs.reduce((a, b) => a + b, 0);

/** The Worker's CPU so far, in ms: workerd and its host, every process under `pid`. */
export const workerCpuMs = (pid) => sum(Object.values(treeCpu(pid))) * 1_000;

/** NATS operations the counting proxy saw under `tag` so far (publishes, requests, acks). */
export const proxyOps = (proxy, tag) => sum(proxy.counts(tag).byConnection.map((c) => c.pub));

/** Polls `fn` every `everyMs` until it holds (true) or `timeoutMs` passes (false). */
export async function until(fn, timeoutMs, everyMs = 20) {
  const deadline = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return true;
}

/** The inspector of the Worker's isolate (its first target) on `port`: call(method, params) answers the protocol's reply. */
export async function connectInspector(port) {
  const [target] = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => (ws.once("open", resolve), ws.once("error", reject)));
  let id = 0;
  const pending = new Map();
  ws.on("message", (m) => {
    const d = JSON.parse(String(m));
    pending.get(d.id)?.(d);
    pending.delete(d.id);
  });
  return {
    call: (method, params = {}) => new Promise((resolve) => (pending.set(++id, resolve), ws.send(JSON.stringify({ id, method, params })))),
    close: () => ws.close(),
  };
}

/**
 * A signed `queued` workflow_job delivery of job `jobId` to the Worker, as Gitea sends it; throws
 * unless it is a 202. `extra`: fields over the job's (`job`) and the repository's (`repository`).
 */
export async function sendQueued(worker, secret, jobId, extra = {}) {
  const body = JSON.stringify({
    action: "queued",
    workflow_job: {
      id: jobId,
      run_id: jobId,
      run_attempt: 1,
      name: "build",
      labels: ["ubuntu-latest"],
      status: "queued",
      created_at: new Date().toISOString(),
      ...extra.job,
    },
    repository: { full_name: "acme/widgets", ...extra.repository },
  });
  const res = await fetch(`${worker.url}/v1/gitea/webhook`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-gitea-event-type": "workflow_job",
      "x-gitea-signature": await giteaSignature(secret, new TextEncoder().encode(body)),
    },
    body,
  });
  const text = await res.text();
  if (res.status !== 202) throw new Error(`webhook answered ${res.status}: ${text.slice(0, 200)}`);
}
