// The `cost` section: what one job costs from `queued` to torn down, in the realistic Gitea flow:
// the fake Gitea queues jobs of four repositories and sends their webhooks; runners that behave as
// act_runner does (boot 0.1 s, poll every 0.2 s, run 0.5 s) take them; the runner's in_progress and
// completed come as webhooks; a cron tick every TICK_MS (the sweep on). Per job: the NATS operations
// by kind (through the counting proxy) and by who sent them (the gateway's kept connection: the
// webhooks and their eager passes; the ticks' own connections), and the Worker's CPU (workerd and
// its host). Variants: first come first served, fair share, pools (minIdle 5), QUOTAS.
import { giteaControl, treeCpu } from "./lib.mjs";

const JOBS = Number(process.env.BENCH_COST_JOBS ?? 40);
const CAPACITY = 10;
const TICK_MS = 10_000;
const REPOS = ["a/one", "b/two", "c/three", "d/four"];
const sum = (xs) => xs.reduce((a, b) => a + b, 0);

const VARIANTS = {
  fifo: { FAIR_SHARE: "off" },
  fair: { FAIR_SHARE: "on" },
  pools: {
    FAIR_SHARE: "on",
    RUNS_ON_ROUTES: "",
    RUNNER_POOLS: JSON.stringify([{ name: "p", backend: "pod", labels: ["ubuntu-latest:docker://node:20"], minIdle: 5 }]),
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
  const worker = await startWorker({ ...vars, NATS_URL: proxy.url(tag) });
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
      await waitFor(async () => (await backend(vars)).runners.length >= 5, 30_000);
    }
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
    const done = await waitFor(async () => {
      const { jobs } = await gitea("actions");
      return jobs.filter((j) => ids.includes(j.id)).every((j) => j.status === "completed");
    }, 180_000);
    if (!done) throw new Error(`cost (${name}): not every job completed in 180 s`);
    // Torn down: each job's runner gone from the backend (pools keep their warm ones).
    const keep = vars.RUNNER_POOLS ? 5 : 0;
    const tornDown = await waitFor(async () => (await backend(vars)).runners.length <= keep, 60_000);
    const after = snapshot(proxy, tag, worker);
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
      workerCpuMsPerJob: per((after.cpu - before.cpu) * 1_000),
      ticks,
      tornDown,
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
  return {
    at: Date.now(),
    total: sum(byConnection.map((c) => c.pub)),
    kept: sum(byConnection.filter((c) => c.open).map((c) => c.pub)),
    closed: sum(byConnection.filter((c) => !c.open).map((c) => c.pub)),
    kinds,
    cpu: sum(Object.values(treeCpu(worker.pid))),
  };
}

const backend = async (vars) => (await fetch(`${vars.POD_BACKEND_URL}/_control/state`)).json();

async function waitFor(fn, timeoutMs) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await fn()) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}
