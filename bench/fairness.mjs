// The `fairness` section: the scenario, at capacity 10, with runners that boot in 0.1 s,
// poll Gitea every 0.2 s and run their job 2 to 4 s: 200 jobs of a/mono queued, then 1 of b/fix,
// then 5 of c/app. Run twice in the same bench: fair share with runners registered at the job's
// repository, and first come first served with runners registered at the instance (before #22).
// For each: b/fix's time from queued to a runner asked for and to in_progress, jobs per second
// against the ceiling (capacity over the mean run time), and per assignment the NATS operations
// (through the counting proxy) and the Worker's CPU.
import { wsconnect } from "@nats-io/nats-core";
import { jetstreamManager } from "@nats-io/jetstream";
import { giteaControl, percentile as pick, proxyOps, sum, workerCpuMs } from "./lib.mjs";

const CAPACITY = 10;
const runMs = () => 2_000 + Math.floor(Math.random() * 2_000);
const TICK_MS = 5_000;

export async function measureFairness({ varsFor, provisioned, startWorker, backendMode, webhookSecret, proxy, nats, log }) {
  const run = async (name, vars) => {
    await provisioned(vars);
    await backendMode(vars, { runner: true, bootMs: 100, fetchIntervalMs: 200, jobMs: 2_000 });
    const tag = `fair-${vars.ASSIGNMENT_STREAM}`;
    const worker = await startWorker({ ...vars, NATS_URL: proxy.url(tag) });
    const gitea = giteaControl(vars);
    const ticker = setInterval(() => worker.tick().catch(() => undefined), TICK_MS);
    try {
      await gitea("webhook", { url: `${worker.url}/v1/gitea/webhook`, secret: webhookSecret });
      const ops = () => proxyOps(proxy, tag);
      const ops0 = ops();
      const cpu0 = workerCpuMs(worker.pid);
      const queue = async (repository, n) =>
        (
          await gitea(
            "queue",
            Array.from({ length: n }, () => ({ labels: ["ubuntu-latest"], repository, runMs: runMs() })),
          )
        ).jobs;
      log(`fairness (${name}): 200 jobs of a/mono, then 1 of b/fix, then 5 of c/app; capacity ${CAPACITY}`);
      const mono = await queue("a/mono", 200);
      const [fix] = await queue("b/fix", 1);
      const app = await queue("c/app", 5);
      const ids = [...mono, fix, ...app];
      const end = Date.now() + 300_000;
      for (;;) {
        const { jobs } = await gitea("actions");
        if (jobs.filter((j) => ids.includes(j.id)).every((j) => j.status === "completed")) break;
        if (Date.now() > end) throw new Error(`fairness (${name}): not every job completed in 300 s`);
        await new Promise((r) => setTimeout(r, 250));
      }
      const cpuMs = workerCpuMs(worker.pid) - cpu0;
      const opsUsed = ops() - ops0;
      const { jobs, taken } = await gitea("actions");
      const mine = jobs.filter((j) => ids.includes(j.id));
      const fixJob = mine.find((j) => j.id === fix);
      // The backend's log of calls: the first PUT of b/fix's runner is when it was asked for.
      const { requests } = await fetch(`${vars.POD_BACKEND_URL}/_control/state`).then((r) => r.json());
      const asked = requests.find((q) => q.method === "PUT" && q.path.endsWith(`/gitea-${fix}-1`));
      const queuedAt = Date.parse(fixJob.created_at);
      const span = Math.max(...mine.map((j) => j.completedMs)) - Math.min(...mine.map((j) => j.startedMs));
      const meanRunMs = sum(mine.map((j) => j.completedMs - j.startedMs)) / mine.length;
      const jobsPerSec = (mine.length / span) * 1_000;
      const ceiling = (CAPACITY / meanRunMs) * 1_000;
      const appTaken = taken.filter((t) => app.includes(t.job)).map((t) => t.at - t.queuedAt);
      return {
        fix: { toRunnerAskedMs: asked ? asked.at - queuedAt : null, toInProgressMs: fixJob.startedMs - queuedAt },
        appToInProgressP50Ms: pick(
          [...appTaken].sort((a, b) => a - b),
          50,
        ),
        completed: mine.filter((j) => j.conclusion === "success").length,
        takenTwice: taken.filter((t) => ids.includes(t.job)).length - new Set(taken.map((t) => t.job)).size,
        jobsPerSec,
        ceiling,
        ofCeiling: jobsPerSec / ceiling,
        natsOpsPerAssignment: opsUsed / ids.length,
        workerCpuMsPerAssignment: cpuMs / ids.length,
      };
    } finally {
      clearInterval(ticker);
      worker.stop();
    }
  };
  const base = { CAPACITY_POD: String(CAPACITY), GITEA_JOB_PAGES: "0" };
  const fair = await run("fair share, RUNNER_SCOPE=repository", varsFor("fairon", { ...base, RUNNER_SCOPE: "repository", FAIR_SHARE: "on" }));
  const fifo = await run("first come first served, RUNNER_SCOPE=instance", varsFor("fairoff", { ...base, RUNNER_SCOPE: "instance", FAIR_SHARE: "off" }));
  const backlog = await measureBacklog({ varsFor, provisioned, startWorker, backendMode, log, nats, jobs: BACKLOG_JOBS });
  return { capacity: CAPACITY, fair, fifo, backlog };
}

const BACKLOG_JOBS = Number(process.env.BENCH_BACKLOG_JOBS ?? 2_000);

/**
 * A backlog of `jobs` at capacity 10 (fair share on, four repositories): every job completes,
 * and no message comes near MaxDeliver. Runners claim at once and complete 0.2 s later through the
 * API; passes are started by those claims and releases and by a cron tick every 5 s. Every
 * MaxDeliver advisory of the consumer is counted.
 */
async function measureBacklog({ varsFor, provisioned, startWorker, backendMode, log, nats, jobs }) {
  const vars = varsFor("backlog", { CAPACITY_POD: String(CAPACITY), FAIR_SHARE: "on" });
  await provisioned(vars);
  await backendMode(vars, { autoClaimMs: 0, autoCompleteMs: 200 });
  const worker = await startWorker(vars);
  const nc = await wsconnect({ servers: nats });
  const advisories = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${vars.ASSIGNMENT_STREAM}.>`);
  let maxDelivered = 0;
  void (async () => {
    for await (const _ of advisories) maxDelivered++;
  })();
  const ticker = setInterval(() => worker.tick().catch(() => undefined), TICK_MS);
  try {
    log(`fairness: a backlog of ${jobs} jobs at capacity ${CAPACITY}, four repositories`);
    const started = Date.now();
    const post = (i) =>
      fetch(`${worker.url}/v1/assignments`, {
        method: "POST",
        headers: { authorization: `Bearer ${vars.DISPATCH_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({
          version: 1,
          id: `backlog-${i}`,
          backend: "pod",
          labels: ["ubuntu-latest"],
          job: { id: i, runId: i, attempt: 1, repository: `o${i % 4}/r` },
        }),
      }).then((r) => r.arrayBuffer());
    for (let i = 0; i < jobs; i += 20) await Promise.all(Array.from({ length: Math.min(20, jobs - i) }, (_, k) => post(i + k)));
    const end = Date.now() + 900_000;
    const completed = () => worker.events.filter((e) => e.event === "completed").length;
    while (completed() < jobs) {
      if (Date.now() > end) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const wallMs = Date.now() - started;
    const state = await fetch(`${vars.POD_BACKEND_URL}/_control/state?brief`).then((r) => r.json());
    const jsm = await jetstreamManager(nc);
    // The last runners' messages are acked by the pass after their claim: wait for it (a tick).
    for (let i = 0; i < 40 && (await jsm.streams.info(vars.ASSIGNMENT_STREAM)).state.messages > 0; i++) await new Promise((r) => setTimeout(r, 250));
    const consumer = await jsm.consumers.info(vars.ASSIGNMENT_STREAM, "pod");
    const stream = await jsm.streams.info(vars.ASSIGNMENT_STREAM);
    return {
      jobs,
      completed: completed(),
      created: state.created,
      wallMs,
      deliveriesPerJob: consumer.delivered.consumer_seq / jobs,
      leftInStream: stream.state.messages,
      maxDeliveriesAdvisories: maxDelivered,
    };
  } finally {
    clearInterval(ticker);
    worker.stop();
    await nc.close();
  }
}
