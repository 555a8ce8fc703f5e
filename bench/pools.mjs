// The `pools` section: runner pools against runners that behave as act_runner does (boot 8 s, poll
// Gitea every 2 s, one job each), the fake Gitea handing jobs out and sending the webhooks to the
// Worker. Cold against warm start-up for a burst, runners made per job over a long run, the time
// back to the warm target after a burst, and the time until the surplus is gone when the target drops.
import { giteaControl, percentile as pick } from "./lib.mjs";

const percentile = (xs, p) =>
  pick(
    [...xs].sort((a, b) => a - b),
    p,
  );

const BOOT_MS = 8_000;
const FETCH_MS = 2_000;
const TICK_MS = 5_000;
const LABELS = ["ubuntu-latest:docker://node:20"];

export async function measurePools({ varsFor, provisioned, startWorker, backendMode, backendCounts, webhookSecret, log, jobs = 200 }) {
  /** A worker for one pool, its Gitea wired to it, ticking like a cron every TICK_MS. */
  const stack = async (
    name,
    pool,
    vars = varsFor(name, { RUNS_ON_ROUTES: "", RUNNER_POOLS: JSON.stringify([{ name: "p", backend: "pod", labels: LABELS, ...pool }]), GITEA_JOB_PAGES: "5" }),
  ) => {
    await provisioned(vars);
    await backendMode(vars, { runner: true, bootMs: BOOT_MS, fetchIntervalMs: FETCH_MS, jobMs: 1_000 });
    const worker = await startWorker(vars);
    const gitea = giteaControl(vars);
    await gitea("webhook", { url: `${worker.url}/v1/gitea/webhook`, secret: webhookSecret });
    const ticker = setInterval(() => worker.tick().catch(() => undefined), TICK_MS);
    await worker.tick();
    const status = async () =>
      (await (await fetch(`${worker.url}/v1/status`, { headers: { authorization: `Bearer ${vars.DISPATCH_TOKEN}` } })).json()).pools[0];
    return { vars, worker, gitea, status, stop: () => (clearInterval(ticker), worker.stop()) };
  };
  const waitFor = async (fn, timeoutMs, what) => {
    const end = Date.now() + timeoutMs;
    while (!(await fn())) {
      if (Date.now() > end) throw new Error(`pools: timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    return Date.now();
  };
  /** Queues `n` jobs at once; their waits from queued to taken, once all are taken. */
  const burst = async (s, n) => {
    const { jobs: ids } = await s.gitea(
      "queue",
      Array.from({ length: n }, () => ({ labels: ["ubuntu-latest"] })),
    );
    await waitFor(async () => (await s.gitea("actions")).taken.filter((t) => ids.includes(t.job)).length === n, 120_000, `${n} jobs taken`);
    const taken = (await s.gitea("actions")).taken.filter((t) => ids.includes(t.job));
    const waits = taken.map((t) => t.at - t.queuedAt);
    return { p50Ms: percentile(waits, 50), p99Ms: percentile(waits, 99), lastTakenAt: Math.max(...taken.map((t) => t.at)) };
  };

  log(`pools: a burst of 10 jobs, cold (minIdle 0) and warm (minIdle 10); runners boot in ${BOOT_MS / 1000} s and poll every ${FETCH_MS / 1000} s`);
  const cold = await stack("poolcold", { minIdle: 0 });
  let coldBurst;
  try {
    coldBurst = await burst(cold, 10);
  } finally {
    cold.stop();
  }
  const warm = await stack("poolwarm", { minIdle: 10 });
  let warmBurst, backAtTargetMs, surplus;
  try {
    await waitFor(async () => (await warm.status()).idle >= 10, 120_000, "10 warm runners");
    warmBurst = await burst(warm, 10);
    // Back when 10 runners poll Gitea with nothing to run (what the next jobs feel); /v1/status
    // says so once a pass has seen them up: the next cron tick, here every TICK_MS.
    let inGitea;
    const back = await waitFor(
      async () => {
        inGitea ??=
          (await warm.gitea("state")).runners.filter((r) => Date.now() - (r.lastOnline ?? 0) < 2 * FETCH_MS && r.task === undefined).length >= 10
            ? Date.now()
            : undefined;
        return inGitea !== undefined && (await warm.status()).idle >= 10;
      },
      120_000,
      "back at 10 warm runners",
    );
    backAtTargetMs = { gitea: inGitea - warmBurst.lastTakenAt, status: back - warmBurst.lastTakenAt };
    // The window closes: the same pool, its target now 2, seen by the next tick of any isolate.
    log("pools: the target drops from 10 to 2; one tick of a Worker that sees it");
    const closed = await startWorker({ ...warm.vars, RUNNER_POOLS: JSON.stringify([{ name: "p", backend: "pod", labels: LABELS, minIdle: 2 }]) });
    try {
      const t = performance.now();
      await closed.tick();
      const tickMs = performance.now() - t;
      const after = await (await fetch(`${closed.url}/v1/status`, { headers: { authorization: `Bearer ${warm.vars.DISPATCH_TOKEN}` } })).json();
      surplus = { tickMs, idleAfterOneTick: after.pools[0].idle, warmAfterOneTick: after.pools[0].warm, target: 2 };
    } finally {
      closed.stop();
    }
  } finally {
    warm.stop();
  }

  log(`pools: ${jobs} jobs at minIdle 5, 4 queued a second`);
  const long = await stack("poollong", { minIdle: 5 });
  let perJob;
  try {
    await waitFor(async () => (await long.status()).idle >= 5, 120_000, "5 warm runners");
    const ids = [];
    for (let i = 0; i < jobs; i += 4) {
      ids.push(
        ...(
          await long.gitea(
            "queue",
            Array.from({ length: Math.min(4, jobs - i) }, () => ({ labels: ["ubuntu-latest"] })),
          )
        ).jobs,
      );
      await new Promise((r) => setTimeout(r, 1_000));
    }
    await waitFor(
      async () => (await long.gitea("actions")).jobs.filter((j) => ids.includes(j.id) && j.status === "completed").length === jobs,
      300_000,
      `${jobs} jobs completed`,
    );
    const created = (await backendCounts(long.vars)).created;
    const count = (name) => long.worker.events.filter((e) => e.event === name).length;
    const replaced = count("warm_recycled") + count("boot_timeout");
    const taken = (await long.gitea("actions")).taken.filter((t) => ids.includes(t.job));
    const waits = taken.map((t) => t.at - t.queuedAt);
    perJob = {
      jobs,
      created,
      perJob: created / jobs,
      bound: 1 + (5 + replaced) / jobs,
      replaced,
      warmTook: taken.filter((t) => t.runner.includes("-warm-")).length,
      warmFilled: count("warm_filled"),
      converted: count("warm_converted"),
      ended: count("taken_by_other"),
      p50Ms: percentile(waits, 50),
      p99Ms: percentile(waits, 99),
    };
  } finally {
    long.stop();
  }
  return { bootMs: BOOT_MS, fetchMs: FETCH_MS, tickMs: TICK_MS, cold: coldBurst, warm: warmBurst, backAtTargetMs, surplus, long: perJob };
}
