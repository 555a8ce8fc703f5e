// npm run bench:hetzner: the hetzner driver against the fake Hetzner API, the Worker in workerd,
// NATS at 50 ms RTT (a delay proxy) and each Hetzner answer 50 ms late. Servers boot and run a
// simulated runner (bootstrap once, claim, a short job, complete). Prints, and writes to
// bench/results/hetzner.json:
//   - Hetzner requests per job (create, status reads, delete, and the sweep's list), one job at a time;
//   - time from the webhook's send to the server's create request, p50/p99;
//   - a burst of BENCH_HZ_BURST (200) jobs in a fresh hour (BENCH_HZ_BUDGET, 3,600 requests left;
//     set it lower to see the budget bind): 429s, every job done, 0 servers left, how long it took.
import { mkdirSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { FAKE_GITEA, startFakeGitea } from "../scripts/fake-gitea.mjs";
import { FAKE_HCLOUD_TOKEN, startFakeHetzner } from "../scripts/fake-hetzner.mjs";
import { startNatsServer } from "../scripts/nats-server.mjs";
import { startWsProxy } from "../scripts/ws-proxy.mjs";
import { loadConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { withNats } from "../src/nats/connection.ts";
import { percentile, sendQueued, startWorker } from "./lib.mjs";

const JOBS = Number(process.env.BENCH_HZ_JOBS ?? 30);
const BURST = Number(process.env.BENCH_HZ_BURST ?? 200);
const BUDGET = Number(process.env.BENCH_HZ_BUDGET ?? 3600);
const log = (...a) => console.error("[bench:hetzner]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const nats = await startNatsServer();
const gitea = await startFakeGitea();
const hetzner = await startFakeHetzner();
const far = await startWsProxy({ upstream: nats.wsUrl, delayMs: 25 });
const secret = randomBytes(16).toString("hex");
let n = 0;

function varsFor(name, capacity) {
  const s = `HZ${++n}_${name}`;
  return {
    NATS_URL: far.url(s),
    TRUST_DOMAIN: "bench.local",
    DISPATCH_TOKEN: "bench-dispatch-token-0000",
    CLAIM_SIGNING_KEY: "bench-claim-signing-key-000000000000000",
    ASSIGNMENT_STREAM: s,
    ASSIGNMENT_SUBJECT_BASE: `bench.${s.toLowerCase()}`,
    CAPACITY_POD: "0",
    CAPACITY_VM: String(capacity),
    BATCH_SIZE: "64",
    VM_DRIVER: "hetzner",
    HCLOUD_API_URL: `${hetzner.url}/${s}`,
    HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
    VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" }),
    GITEA_URL: `${gitea.url}/${s}`,
    GITEA_API_TOKEN: FAKE_GITEA.apiToken,
    GITEA_WEBHOOK_SECRET: secret,
    RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
    RUNS_ON_ROUTES: JSON.stringify([{ backend: "vm", labels: ["ubuntu-latest"] }]),
    GITEA_JOB_PAGES: "0",
    RETRY_DELAY_MS: "1000",
  };
}
async function provisioned(vars) {
  const config = loadConfig({ ...vars, NATS_URL: nats.wsUrl, PUBLIC_URL: "http://x" });
  await withNats(config, (h) => provision(h, config));
}
const ctl = async (vars, what, body) =>
  (await fetch(`${vars.HCLOUD_API_URL}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {})).json();

const sendWebhook = (worker, id) => sendQueued(worker, secret, id);

/** Ticks every `everyMs` until every job completed and no server is left, or `timeoutMs`. */
async function settle(worker, vars, ids, timeoutMs, everyMs = 2_000) {
  const deadline = Date.now() + timeoutMs;
  let ticks = 0;
  for (;;) {
    const st = await ctl(vars, "state");
    const completed = worker.events.filter((e) => e.event === "completed" && ids.has(e.assignment)).length;
    if ((completed >= ids.size && st.servers.length === 0) || Date.now() > deadline) return { ticks, completed, left: st.servers.length, st };
    if (ticks % 10 === 9) {
      const last = st.requests.slice(-4).map((r) => `${r.method} ${r.path}${r.query}${r.status ? ` ${r.status}` : ""}`);
      log(`  ${completed}/${ids.size} completed, ${st.servers.length} servers, ${st.requests.length} requests; last: ${last.join(" | ")}`);
    }
    await worker.tick();
    ticks++;
    await sleep(everyMs);
  }
}

const kindOf = (r) =>
  r.method === "POST" ? "create" : r.method === "DELETE" ? "delete" : /label_selector/.test(r.query) ? "list" : /name=/.test(r.query) ? "byName" : "status";
const countKinds = (requests) => requests.reduce((m, r) => ((m[kindOf(r)] = (m[kindOf(r)] ?? 0) + 1), m), {});

async function oneAtATime() {
  const vars = varsFor("serial", 10);
  await provisioned(vars);
  await ctl(vars, "mode", { bootMs: 500, latencyMs: 50, simulate: { jobMs: 500 } });
  const worker = await startWorker(vars, undefined, "miniflare");
  try {
    const sentAt = new Map();
    for (let i = 0; i < JOBS; i++) {
      const id = 10_000 + i;
      sentAt.set(`gdr-gitea-${id}-1`, Date.now());
      await sendWebhook(worker, id);
      await sleep(300);
    }
    const ids = new Set([...sentAt.keys()].map((name) => name.slice(4)));
    const done = await settle(worker, vars, ids, 120_000);
    const creates = done.st.requests.filter((r) => r.method === "POST");
    const toCreate = creates
      .map((r) => r.at - sentAt.get(JSON.parse(r.body).name))
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
    const kinds = countKinds(done.st.requests);
    const perJob = Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, +(v / JOBS).toFixed(2)]));
    return {
      jobs: JOBS,
      completed: done.completed,
      serversLeft: done.left,
      requests: done.st.requests.length,
      requestsPerJob: +(done.st.requests.length / JOBS).toFixed(2),
      byKind: kinds,
      perJob,
      ticks: done.ticks,
      // A real deployment ticks once a minute: its list costs 1 request a minute per 50 servers, whatever the job rate.
      webhookToCreateMs: { p50: percentile(toCreate, 50), p99: percentile(toCreate, 99), n: toCreate.length },
    };
  } finally {
    worker.stop();
  }
}

async function burst() {
  const vars = varsFor("burst", BURST);
  await provisioned(vars);
  await ctl(vars, "mode", { bootMs: 1_000, latencyMs: 50, simulate: { jobMs: 2_000 }, rateRemaining: BUDGET });
  const worker = await startWorker(vars, undefined, "miniflare");
  try {
    const started = Date.now();
    const ids = new Set();
    await Promise.all(
      Array.from({ length: BURST }, async (_, i) => {
        ids.add(`gitea-${20_000 + i}-1`);
        await sendWebhook(worker, 20_000 + i);
      }),
    );
    const done = await settle(worker, vars, ids, 15 * 60_000, 3_000);
    const rateLimited = done.st.requests.filter((r) => r.status === 429).length;
    const billing = await ctl(vars, "billing");
    return {
      jobs: BURST,
      startingBudget: BUDGET,
      completed: done.completed,
      serversLeft: done.left,
      servers: billing.servers,
      requests: done.st.requests.length,
      byKind: countKinds(done.st.requests),
      answered429: rateLimited,
      seconds: Math.round((Date.now() - started) / 1000),
      backendRetries: worker.events.filter((e) => e.event === "backend_retry").length,
    };
  } finally {
    worker.stop();
  }
}

try {
  log(`${JOBS} jobs one at a time, NATS and Hetzner at 50 ms RTT`);
  const serial = await oneAtATime();
  log(JSON.stringify(serial));
  log(`a burst of ${BURST} jobs with ${BUDGET} requests left of the hour's 3,600`);
  const many = await burst();
  log(JSON.stringify(many));
  const out = { at: new Date().toISOString(), serial, burst: many };
  mkdirSync("bench/results", { recursive: true });
  writeFileSync("bench/results/hetzner.json", `${JSON.stringify(out, null, 2)}\n`);
  console.log(
    [
      `Hetzner requests per job:   ${serial.requestsPerJob} (${Object.entries(serial.perJob)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}), ${serial.completed}/${serial.jobs} completed, ${serial.serversLeft} servers left`,
      `webhook → create (50 ms):   p50 ${serial.webhookToCreateMs.p50} ms, p99 ${serial.webhookToCreateMs.p99} ms`,
      `burst of ${many.jobs} (${many.startingBudget} left): ${many.completed} completed, ${many.serversLeft} servers left, ${many.requests} requests, ${many.answered429} answered 429, ${many.seconds} s`,
    ].join("\n"),
  );
} finally {
  await far.close();
  await hetzner.close();
  await gitea.close();
  await nats.stop();
}
