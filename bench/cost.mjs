// The `cost` section: what one job costs from `queued` to torn down, in the realistic Gitea flow:
// the fake Gitea queues jobs of four repositories and sends their webhooks; runners that behave as
// act_runner does (boot 0.1 s, poll every 0.2 s, run 0.5 s) take them; the runner's in_progress and
// completed come as webhooks; a cron tick every TICK_MS (the sweep on). Per job: the NATS operations
// by kind (through the counting proxy) and by who sent them (the gateway's kept connection: the
// webhooks and their eager passes; the ticks' own connections), and the Worker's CPU (workerd and
// its host). Variants: first come first served, fair share, pools (minIdle 5), QUOTAS.
import { writeFileSync } from "node:fs";
import { connectInspector, freePort, giteaControl, sum, until, workerCpuMs } from "./lib.mjs";

const JOBS = Number(process.env.BENCH_COST_JOBS ?? 40);
const CAPACITY = 10;
const TICK_MS = 10_000;
const REPOS = ["a/one", "b/two", "c/three", "d/four"];
/** Requests that do nothing, for the floor of the Worker's CPU per request. */
const TRIVIAL = 200;

const VARIANTS = {
  fifo: { FAIR_SHARE: "off" },
  fair: { FAIR_SHARE: "on" },
  pools: {
    FAIR_SHARE: "on",
    RUNS_ON_ROUTES: "",
    RUNNER_POOLS: JSON.stringify([{ name: "p", backend: "pod", labels: ["ubuntu-latest:docker://node:20"], minIdle: 5 }]),
    ...(process.env.BENCH_COST_VARS ? JSON.parse(process.env.BENCH_COST_VARS) : {}),
  },
  quotas: { FAIR_SHARE: "on", QUOTAS: JSON.stringify({ default: { owner: 4 }, owners: { a: { limit: 2 } } }) },
};

export async function measureCost({ varsFor, provisioned, startWorker, backendMode, webhookSecret, proxy, log, only = Object.keys(VARIANTS) }) {
  const out = { jobs: JOBS, capacity: CAPACITY, tickMs: TICK_MS };
  for (const name of only) out[name] = await costOf(name, VARIANTS[name], { varsFor, provisioned, startWorker, backendMode, webhookSecret, proxy, log });
  return out;
}

async function costOf(name, extra, { varsFor, provisioned, startWorker, backendMode, webhookSecret, proxy, log }) {
  const vars = varsFor(`cost${name}`, { CAPACITY_POD: String(CAPACITY), GITEA_JOB_PAGES: "2", ...extra });
  await provisioned(vars);
  await backendMode(vars, { runner: true, bootMs: 100, fetchIntervalMs: 200, jobMs: 500 });
  const tag = `cost-${vars.ASSIGNMENT_STREAM}`;
  // BENCH_PROFILE=1: a CPU profile of the isolate (the Worker and its gateway object) over the jobs.
  const inspectorPort = process.env.BENCH_PROFILE ? await freePort() : undefined;
  const worker = await startWorker({ ...vars, NATS_URL: proxy.url(tag) }, undefined, "miniflare", inspectorPort ? { inspectorPort } : {});
  const gitea = giteaControl(vars);
  let ticks = 0;
  const ticker = setInterval(
    () =>
      void worker.tick().then(
        () => ticks++,
        () => undefined,
      ),
    TICK_MS,
  );
  try {
    await gitea("webhook", { url: `${worker.url}/v1/gitea/webhook`, secret: webhookSecret });
    // Pools: the warm runners are made first; their cost is the pool's, counted apart.
    if (vars.RUNNER_POOLS) {
      await worker.tick();
      await until(async () => (await backend(vars)).runners.length >= 5, 30_000, 250);
    }
    const profiler = inspectorPort ? await startProfile(inspectorPort) : undefined;
    const before = snapshot(proxy, tag, worker);
    log(`cost (${name}): ${JOBS} jobs of ${REPOS.length} repositories, capacity ${CAPACITY}, a tick every ${TICK_MS / 1000} s`);
    const ids = [];
    for (let i = 0; i < JOBS; i += 4) {
      const jobs = Array.from({ length: Math.min(4, JOBS - i) }, (_, k) => ({
        labels: ["ubuntu-latest"],
        repository: REPOS[(i + k) % REPOS.length],
        runMs: 500,
      }));
      ids.push(...(await gitea("queue", jobs)).jobs);
      await new Promise((r) => setTimeout(r, 250));
    }
    const done = await until(
      async () => {
        const { jobs } = await gitea("actions");
        return jobs.filter((j) => ids.includes(j.id)).every((j) => j.status === "completed");
      },
      180_000,
      250,
    );
    if (!done) throw new Error(`cost (${name}): not every job completed in 180 s`);
    // Torn down: each job's runner gone from the backend (pools keep their warm ones).
    const keep = vars.RUNNER_POOLS ? 5 : 0;
    const tornDown = await until(async () => (await backend(vars)).runners.length <= keep, 60_000, 250);
    const after = snapshot(proxy, tag, worker);
    // A cron tick now (the sweep lists Gitea's jobs and runners): what each minute costs, whatever the jobs.
    const tick0 = snapshot(proxy, tag, worker);
    for (let i = 0; i < 3; i++) await worker.tick();
    const tick1 = snapshot(proxy, tag, worker);
    const tick = { ops: (tick1.total - tick0.total) / 3, cpuMs: (tick1.cpuMs - tick0.cpuMs) / 3 };
    // The floor: the Worker's CPU for a request that does nothing (a 404), beside a job's requests.
    const trivial0 = workerCpuMs(worker.pid);
    for (let i = 0; i < TRIVIAL; i++) await (await fetch(`${worker.url}/nothing-here`)).arrayBuffer();
    const trivialCpuMs = (workerCpuMs(worker.pid) - trivial0) / TRIVIAL;
    const profile = profiler ? await profiler.stop(`bench/results/cost-${name}.cpuprofile`) : undefined;
    const per = (x) => x / JOBS;
    const kinds = {};
    for (const [k, v] of Object.entries(after.kinds)) {
      const d = v - (before.kinds[k] ?? 0);
      if (d) kinds[k.replaceAll(vars.ASSIGNMENT_STREAM, "S").replaceAll(vars.ASSIGNMENT_SUBJECT_BASE, "s")] = per(d);
    }
    return {
      opsPerJob: per(after.total - before.total),
      byWho: { gateway: per(after.kept - before.kept), ticks: per(after.closed - before.closed) },
      byKind: Object.fromEntries(Object.entries(kinds).sort((a, b) => b[1] - a[1])),
      workerCpuMsPerJob: per(after.cpuMs - before.cpuMs),
      trivialCpuMs,
      tick,
      ticks,
      tornDown,
      ...(profile ? { profile } : {}),
      wallMs: after.at - before.at,
    };
  } finally {
    clearInterval(ticker);
    worker.stop();
  }
}

/** The proxy's counts for `tag` (all, by the kept connection and by the closed ones, by kind) and the Worker's CPU. */
function snapshot(proxy, tag, worker) {
  const { byConnection } = proxy.counts(tag);
  const kinds = {};
  for (const c of byConnection) for (const [k, v] of Object.entries(c.kinds ?? {})) kinds[k] = (kinds[k] ?? 0) + v;
  // BENCH_DEBUG: the closed connections' kinds apart (what the ticks and background work on their own connections sent).
  if (process.env.BENCH_DEBUG)
    for (const c of byConnection.filter((c) => !c.open))
      for (const [k, v] of Object.entries(c.kinds ?? {})) kinds[`(closed) ${k}`] = (kinds[`(closed) ${k}`] ?? 0) + v;
  return {
    at: Date.now(),
    total: sum(byConnection.map((c) => c.pub)),
    kept: sum(byConnection.filter((c) => c.open).map((c) => c.pub)),
    closed: sum(byConnection.filter((c) => !c.open).map((c) => c.pub)),
    kinds,
    cpuMs: workerCpuMs(worker.pid),
  };
}

const backend = async (vars) => (await fetch(`${vars.POD_BACKEND_URL}/_control/state`)).json();

/** Starts the V8 profiler of the Worker's isolate; stop() writes the profile and sums self time by function. */
/** A CPU profile of the isolate behind inspector `port`: stop() writes it to `file` and returns its top self times. */
export async function startProfile(port) {
  const { call, close } = await connectInspector(port);
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 200 });
  await call("Profiler.start");
  return {
    async stop(file) {
      const { result } = await call("Profiler.stop");
      close();
      writeFileSync(file, JSON.stringify(result.profile));
      return summarize(result.profile);
    },
  };
}

/** Self time per function (name and module), the top 15, in ms, from a V8 CPU profile. */
function summarize(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const dt = new Map();
  for (let i = 0; i < profile.samples.length; i++) dt.set(profile.samples[i], (dt.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
  const self = {};
  let total = 0;
  for (const [nodeId, us] of dt) {
    const f = byId.get(nodeId).callFrame;
    const key = `${f.functionName || "(anonymous)"} ${f.url.split("/").pop() || ""}:${f.lineNumber + 1}`;
    self[key] = (self[key] ?? 0) + us / 1000;
    total += us / 1000;
  }
  const top = Object.entries(self)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([k, ms]) => [k, +ms.toFixed(1)]);
  return { totalMs: +total.toFixed(1), top };
}
