// npm run bench: the real thing on loopback (nats-server, the Worker in workerd: see BENCH_HOST, the fake
// Gitea, an instant fake backend), each figure beside its baseline measured in the same run.
// Writes bench/results/latest.json and prints a table. Sizes: BENCH_N (2000), BENCH_K (1000),
// BENCH_JOBS (100), BENCH_REQ (50).
import os from "node:os";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { wsconnect } from "@nats-io/nats-core";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { startFakeBackend } from "../scripts/fake-backend.mjs";
import { FAKE_GITEA, startFakeGitea } from "../scripts/fake-gitea.mjs";
import { natsServerVersion, startNatsServer } from "../scripts/nats-server.mjs";
import { startWsProxy } from "../scripts/ws-proxy.mjs";
import { encodeAssignment } from "../src/model/assignment.ts";
import { loadConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { withNats } from "../src/nats/connection.ts";
import { busyBetween, cpuTimes, freePort, load, percentile, proxyOps, sendQueued, startWorker, treeCpu, until } from "./lib.mjs";
import { measureAdmission } from "./admission.mjs";
import { measureFailoverGap, measureLeaderRate } from "./cluster.mjs";
import { measureIsolates } from "./isolates.mjs";
import { startNatsCluster } from "../scripts/nats-cluster.mjs";
import { measureDistance } from "./distance.mjs";
import { measureSoak } from "./soak.mjs";
import { changeTable, compareRuns } from "./compare.mjs";
import { measureFairness } from "./fairness.mjs";
import { measurePools } from "./pools.mjs";
import { measureForgejo } from "./forgejo.mjs";
import { measureCost, startProfile } from "./cost.mjs";

// Where the Worker runs: "miniflare" (the deploy bundle in workerd, bench/host.mjs) unless
// BENCH_HOST=wrangler (`wrangler dev`, whose proxy and log forwarding cost this machine more CPU
// than a trivial request). Time to runner under load is measured on both.
const HOST = (process.env.BENCH_HOST ??= "miniflare");
const OTHER_HOST = HOST === "miniflare" ? "wrangler" : "miniflare";
const N = Number(process.env.BENCH_N ?? 2000);
const K = Number(process.env.BENCH_K ?? 1000);
const JOBS = Number(process.env.BENCH_JOBS ?? 100);
const REQ = Number(process.env.BENCH_REQ ?? 50);
const log = (...a) => console.error("[bench]", ...a);

const nats = await startNatsServer();
const gitea = await startFakeGitea();
const backend = await startFakeBackend({ mode: { token: "bench-backend" } });
const proxy = await startWsProxy({ upstream: nats.wsUrl });
const farProxy = await startWsProxy({ upstream: nats.wsUrl, delayMs: 25 });
const nearProxy = await startWsProxy({ upstream: nats.wsUrl, delayMs: 5 });
const cleanup = [() => nearProxy.close(), () => farProxy.close(), () => proxy.close(), () => backend.close(), () => gitea.close(), () => nats.stop()];
const webhookSecret = randomBytes(16).toString("hex");
let stream = 0;

function varsFor(name, extra = {}) {
  const s = `B${++stream}_${name}`;
  return {
    NATS_URL: nats.wsUrl,
    TRUST_DOMAIN: "bench.local",
    DISPATCH_TOKEN: "bench-dispatch-token-0000",
    CLAIM_SIGNING_KEY: "bench-claim-signing-key-000000000000000",
    ASSIGNMENT_STREAM: s,
    ASSIGNMENT_SUBJECT_BASE: `bench.${s.toLowerCase()}`,
    CAPACITY_POD: "1000",
    CAPACITY_VM: "0",
    BATCH_SIZE: "256",
    POD_BACKEND_URL: `${backend.url}/${s}`,
    POD_BACKEND_TOKEN: "bench-backend",
    GITEA_URL: `${gitea.url}/${s}`,
    GITEA_API_TOKEN: FAKE_GITEA.apiToken,
    GITEA_WEBHOOK_SECRET: webhookSecret,
    RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
    RUNS_ON_ROUTES: JSON.stringify([{ backend: "pod", labels: ["ubuntu-latest:docker://node:20"] }]),
    GITEA_JOB_PAGES: "0",
    // BENCH_GATEWAY=off: every figure without the NATS gateway (distance sets its own).
    ...(process.env.BENCH_GATEWAY ? { NATS_GATEWAY: process.env.BENCH_GATEWAY } : {}),
    ...extra,
  };
}
async function provisioned(vars) {
  const config = loadConfig({ ...vars, PUBLIC_URL: "http://x" });
  await withNats(config, (h) => provision(h, config));
  return config;
}
const backendMode = (vars, mode) =>
  fetch(`${vars.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ token: "bench-backend", ...mode }) });
const backendState = async (vars) => (await fetch(`${vars.POD_BACKEND_URL}/_control/state`)).json();
/** Counts only: cheap enough to poll every 20 ms while the fakes serve the Worker. */
const backendCounts = async (vars) => (await fetch(`${vars.POD_BACKEND_URL}/_control/state?brief`)).json();

const sendWebhook = (worker, jobId) => sendQueued(worker, webhookSecret, jobId);
/** Assignments whose message was acked (a claim's and its pass's ack are one). */
const acked = (worker) => new Set(worker.events.filter((e) => e.event === "acked").map((e) => e.assignment)).size;

async function ingest() {
  // BENCH_EAGER=false: the handler alone, without the pass each webhook starts (for the profile).
  const vars = varsFor("ingest", process.env.BENCH_EAGER === "false" ? { EAGER_RECONCILE: "false" } : {});
  await provisioned(vars);
  const worker = await startWorker(vars);
  try {
    log(`ingest: ${N} signed webhooks at concurrency 16, then ${N / 2} at 32`);
    const c16 = await load(N, 16, (i) => sendWebhook(worker, 100_000 + i));
    const c32 = await load(N / 2, 32, (i) => sendWebhook(worker, 200_000 + i));
    const base = varsFor("baseline");
    const config = await provisioned(base);
    const subject = `${config.subjectBase}.pod`;
    const payload = encodeAssignment({
      version: 1,
      id: "x",
      backend: "pod",
      workload: "spiffe://bench.local/x",
      labels: ["a"],
      createdAt: new Date().toISOString(),
    });
    const baseline = await load(N, 16, async (i) => {
      const nc = await wsconnect({ servers: nats.wsUrl });
      await jetstream(nc).publish(subject, payload, { msgID: `b-${i}` });
      await nc.close();
    });
    return {
      rps: c16.rps,
      p50Ms: c16.p50,
      p99Ms: c16.p99,
      p99MsAt32: c32.p99,
      baselineRps: baseline.rps,
      ratio: c16.rps / baseline.rps,
      concurrency: 16,
      n: N,
    };
  } finally {
    worker.stop();
  }
}

async function reconcile() {
  const vars = varsFor("reconcile", { CAPACITY_POD: String(K) });
  const config = await provisioned(vars);
  await backendMode(vars, { autoClaimMs: Number(process.env.BENCH_AUTOCLAIM ?? 0) });
  await withNats(config, async (h) => {
    await Promise.all(
      Array.from({ length: K }, (_, i) => {
        const id = `r-${i}`;
        const a = {
          version: 1,
          id,
          backend: "pod",
          workload: `spiffe://bench.local/runner/pod/${id}`,
          labels: ["ubuntu-latest:docker://node:20"],
          createdAt: new Date().toISOString(),
        };
        return h.js.publish(`${config.subjectBase}.pod`, encodeAssignment(a), { msgID: id });
      }),
    );
  });
  // BENCH_PROFILE=1: a CPU profile of the isolate over the invocation (bench/results/reconcile.cpuprofile).
  const inspectorPort = process.env.BENCH_PROFILE ? await freePort() : undefined;
  // BENCH_DEBUG: through the counting proxy, to print the NATS operations per assignment by kind.
  const natsVars = process.env.BENCH_DEBUG ? { ...vars, NATS_URL: proxy.url(`rec-${vars.ASSIGNMENT_STREAM}`) } : vars;
  const worker = inspectorPort ? await startWorker(natsVars, undefined, "miniflare", { inspectorPort }) : await startWorker(natsVars);
  try {
    log(`reconcile: ${K} queued assignments, one cron invocation, claims as fast as runners are ready`);
    const profiler = inspectorPort ? await startProfile(inspectorPort) : undefined;
    const t = performance.now();
    await worker.tick();
    const done = await until(() => acked(worker) >= K, Number(process.env.BENCH_WAIT_MS ?? 120_000));
    if (profiler) log(`reconcile: profile ${JSON.stringify(await profiler.stop("bench/results/reconcile.cpuprofile"))}`);
    if (process.env.BENCH_DEBUG) {
      const counts = {};
      for (const e of worker.events) counts[e.event] = (counts[e.event] ?? 0) + 1;
      const sums = worker.events.filter((e) => e.event === "reconcile_summary");
      console.error(
        counts,
        sums.length,
        sums.reduce(
          (a, s) => ({ fetched: a.fetched + s.fetched, acked: a.acked + s.acked, errors: a.errors + s.errors, revisited: a.revisited + s.revisited }),
          { fetched: 0, acked: 0, errors: 0, revisited: 0 },
        ),
        worker.events.filter((e) => e.event === "error").slice(0, 3),
      );
      const kinds = {};
      for (const c of proxy.counts(`rec-${vars.ASSIGNMENT_STREAM}`).byConnection)
        for (const [k, v] of Object.entries(c.kinds ?? {}))
          kinds[k.replaceAll(vars.ASSIGNMENT_STREAM, "S")] = (kinds[k.replaceAll(vars.ASSIGNMENT_STREAM, "S")] ?? 0) + v / K;
      console.error("NATS operations per assignment", Object.fromEntries(Object.entries(kinds).sort((a, b) => b[1] - a[1])));
    }
    const elapsed = performance.now() - t;
    // Baseline: raw fetch + ackAck over one WebSocket connection.
    const base = varsFor("rawack", { CAPACITY_POD: String(K) });
    const bc = await provisioned(base);
    const nc = await wsconnect({ servers: nats.wsUrl });
    const js = jetstream(nc);
    await Promise.all(Array.from({ length: K }, (_, i) => js.publish(`${bc.subjectBase}.pod`, "x", { msgID: `x-${i}` })));
    const consumer = await js.consumers.get(bc.stream, "pod");
    const t0 = performance.now();
    let n = 0;
    while (n < K) {
      const batch = await consumer.fetch({ max_messages: Math.min(256, K - n), expires: 1000 });
      const acks = [];
      for await (const m of batch) acks.push(m.ackAck());
      await Promise.all(acks);
      n += acks.length;
    }
    const baselinePerSec = (K / (performance.now() - t0)) * 1000;
    await nc.close();
    const perSec = ((done ? K : acked(worker)) / elapsed) * 1000;
    return { assignmentsPerSec: perSec, baselinePerSec, ratio: perSec / baselinePerSec, k: K, ackedAll: done, wallMs: Math.round(elapsed) };
  } finally {
    worker.stop();
  }
}

async function natsRequests() {
  const vars = varsFor("requests", { EAGER_RECONCILE: "false", RETRY_DELAY_MS: "100" });
  await provisioned(vars);
  const tag = `req-${stream}`;
  const ops = () => proxyOps(proxy, tag);
  // Eager passes off for this count, so that handlers and passes are apart: webhooks, then a
  // cron tick provisions, the runners claim, and cron ticks ack.
  const worker = await startWorker({ ...vars, NATS_URL: proxy.url(tag) });
  try {
    log(`natsRequests: ${REQ} webhooks through the counting proxy, cron passes, claims, cron passes until every assignment is acked`);
    for (let i = 0; i < REQ; i++) await sendWebhook(worker, 300_000 + i);
    const webhookOps = ops();
    let passOps = 0;
    const pass = async () => {
      const before = ops();
      await worker.tick();
      await until(() => worker.events.filter((e) => e.event === "reconcile_summary").length > passes++, 10_000);
      passOps += ops() - before;
    };
    let passes = 0;
    await pass();
    const runners = (await backendState(vars)).runners;
    const beforeClaims = ops();
    for (const r of runners) await (await fetch(r.claimUrl, { method: "POST", headers: { authorization: `Bearer ${r.claimToken}` } })).arrayBuffer();
    const claimOps = ops() - beforeClaims;
    await new Promise((r) => setTimeout(r, 150));
    for (let i = 0; i < 5 && acked(worker) < REQ; i++) await pass();
    return { perWebhook: webhookOps / REQ, perReconciled: passOps / REQ, perClaim: claimOps / REQ, ackedAll: acked(worker) >= REQ };
  } finally {
    worker.stop();
  }
}

async function timeToRunner(name, natsUrl, given) {
  const vars = given ?? varsFor(name);
  if (!given) await provisioned(vars);
  const worker = await startWorker({ ...vars, NATS_URL: natsUrl });
  try {
    log(`timeToRunner (${name}): ${JOBS} jobs, webhook sent → backend asked for a runner`);
    const sent = new Map();
    for (let i = 0; i < JOBS; i++) {
      const job = 400_000 + i;
      sent.set(`gitea-${job}-1`, Date.now());
      await sendWebhook(worker, job);
      await new Promise((r) => setTimeout(r, 20));
    }
    await until(async () => (await backendCounts(vars)).runnerCount >= JOBS, 30_000);
    const latencies = (await backendState(vars)).runners.map((r) => r.created - sent.get(r.id)).sort((a, b) => a - b);
    return { p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99), n: latencies.length };
  } finally {
    worker.stop();
  }
}

/**
 * Time to runner with 16 webhooks in flight whose runners claim as soon as they are ready (and
 * complete a second later): the passes that claims start must not hold new assignments back.
 * Also with 1 and 4 in flight, and the webhook answer alone, on the same Worker: with requests
 * always in flight, time to runner is at least the answer, which is in-flight / throughput.
 */
async function timeToRunnerUnderLoad(host = HOST) {
  const vars = varsFor(`ttr16${host}`);
  await provisioned(vars);
  await backendMode(vars, { autoClaimMs: 0, autoCompleteMs: 1_000 });
  // BENCH_PROFILE=1: a CPU profile of the isolate over the 16-in-flight round (bench/results/ttr16.cpuprofile), in Miniflare.
  const inspectorPort = process.env.BENCH_PROFILE && host === "miniflare" ? await freePort() : undefined;
  const worker = await startWorker({ ...vars, NATS_URL: nats.wsUrl }, undefined, host, inspectorPort ? { inspectorPort } : {});
  try {
    // The host's floor: a request that does nothing (no NATS), 16 in flight.
    const trivial = await load(400, 16, async () => void (await (await fetch(`${worker.url}/openapi.json`)).arrayBuffer()));
    const byInFlight = {};
    let firstJob = 500_000;
    for (const inFlight of [1, 4, 16]) {
      log(`timeToRunner under load (${host}): ${JOBS} jobs, ${inFlight} webhooks in flight, runners claim when ready`);
      const profiler = inspectorPort && inFlight === 16 ? await startProfile(inspectorPort) : undefined;
      byInFlight[inFlight] = await measureInFlight(worker, vars, inFlight, firstJob);
      if (profiler) log(`timeToRunner under load: profile ${JSON.stringify(await profiler.stop("bench/results/ttr16.cpuprofile"))}`);
      firstJob += JOBS;
      // The claims and completions of this round finish before the next round starts.
      await new Promise((r) => setTimeout(r, 2_000));
    }
    return { host, ...byInFlight[16], byInFlight, trivial: { p50Ms: trivial.p50, rps: trivial.rps } };
  } finally {
    worker.stop();
  }
}

async function measureInFlight(worker, vars, inFlight, firstJob) {
  // The scenario's cost per job includes the claims and completions that follow; they run on.
  const sent = new Map();
  const answered = [];
  const { created: before } = await backendCounts(vars);
  const cpu0 = { worker: treeCpu(worker.pid), nats: treeCpu(nats.pid), bench: process.cpuUsage(), machine: cpuTimes() };
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < JOBS) {
        const job = firstJob + next++;
        const at = Date.now();
        sent.set(`gitea-${job}-1`, at);
        await sendWebhook(worker, job);
        answered.push(Date.now() - at);
      }
    }),
  );
  const wallMs = Math.max(...sent.values()) - Math.min(...sent.values());
  await until(async () => (await backendCounts(vars)).created >= before + JOBS, 30_000);
  // CPU per job while it ran, by process: where a job's cost goes on this machine.
  const perJob = (seconds) => Number(((seconds * 1000) / JOBS).toFixed(2));
  const sum = (byComm) => Object.values(byComm).reduce((x, y) => x + y, 0);
  const bench = process.cpuUsage(cpu0.bench);
  const cpuMsPerJob = {
    ...Object.fromEntries(Object.entries(treeCpu(worker.pid)).map(([comm, s]) => [`worker:${comm}`, perJob(s - (cpu0.worker[comm] ?? 0))])),
    "nats-server": perJob(sum(treeCpu(nats.pid)) - sum(cpu0.nats)),
    "bench (load, fakes)": perJob((bench.user + bench.system) / 1e6),
  };
  const machineBusy = busyBetween(cpu0.machine, cpuTimes());
  const first = new Map();
  for (const r of (await backendState(vars)).requests) {
    const id = decodeURIComponent(r.path.split("/").pop());
    if (r.method === "PUT" && sent.has(id) && !first.has(id)) first.set(id, r.at);
  }
  const latencies = [...first].map(([id, at]) => at - sent.get(id)).sort((a, b) => a - b);
  answered.sort((a, b) => a - b);
  return {
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    n: latencies.length,
    answerP50Ms: percentile(answered, 50),
    webhooksPerSec: (JOBS / wallMs) * 1000,
    cpuMsPerJob,
    machineBusy,
  };
}

/** Admission ops at c=32, capacity 1000, on loopback and at 50 ms RTT (the far proxy). */
async function admission() {
  const out = {};
  for (const [name, url] of [
    ["rtt0", nats.wsUrl],
    ["rtt50", farProxy.url("adm")],
  ]) {
    const vars = varsFor(`adm${name}`, { CAPACITY_POD: "1000" });
    const config = await provisioned(vars);
    log(`admission (${name}): 32 invocations, capacity 1000, ${ADMISSION_S} s`);
    out[name] = await measureAdmission({ natsUrl: url, config, capacity: 1000, concurrency: 32, seconds: ADMISSION_S });
  }
  return out;
}
const ADMISSION_S = Number(process.env.BENCH_ADMISSION_S ?? 10);

/** Jobs/s of 4 isolates against 1, capacity 5, runners of 4 s: how near the pool's ceiling each gets. */
async function isolates() {
  const out = {};
  for (const [name, count, firstJob, shards] of [
    ["one", 1, 700_000, 1],
    ["four", 4, 710_000, 1],
    ["fourShards", 4, 720_000, 4],
  ]) {
    const vars = varsFor(`iso${count}s${shards}`, { CAPACITY_POD: "5", NATS_GATEWAY_SHARDS: String(shards) });
    await provisioned(vars);
    log(`isolates (${count}, gateway shards ${shards}): ${ISOLATE_JOBS} jobs, capacity 5, runners claim after 100 ms and run 4 s`);
    out[name] = await measureIsolates({
      vars,
      backend,
      backendMode,
      send: sendWebhook,
      isolates: count,
      jobs: ISOLATE_JOBS,
      capacity: 5,
      claimMs: 100,
      runMs: 4_000,
      firstJob,
    });
  }
  out.ratio = Number((out.four.jobsPerSec / out.one.jobsPerSec).toFixed(2));
  return out;
}
const ISOLATE_JOBS = Number(process.env.BENCH_ISOLATE_JOBS ?? 40);
const DIST_N = Number(process.env.BENCH_DIST_N ?? 100);
const SOAK_JOBS = Number(process.env.BENCH_SOAK_JOBS ?? 3000);
const SOAK_PER_SEC = Number(process.env.BENCH_SOAK_PER_SEC ?? 25);

/** On a 3-node R3 cluster: time to runner (against loopback's), and the failover gap. */
async function clusterFigures() {
  const cluster = await startNatsCluster({ size: 3 });
  try {
    const vars = varsFor("cluster", { NATS_URL: cluster.natsUrl, JETSTREAM_REPLICAS: "3" });
    await provisioned(vars);
    const ttr = await timeToRunner("cluster", cluster.natsUrl, vars);
    const gapVars = varsFor("gap", { NATS_URL: cluster.natsUrl, JETSTREAM_REPLICAS: "3" });
    const config = await provisioned(gapVars);
    const rateConfig = await provisioned(varsFor("rate", { NATS_URL: cluster.natsUrl, JETSTREAM_REPLICAS: "3" }));
    log("R3 leader: writes per second, 64 writers on one connection, half publishes, half record puts");
    const leader = await measureLeaderRate({ cluster, config: rateConfig });
    log("failover gap: a publish every 10 ms, each on its own connection; SIGKILL of the stream leader");
    const gap = await measureFailoverGap({ cluster, config });
    return { timeToRunner: ttr, failover: gap, leader };
  } finally {
    await cluster.stop();
  }
}

// Each section runs on its own: its figures are written (and its rows printed) as soon as it
// finishes, and one that fails is reported with its error while the others are kept.
// BENCH_ONLY=name[,name…] runs only those sections, and prints only their rows.
const SECTIONS = {
  ingest: () => ingest(),
  reconcile: () => reconcile(),
  req: () => natsRequests(),
  ttr: async () => ({ loopback: await timeToRunner("ttr", nats.wsUrl), rtt50: await timeToRunner("ttr50", farProxy.url("far")) }),
  ttrload: async () => ({
    underLoad: await timeToRunnerUnderLoad(),
    underLoadOtherHost: process.env.BENCH_ONE_HOST ? {} : await timeToRunnerUnderLoad(OTHER_HOST),
  }),
  admission: () => admission(),
  cluster: () => clusterFigures(),
  isolates: () => isolates(),
  soak: async () => {
    const vars = varsFor("soak");
    await provisioned(vars);
    return measureSoak({ vars, backendMode, startWorker, sendWebhook, log, jobs: SOAK_JOBS, perSec: SOAK_PER_SEC });
  },
  pools: () =>
    measurePools({ varsFor, provisioned, startWorker, backendMode, backendCounts, webhookSecret, log, jobs: Number(process.env.BENCH_POOL_JOBS ?? 200) }),
  fairness: () => measureFairness({ varsFor, provisioned, startWorker, backendMode, webhookSecret, proxy, nats: nats.wsUrl, log }),
  cost: () =>
    measureCost({
      varsFor,
      provisioned,
      startWorker,
      backendMode,
      webhookSecret,
      proxy,
      log,
      ...(process.env.BENCH_COST_VARIANTS ? { only: process.env.BENCH_COST_VARIANTS.split(",") } : {}),
    }),
  forgejo: () =>
    measureForgejo({
      proxy,
      varsFor,
      provisioned,
      startWorker,
      backendMode,
      log,
      jobs: Number(process.env.BENCH_FORGEJO_JOBS ?? 100),
      idleMs: Number(process.env.BENCH_FORGEJO_IDLE_MS ?? 60_000),
    }),
  distance: () =>
    measureDistance({ proxies: { 0: proxy, 10: nearProxy, 50: farProxy }, varsFor, provisioned, startWorker, sendWebhook, timeToRunner, log, n: DIST_N }),
};
const only = process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(",").map((x) => x.trim()) : undefined;
const unknown = (only ?? []).filter((x) => !(x in SECTIONS));
const r = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

/** The table rows of each section, from its own figures (and, where a row compares, another's). */
const ROWS = {
  ingest: (i) => [
    `| ingest, c=16, n=${i.n} | ${r(i.rps)} req/s, p50 ${r(i.p50Ms)} ms, p99 ${r(i.p99Ms)} ms | ${r(i.baselineRps)} publishes/s | ${r(i.ratio, 2)} | ratio ≥ 0.7 |`,
    `| ingest p99 at c=32 | ${r(i.p99MsAt32)} ms | | | ≤ 1000 ms |`,
  ],
  reconcile: (c) => [
    `| reconcile, k=${c.k} | ${r(c.assignmentsPerSec)} acked/s (${c.wallMs} ms${c.ackedAll ? "" : ", not all acked"}) | ${r(c.baselinePerSec)} raw acks/s | ${r(c.ratio, 2)} | ≥ 2000/s |`,
  ],
  req: (q) => [
    `| NATS ops per webhook | ${r(q.perWebhook, 2)} | | | ≤ 3 |`,
    `| NATS ops per reconciled assignment | ${r(q.perReconciled, 2)} (+ ${r(q.perClaim, 2)} in the runner's claim call) | | | ≤ 4 |`,
  ],
  ttr: (t) => [
    `| time to runner, loopback | p50 ${r(t.loopback.p50Ms)} ms, p99 ${r(t.loopback.p99Ms)} ms | | | p50 ≤ 250 ms |`,
    `| time to runner, 50 ms RTT | p50 ${r(t.rtt50.p50Ms)} ms, p99 ${r(t.rtt50.p99Ms)} ms | | | p50 ≤ 600 ms |`,
  ],
  ttrload: (t) => [
    `| time to runner, loopback, 16 webhooks in flight, runners claiming | ${hostRow(t.underLoad)} | ${hostRow(t.underLoadOtherHost)} | | p50 ≤ 100 ms |`,
  ],
  admission: (a) =>
    ["rtt0", "rtt50"].map((k) => {
      const x = a[k];
      return `| admission, c=32, capacity 1000, ${k === "rtt0" ? 0 : 50} ms RTT | ${r(x.admissionsPerSec)} admissions/s (${r(x.opsPerSec)} ops/s), ${r(x.requestsPerOp, 2)} requests/op, ${r(x.retriesPerOp, 2)} retries/op, ${x.gaveUp} give-ups | | | ${k === "rtt50" ? "≥ 200 admissions/s, " : ""}no give-ups |`;
    }),
  cluster: (c, all) => [
    `| time to runner, 3-node R3 cluster, loopback | p50 ${r(c.timeToRunner.p50Ms)} ms, p99 ${r(c.timeToRunner.p99Ms)} ms | ${all.ttr ? `p50 ${r(all.ttr.loopback.p50Ms)} ms on one server` : ""} | | |`,
    `| writes one R3 stream's leader sustains (64 writers, one connection; half publishes, half record puts) | ${r(c.leader?.writesPerSec)} writes/s (${c.leader?.failed} failed) | | | |`,
    `| failover gap: stream leader SIGKILLed → publishes succeed again | ${r(c.failover.gapMs)} ms (${c.failover.failed} publishes failed meanwhile) | | | |`,
  ],
  isolates: (x) => [
    ...(x.fourShards
      ? [
          `| jobs/s, 4 isolates, 4 gateway shards each, capacity 5, runners of 4 s | ${r(x.fourShards.jobsPerSec, 2)} (${r(x.fourShards.ofCeiling, 2)} of the ceiling) | ${r(x.four.jobsPerSec, 2)} with 1 shard | ${r(x.fourShards.jobsPerSec / x.four.jobsPerSec, 2)} | ≥ 0.8 of the ceiling |`,
        ]
      : []),
    `| jobs/s, 4 isolates, capacity 5, runners of 4 s | ${r(x.four.jobsPerSec, 2)} (${r(x.four.ofCeiling, 2)} of the ceiling ${r(x.four.ceiling, 2)}) | ${r(x.one.jobsPerSec, 2)} with 1 isolate (${r(x.one.ofCeiling, 2)} of the ceiling) | ${r(x.ratio, 2)} | ≥ 0.8 of the ceiling |`,
  ],
  distance: (x) => distanceRows(x, r),
  pools: (p) => [
    `| job start-up (queued → in_progress), burst of 10, runners boot ${p.bootMs / 1000} s, poll every ${p.fetchMs / 1000} s: warm (minIdle 10) | p50 ${r(p.warm.p50Ms)} ms, p99 ${r(p.warm.p99Ms)} ms | cold (minIdle 0): p50 ${r(p.cold.p50Ms)} ms, p99 ${r(p.cold.p99Ms)} ms | ${r(p.cold.p50Ms / p.warm.p50Ms, 1)}× | warm p50 ≤ 3 s; cold p50 ≥ boot |`,
    `| runners made per job, ${p.long.jobs} jobs at minIdle 5, 4 a second | ${r(p.long.perJob, 3)} (${p.long.created} runners: ${p.long.warmFilled} warm fills, ${p.long.converted} job runners kept warm, ${p.long.ended} ended unused; ${p.long.warmTook} jobs on warm runners; start-up p50 ${r(p.long.p50Ms)} ms, p99 ${r(p.long.p99Ms)} ms) | bound 1 + (target + replaced) / jobs = ${r(p.long.bound, 3)} (${p.long.replaced} replaced) | | ≤ bound |`,
    `| after a burst, back at the warm target (10) | ${r(p.backAtTargetMs.gitea)} ms after the last job was taken (idle and polling in Gitea); ${r(p.backAtTargetMs.status)} ms in /v1/status (a cron tick every ${p.tickMs / 1000} s sees them up) | boot + 5 s = ${r(p.bootMs + 5_000)} ms | | ≤ boot + 5 s |`,
    `| target drops 10 → 2 (a window closes): surplus gone | after one tick (${r(p.surplus.tickMs)} ms): ${p.surplus.warmAfterOneTick} warm, ${p.surplus.idleAfterOneTick} idle | target ${p.surplus.target} | | ≤ one tick |`,
  ],
  fairness: (f) => [
    `| b/fix behind 200 jobs of a/mono, capacity ${f.capacity}: queued → runner asked for, → in_progress | ${r(f.fair.fix.toRunnerAskedMs)} ms, ${r(f.fair.fix.toInProgressMs)} ms (c/app's 5: p50 ${r(f.fair.appToInProgressP50Ms)} ms) | first come first served, RUNNER_SCOPE=instance: ${r(f.fifo.fix.toRunnerAskedMs)} ms, ${r(f.fifo.fix.toInProgressMs)} ms (c/app p50 ${r(f.fifo.appToInProgressP50Ms)} ms) | ${r(f.fifo.fix.toInProgressMs / f.fair.fix.toInProgressMs, 1)}× | first slot freed |`,
    `| jobs/s of the 206, runners of 2-4 s (boot 0.1 s, poll 0.2 s) | ${r(f.fair.jobsPerSec, 2)} (${r(f.fair.ofCeiling, 2)} of the ceiling ${r(f.fair.ceiling, 2)}); ${f.fair.completed} completed, ${f.fair.takenTwice} taken twice | ${r(f.fifo.jobsPerSec, 2)} (${r(f.fifo.ofCeiling, 2)} of the ceiling) | | ≥ 0.9 of the ceiling |`,
    `| a backlog of ${f.backlog.jobs} jobs at capacity ${f.capacity}, fair share on | ${f.backlog.completed} completed (${f.backlog.created} runners) in ${r(f.backlog.wallMs / 1000)} s; ${r(f.backlog.deliveriesPerJob, 2)} deliveries per job; ${f.backlog.maxDeliveriesAdvisories} MaxDeliver advisories; ${f.backlog.leftInStream} left in the stream | | | every job completes |`,
    `| cost per assignment: NATS operations, Worker CPU | ${r(f.fair.natsOpsPerAssignment, 1)} ops, ${r(f.fair.workerCpuMsPerAssignment, 1)} ms | ${r(f.fifo.natsOpsPerAssignment, 1)} ops, ${r(f.fifo.workerCpuMsPerAssignment, 1)} ms | ${r(f.fair.natsOpsPerAssignment / f.fifo.natsOpsPerAssignment, 2)} | |`,
  ],
  forgejo: (f) => [
    `| FORGE=forgejo, FORGEJO_POLL_MS ${f.pollMs}: a job waiting in Forgejo → its runner asked of the backend, ${f.toRunnerAsked.n} jobs queued at random moments | p50 ${r(f.toRunnerAsked.p50Ms)} ms, p99 ${r(f.toRunnerAsked.p99Ms)} ms; ${f.takenByOwnRunner} taken by the runner bound to them. Of it, from the poll that saw the job: p50 ${r(f.afterPoll.p50Ms)} ms, p99 ${r(f.afterPoll.p99Ms)} ms; polls ${r(f.pollGap.p50Ms)} ms apart (p50; p99 ${r(f.pollGap.p99Ms)} ms) | half the period + 300 ms = ${r(f.toRunnerAsked.goalP50Ms)} ms | | p50 ≤ ${r(f.toRunnerAsked.goalP50Ms)} ms |`,
    `| Forgejo API requests, idle instance | ${r(f.idle.perMinute, 1)} per minute (${r(f.idle.pollsPerMinute, 1)} polls) | the poll rate: ${r(f.idle.goalPerMinute, 1)} per minute | | = the poll rate |`,
    `| a job's life with FORGE=forgejo (queued → its runner gone), beyond the idle polling | ${r(f.perJob.natsOps, 1)} NATS ops, ${r(f.perJob.workerCpuMs, 1)} ms Worker CPU | polling an idle Forgejo: ${r(f.idle.natsOpsPerMinute, 1)} ops and ${r(f.idle.workerCpuMsPerMinute, 1)} ms CPU a minute | | |`,
    `| Forgejo API requests per job, beside the polls | ${r(f.perJob.requests, 2)} (${Object.entries(f.perJob.byCall)
      .map(([k, v]) => `${k}: ${v}`)
      .join(", ")}) | | | |`,
  ],
  cost: (c) =>
    ["fifo", "fair", "pools", "quotas"]
      .filter((v) => c[v])
      .map((v) => {
        const x = c[v];
        const top = Object.entries(x.byKind)
          .slice(0, 6)
          .map(([k, n]) => `${k} ${r(n, 1)}`)
          .join(", ");
        const fifo = c.fifo;
        const vs = v !== "fifo" && fifo ? `${r(x.opsPerJob / fifo.opsPerJob, 2)}× ops, ${r(x.workerCpuMsPerJob / fifo.workerCpuMsPerJob, 2)}× CPU` : "";
        const goal = v === "fifo" ? "≤ 15 ops, ≤ 12 ms" : "≤ 1.2× first come first served";
        return `| a job's life (queued → torn down), ${v}, ${c.jobs} jobs, capacity ${c.capacity}, a tick every ${c.tickMs / 1000} s | ${r(x.opsPerJob, 1)} NATS ops (gateway ${r(x.byWho.gateway, 1)}, ticks ${r(x.byWho.ticks, 1)}; ${top}), ${r(x.workerCpuMsPerJob, 1)} ms Worker CPU${x.tornDown ? "" : ", not all torn down"} | a cron tick after them: ${r(x.tick.ops, 1)} ops, ${r(x.tick.cpuMs, 1)} ms CPU; a request that does nothing: ${r(x.trivialCpuMs, 2)} ms CPU${vs ? `; ${vs}` : ""} | | ${goal} |`;
      }),
  soak: (x) => [
    `| JS heap after GC over a soak of ${x.jobs} jobs (${x.completed} completed) at ${x.perSec}/s, Worker and gateway object | start ${x.heap.start.usedMB} MB, middle ${x.heap.middle.usedMB} MB, end ${x.heap.end.usedMB} MB (${x.growthKBPerJob} KB per job) | workerd resident: ${x.heap.start.workerdRssMB}, ${x.heap.middle.workerdRssMB}, ${x.heap.end.workerdRssMB} MB | | no growth with jobs |`,
  ],
};

try {
  if (unknown.length) throw new Error(`BENCH_ONLY names no section ${unknown.join(", ")}; the sections: ${Object.keys(SECTIONS).join(", ")}`);
  const results = {
    at: new Date().toISOString(),
    complete: false,
    machine: { host: HOST, cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, node: process.version, natsServer: natsServerVersion() },
    failed: {},
  };
  // A partial run (BENCH_ONLY) must not pass for the figures of a whole one.
  const out = only ? "bench/results/partial.json" : "bench/results/latest.json";
  // The last full run, read before this one replaces it: each figure is printed beside it.
  const stored = existsSync("bench/results/latest.json") ? JSON.parse(readFileSync("bench/results/latest.json", "utf8")) : undefined;
  mkdirSync("bench/results", { recursive: true });
  const save = () => writeFileSync(out, JSON.stringify(results, null, 2) + "\n");
  const printed = [];
  for (const [name, run] of Object.entries(SECTIONS)) {
    if (only && !only.includes(name)) continue;
    const started = Date.now();
    try {
      results[name] = await run();
      log(`${name}: done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    } catch (err) {
      results.failed[name] = String(err?.stack ?? err).slice(0, 2000);
      log(`${name}: FAILED after ${((Date.now() - started) / 1000).toFixed(0)} s: ${err?.message ?? err}`);
      process.exitCode = 1;
    }
    save();
    const rows = results.failed[name] ? [`| ${name} | failed: ${String(results.failed[name]).split("\n")[0]} | | | |`] : ROWS[name](results[name], results);
    printed.push(...rows);
    for (const row of rows) log(row);
  }
  results.complete = !Object.keys(results.failed).length;
  save();
  console.log(`
| figure | measured | baseline | ratio | goal |
|---|---|---|---|---|
${printed.join("\n")}

machine: ${results.machine.cpus} cpus (${results.machine.cpuModel}), node ${results.machine.node}, ${results.machine.natsServer}, Worker host ${results.machine.host}${results.complete ? "" : `; failed: ${Object.keys(results.failed).join(", ")}`}`);
  if (stored) console.log(`\n${changeTable(compareRuns(stored, results), stored.at)}`);
} catch (err) {
  console.error(`bench failed: ${err?.stack ?? err}`);
  process.exitCode = 1;
} finally {
  for (const c of cleanup) await c();
  process.exit(process.exitCode ?? 0);
}

function hostRow(u) {
  return !u?.host
    ? ""
    : `${u.host}: p50 ${r(u.p50Ms)} ms, p99 ${r(u.p99Ms)} ms (its webhook answered: p50 ${r(u.answerP50Ms)} ms; ${r(u.webhooksPerSec)} webhooks/s); 1 and 4 in flight: p50 ${r(u.byInFlight?.[1]?.p50Ms)} and ${r(u.byInFlight?.[4]?.p50Ms)} ms; a request that does nothing, 16 in flight: p50 ${r(u.trivial?.p50Ms)} ms; CPU ms per job at 16: ${Object.entries(
        u.cpuMsPerJob ?? {},
      )
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}, machine ${r((u.machineBusy ?? NaN) * 100)} % busy`;
}

/** The `distance` rows: gateway on against off at each RTT, with the raw Node clients as baselines. */
function distanceRows(x, r) {
  const w = (rtt, mode) => x.webhook?.[rtt]?.[mode] ?? {};
  const raw = (rtt) => x.raw?.[rtt] ?? {};
  const rows = ["0", "10", "50"].map((rtt) => {
    const k = `rtt${rtt}`;
    const goal = rtt === "50" ? "p50 ≤ 75 ms (1.5 RTT)" : "";
    return `| webhook answer, ${rtt} ms RTT, gateway on / off | on: p50 ${r(w(k, "on").p50Ms)} ms, p99 ${r(w(k, "on").p99Ms)} ms; off: p50 ${r(w(k, "off").p50Ms)} ms, p99 ${r(w(k, "off").p99Ms)} ms | Node publish, held connection: p50 ${r(raw(k).held?.p50Ms)} ms; connecting per request: p50 ${r(raw(k).connectPerRequest?.p50Ms)} ms; the host's own request (no NATS): p50 ${r(w(k, "on").trivialP50Ms)} ms | ${r(w(k, "off").p50Ms / w(k, "on").p50Ms, 1)}× | ${goal} |`;
  });
  const t = x.throughput ?? {};
  const c = x.connectionsPer1000 ?? {};
  rows.push(
    `| webhooks/s, c=16, 50 ms RTT, gateway on / off | on: ${r(t.on?.rps)} req/s (machine ${r(100 * t.on?.machineBusy)} % busy); off: ${r(t.off?.rps)} req/s (${r(100 * t.off?.machineBusy)} % busy) | Node publishes/s, held: ${r(raw("rtt50").held?.rpsAt16)}; connecting per request: ${r(raw("rtt50").connectPerRequest?.rpsAt16)} | ${r(t.ratio, 1)}× | ≥ 4× |`,
  );
  rows.push(
    `| time to runner, 50 ms RTT, gateway on / off | on: p50 ${r(x.timeToRunner?.on?.p50Ms)} ms, p99 ${r(x.timeToRunner?.on?.p99Ms)} ms; off: p50 ${r(x.timeToRunner?.off?.p50Ms)} ms | | | p50 ≤ 300 ms (6 RTT) |`,
  );
  rows.push(
    `| NATS connections per 1000 webhooks (eager passes included), gateway on / off | ${["0", "10", "50"].map((rtt) => `${rtt} ms: ${c[`rtt${rtt}`]?.on ?? "?"} / ${c[`rtt${rtt}`]?.off ?? "?"}`).join("; ")} | | | a handful |`,
  );
  return rows;
}
