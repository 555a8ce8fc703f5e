// npm run bench:cache: the Actions cache through the Worker (the deploy bundle in workerd through
// Miniflare, its CACHE_BUCKET in a local R2 on disk, as `wrangler dev` keeps it) against the same
// local R2 reached by a Worker that only puts and gets (bench/r2-direct-host.mjs), in one run:
//   - save and restore of a BENCH_CACHE_MIB (256) MiB archive: the client's protocol (reserve,
//     32 MiB chunks 4 at a time, commit; lookup, then the archiveLocation's download), against one
//     PUT and one GET of an object of the same size; the median of BENCH_CACHE_ROUNDS (3) rounds;
//   - each workerd's resident memory at its peak while moving it, above its idle just before;
//   - each workerd's CPU per MiB moved;
//   - BENCH_CACHE_JOBS (20) ephemeral jobs of one repository, one after another, each running the
//     real @actions/cache: restore a key, and save it on a miss; how many hit.
// Prints a table and writes bench/results/cache.json.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import * as cache from "@actions/cache";
import { startFakeBackend } from "../scripts/fake-backend.mjs";
import { FAKE_GITEA, startFakeGitea } from "../scripts/fake-gitea.mjs";
import { startNatsServer } from "../scripts/nats-server.mjs";
import { loadConfig } from "../src/app/config.ts";
import { cacheKey, capability } from "../src/cache/capability.ts";
import { claimToken } from "../src/model/crypto.ts";
import { provision } from "../src/nats/layout.ts";
import { withNats } from "../src/nats/connection.ts";
import { incarnationOf } from "../src/state/records.ts";
import { connectInspector, freePort, sendQueued, startWorker, treeCpu, treeRssMB } from "./lib.mjs";

const MiB = 2 ** 20;
const SIZE = Number(process.env.BENCH_CACHE_MIB ?? 256) * MiB;
const ROUNDS = Number(process.env.BENCH_CACHE_ROUNDS ?? 3);
const JOBS = Number(process.env.BENCH_CACHE_JOBS ?? 20);
const CHUNK = 32 * MiB;
const V = "b".repeat(64);
const log = (...a) => console.error("[bench:cache]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const nats = await startNatsServer();
const backend = await startFakeBackend({ mode: { token: "bench-token" } });
const gitea = await startFakeGitea();
const secret = randomBytes(16).toString("hex");
const work = mkdtempSync(join(tmpdir(), "gdr-bench-cache-"));
const vars = {
  NATS_URL: nats.wsUrl,
  TRUST_DOMAIN: "bench.local",
  DISPATCH_TOKEN: "bench-dispatch-token-000",
  CLAIM_SIGNING_KEY: "bench-claim-signing-key-0000000000000",
  CAPACITY_POD: "100",
  CAPACITY_VM: "0",
  POD_BACKEND_URL: `${backend.url}/pod`,
  POD_BACKEND_TOKEN: "bench-token",
  GITEA_URL: `${gitea.url}/CACHE`,
  GITEA_API_TOKEN: FAKE_GITEA.apiToken,
  GITEA_WEBHOOK_SECRET: secret,
  RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
  RUNS_ON_ROUTES: JSON.stringify([{ backend: "pod", labels: ["ubuntu-latest"] }]),
  GITEA_JOB_PAGES: "0",
};
const config = loadConfig({ ...vars, PUBLIC_URL: "http://x" });
await withNats(config, (h) => provision(h, config));
const inspectorPort = await freePort();
const worker = await startWorker(vars, undefined, "miniflare", { r2Dir: join(work, "r2-worker"), inspectorPort });
worker.inspector = await connectInspector(inspectorPort);
const direct = await startDirect(join(work, "r2-direct"));
const key = await cacheKey(vars.CLAIM_SIGNING_KEY);

/** The baseline's host; resolves once it serves. */
async function startDirect(dir) {
  const port = await freePort();
  const inspectorPort = await freePort();
  const child = spawn(process.execPath, ["bench/r2-direct-host.mjs"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, GDR_HOST_PORT: String(port), GDR_HOST_R2: dir, GDR_HOST_INSPECTOR: String(inspectorPort) },
    detached: true,
  });
  await new Promise((ready, fail) => {
    createInterface({ input: child.stdout }).on("line", (l) => /ready on/.test(l) && ready());
    child.on("exit", (code) => fail(new Error(`the direct host exited (${code})`)));
  });
  return { url: `http://127.0.0.1:${port}`, pid: child.pid, inspector: await connectInspector(inspectorPort), stop: () => process.kill(-child.pid, "SIGTERM") };
}

const api = (path, init = {}) => fetch(`${worker.url}${path}`, init);
const json = (token) => ({ authorization: `Bearer ${token}`, "content-type": "application/json" });
let jobs = 0;
/**
 * A job of `repository` on its default branch, as Gitea's queued webhook tells it (head_branch
 * "main", default_branch "main"), claimed by its runner: the cache URL its runner is given.
 */
async function jobCacheUrl(repository) {
  const jobId = 9000 + ++jobs;
  const id = `gitea-${jobId}-1`;
  await sendQueued(worker, secret, jobId, { job: { head_branch: "main" }, repository: { full_name: repository, default_branch: "main" } });
  let receivedAt;
  while (!receivedAt) {
    const view = await api(`/v1/assignments/${id}`, { headers: json(vars.DISPATCH_TOKEN) });
    if (view.status === 200) receivedAt = (await view.json()).receivedAt;
    else await sleep(50);
  }
  const incarnation = incarnationOf({ receivedAt });
  const claimed = await api(`/v1/assignments/${id}/claim`, { method: "POST", headers: json(await claimToken(vars.CLAIM_SIGNING_KEY, id, incarnation)) });
  if (claimed.status !== 200) throw new Error(`the claim answered ${claimed.status}`);
  return `${worker.url}/cache/${await capability(key, { assignment: id, incarnation })}/_apis/artifactcache/`;
}

/** Reads a response's body to its end: its length. */
async function drain(res) {
  let n = 0;
  for await (const chunk of res.body) n += chunk.length;
  return n;
}

/** The client's save: reserve, chunks of 32 MiB 4 at a time (a chunk that came before the part size is known is sent again), commit. */
async function saveVia(base, name, bytes) {
  const reserved = await fetch(`${base}caches`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ key: name, version: V, cacheSize: bytes.length }),
  });
  const { cacheId } = await reserved.json();
  const starts = Array.from({ length: Math.ceil(bytes.length / CHUNK) }, (_, i) => i * CHUNK);
  let next = 0;
  const send = async () => {
    while (next < starts.length) {
      const start = starts[next++];
      const end = Math.min(start + CHUNK, bytes.length) - 1;
      for (;;) {
        const res = await fetch(`${base}caches/${cacheId}`, {
          method: "PATCH",
          headers: { "content-type": "application/octet-stream", "content-range": `bytes ${start}-${end}/*` },
          body: bytes.subarray(start, end + 1),
        });
        await res.arrayBuffer();
        if (res.status === 200) break;
        if (res.status !== 503) throw new Error(`chunk answered ${res.status}`);
        await sleep(100);
      }
    }
  };
  await Promise.all([send(), send(), send(), send()]);
  const committed = await fetch(`${base}caches/${cacheId}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ size: bytes.length }),
  });
  if (committed.status !== 200) throw new Error(`commit answered ${committed.status}: ${await committed.text()}`);
}

async function restoreVia(base, name) {
  const hit = await fetch(`${base}cache?keys=${name}&version=${V}`);
  if (hit.status !== 200) throw new Error(`lookup answered ${hit.status}`);
  return drain(await fetch((await hit.json()).archiveLocation));
}

/**
 * Runs `fn` while sampling a host every 10 ms: seconds taken; its Worker isolate's memory (V8 heap
 * used plus ArrayBuffer backing stores, what the Workers memory limit counts) at its peak above
 * its level at the start; the whole workerd process's resident memory likewise (which holds the
 * local R2 too); and workerd's CPU ms.
 */
async function measured(host, fn) {
  const heap = async () => {
    const { result } = await host.inspector.call("Runtime.getHeapUsage");
    return (result.usedSize + (result.backingStorageSize ?? 0)) / MiB;
  };
  const rss = () => treeRssMB(host.pid).workerd ?? 0;
  const cpu = () => (treeCpu(host.pid).workerd ?? 0) * 1000;
  const [idleHeap, idleRss] = [await heap(), rss()];
  let [peakHeap, peakRss] = [idleHeap, idleRss];
  let done = false;
  const sampler = (async () => {
    while (!done) {
      [peakHeap, peakRss] = [Math.max(peakHeap, await heap()), Math.max(peakRss, rss())];
      await sleep(10);
    }
  })();
  const cpu0 = cpu();
  const t = performance.now();
  await fn();
  const seconds = (performance.now() - t) / 1000;
  done = true;
  await sampler;
  const round = (x) => +x.toFixed(1);
  return {
    seconds,
    idleHeapMiB: round(idleHeap),
    heapAboveMiB: round(peakHeap - idleHeap),
    idleRssMB: idleRss,
    rssAboveMB: round(peakRss - idleRss),
    cpuMs: cpu() - cpu0,
  };
}

const archive = randomBytes(SIZE);
const rounds = [];
// A small save and restore first on both, so that neither's first use is measured.
const warm = await jobCacheUrl("bench/warm");
await saveVia(warm, "warm", archive.subarray(0, 6 * MiB));
await restoreVia(warm, "warm");
await (await fetch(`${direct.url}/warm`, { method: "PUT", body: archive.subarray(0, 6 * MiB) })).text();
await drain(await fetch(`${direct.url}/warm`));
for (let r = 0; r < ROUNDS; r++) {
  const base = await jobCacheUrl(`bench/app-${r}`);
  const save = await measured(worker, () => saveVia(base, `deps-${r}`, archive));
  const restore = await measured(worker, async () => {
    if ((await restoreVia(base, `deps-${r}`)) !== SIZE) throw new Error("the restore was short");
  });
  const put = await measured(direct, async () => (await fetch(`${direct.url}/obj-${r}`, { method: "PUT", body: archive })).text());
  const get = await measured(direct, async () => {
    if ((await drain(await fetch(`${direct.url}/obj-${r}`))) !== SIZE) throw new Error("the get was short");
  });
  rounds.push({ save, restore, put, get });
  log(
    `round ${r + 1}: save ${save.seconds.toFixed(2)} s, restore ${restore.seconds.toFixed(2)} s; direct put ${put.seconds.toFixed(2)} s, get ${get.seconds.toFixed(2)} s`,
  );
}

// Ephemeral jobs of one repository, one after another, each with the real client.
const dir = join(work, "deps");
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, "modules.bin"), randomBytes(4 * MiB));
let hits = 0;
const restoreMs = [];
for (let j = 0; j < JOBS; j++) {
  const url = (await jobCacheUrl("bench/ephemeral")).replace(/_apis\/artifactcache\/$/, "");
  const saved = { ...process.env };
  Object.assign(process.env, { ACTIONS_CACHE_URL: url, ACTIONS_RUNTIME_TOKEN: "t", GITHUB_SERVER_URL: "https://gitea.example.org", RUNNER_TEMP: work });
  const write = process.stdout.write;
  process.stdout.write = () => true; // the client's ::debug:: lines
  try {
    const t = performance.now();
    const hit = await cache.restoreCache([dir], "npm-linux-lock-1");
    restoreMs.push(performance.now() - t);
    if (hit) hits++;
    else await cache.saveCache([dir], "npm-linux-lock-1");
  } finally {
    process.stdout.write = write;
    process.env = saved;
  }
}

const mibps = (bytes, s) => +(bytes / MiB / s).toFixed(0);
const m = (pick) => median(rounds.map(pick));
const figures = {
  sizeMiB: SIZE / MiB,
  rounds: ROUNDS,
  saveMiBps: mibps(
    SIZE,
    m((r) => r.save.seconds),
  ),
  restoreMiBps: mibps(
    SIZE,
    m((r) => r.restore.seconds),
  ),
  directPutMiBps: mibps(
    SIZE,
    m((r) => r.put.seconds),
  ),
  directGetMiBps: mibps(
    SIZE,
    m((r) => r.get.seconds),
  ),
  workerHeapAboveMiB: Math.max(...rounds.flatMap((r) => [r.save.heapAboveMiB, r.restore.heapAboveMiB])),
  workerIdleHeapMiB: rounds[0].save.idleHeapMiB,
  directHeapAboveMiB: Math.max(...rounds.flatMap((r) => [r.put.heapAboveMiB, r.get.heapAboveMiB])),
  workerRssAboveMB: Math.max(...rounds.flatMap((r) => [r.save.rssAboveMB, r.restore.rssAboveMB])),
  directRssAboveMB: Math.max(...rounds.flatMap((r) => [r.put.rssAboveMB, r.get.rssAboveMB])),
  workerCpuMsPerMiB: +(m((r) => r.save.cpuMs + r.restore.cpuMs) / ((2 * SIZE) / MiB)).toFixed(2),
  directCpuMsPerMiB: +(m((r) => r.put.cpuMs + r.get.cpuMs) / ((2 * SIZE) / MiB)).toFixed(2),
  jobs: JOBS,
  hits,
  restoreMsP50: Math.round(median(restoreMs)),
  rounds_: rounds,
};
const ratio = (a, b) => +(a / b).toFixed(2);
const rows = [
  [
    "save, through the Worker",
    `${figures.saveMiBps} MiB/s`,
    `direct put ${figures.directPutMiBps} MiB/s`,
    ratio(figures.saveMiBps, figures.directPutMiBps),
    "≥ 0.8",
  ],
  [
    "restore, through the Worker",
    `${figures.restoreMiBps} MiB/s`,
    `direct get ${figures.directGetMiBps} MiB/s`,
    ratio(figures.restoreMiBps, figures.directGetMiBps),
    "≥ 0.8",
  ],
  [
    "the Worker's memory (heap + buffers) above idle, peak",
    `${figures.workerHeapAboveMiB} MiB (idle ${figures.workerIdleHeapMiB} MiB)`,
    `direct ${figures.directHeapAboveMiB} MiB`,
    "",
    "≤ 32 MiB",
  ],
  ["workerd resident (with the local R2) above idle, peak", `${figures.workerRssAboveMB} MB`, `direct ${figures.directRssAboveMB} MB`, "", ""],
  [
    "workerd CPU per MiB moved",
    `${figures.workerCpuMsPerMiB} ms`,
    `direct ${figures.directCpuMsPerMiB} ms`,
    ratio(figures.workerCpuMsPerMiB, figures.directCpuMsPerMiB),
    "",
  ],
  [`${JOBS} ephemeral jobs, one key`, `${hits} hits (restore p50 ${figures.restoreMsP50} ms)`, "", "", `≥ ${JOBS - 1}`],
];
console.log(`| figure (${SIZE / MiB} MiB, median of ${ROUNDS}) | measured | baseline | ratio | goal |\n|---|---|---|---|---|`);
for (const r of rows) console.log(`| ${r.join(" | ")} |`);
mkdirSync("bench/results", { recursive: true });
writeFileSync("bench/results/cache.json", JSON.stringify(figures, null, 2));

worker.inspector.close();
direct.inspector.close();
worker.stop();
direct.stop();
await backend.close?.();
await nats.stop?.();
rmSync(work, { recursive: true, force: true });
process.exit(0);
