// The `forgejo` section: FORGE=forgejo against the fake Forgejo 15, the poller on its Durable Object
// alarm at FORGEJO_POLL_MS 3000. An idle minute first (what polling costs Forgejo when nothing
// waits: one request per period is the goal), then jobs queued one by one at random moments:
// the time from a job waiting in Forgejo to its runner asked of the backend (the goal: p50 ≤ half
// the period + 300 ms), and Forgejo API requests per job beside the polls. Runners run as
// forgejo-runner one-job --handle does (fake-runner.mjs), each bound to its job.
import { FAKE_FORGEJO, startFakeForgejo } from "../scripts/fake-forgejo.mjs";
import { percentile as pick, proxyOps, workerCpuMs } from "./lib.mjs";

const percentile = (xs, p) =>
  pick(
    [...xs].sort((a, b) => a - b),
    p,
  );
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** The cron, as Cloudflare runs it: once a minute. */
const CRON_MS = 60_000;

export async function measureForgejo({ varsFor, provisioned, startWorker, backendMode, log, proxy, jobs = 40, pollMs = 3_000, idleMs = 60_000 }) {
  const forgejo = await startFakeForgejo();
  const base = varsFor("forgejo", { FORGE: "forgejo", GITEA_API_TOKEN: FAKE_FORGEJO.apiToken, FORGEJO_POLL_MS: String(pollMs), RETRY_DELAY_MS: "500" });
  const vars = { ...base, GITEA_URL: `${forgejo.url}/${base.ASSIGNMENT_STREAM}` };
  const control = async (what, body) =>
    (await fetch(`${vars.GITEA_URL}/_control/${what}`, body === undefined ? {} : { method: "POST", body: JSON.stringify(body) })).json();
  // The Worker's calls to Forgejo's REST API (runners' own protocol calls are not the Worker's).
  const apiCalls = async () => (await control("state")).requests.filter((r) => r.path.startsWith("/api/v1/"));
  await provisioned(vars);
  await backendMode(vars, { runner: true, bootMs: 0, fetchIntervalMs: 500, jobMs: 500 });
  // NATS through the counting proxy (when given): operations and the Worker's CPU, idle and per job.
  const tag = `forgejo-${vars.ASSIGNMENT_STREAM}`;
  const worker = await startWorker(proxy ? { ...vars, NATS_URL: proxy.url(tag) } : vars);
  const cost = () => ({ ops: proxy ? proxyOps(proxy, tag) : NaN, cpuMs: workerCpuMs(worker.pid) });
  const ticker = setInterval(() => worker.tick().catch(() => undefined), CRON_MS);
  try {
    await worker.tick(); // arms the poller
    await sleep(pollMs);
    log(`forgejo: an idle Forgejo for ${idleMs / 1000} s, polled every ${pollMs / 1000} s (the cron ticks once a minute)`);
    const idle0 = (await apiCalls()).length;
    const idleCost0 = cost();
    const t0 = Date.now();
    await sleep(idleMs);
    const idleCalls = (await apiCalls()).slice(idle0);
    const idleMinutes = (Date.now() - t0) / 60_000;
    const idleCost1 = cost();
    const idle = {
      perMinute: idleCalls.length / idleMinutes,
      pollsPerMinute: idleCalls.filter((r) => r.path.endsWith("/actions/runners/jobs")).length / idleMinutes,
      goalPerMinute: 60_000 / pollMs,
      natsOpsPerMinute: (idleCost1.ops - idleCost0.ops) / idleMinutes,
      workerCpuMsPerMinute: (idleCost1.cpuMs - idleCost0.cpuMs) / idleMinutes,
    };

    log(`forgejo: ${jobs} jobs queued one by one, 0.5 to 2.5 s apart`);
    const before = (await apiCalls()).length;
    const jobsCost0 = cost();
    const jobsT0 = Date.now();
    const queued = [];
    for (let i = 0; i < jobs; i++) {
      const [job] = (await control("queue", [{ runs_on: ["ubuntu-latest"], runMs: 500 }])).jobs;
      queued.push({ id: job.id, at: Date.now() });
      await sleep(500 + Math.random() * 2_000);
    }
    const end = Date.now() + 120_000;
    let taken;
    for (;;) {
      const state = await control("state");
      taken = state.taken;
      if (state.jobs.filter((j) => queued.some((q) => q.id === j.id)).every((j) => j.status === "success")) break;
      if (Date.now() > end) throw new Error("forgejo: not every job ran within 120 s");
      await sleep(500);
    }
    // Until every finished job's runner is seen gone by a poll.
    await sleep(2 * pollMs);
    const jobCalls = (await apiCalls()).slice(before);
    const jobsCost1 = cost();
    // The polls would have run anyway: what the jobs cost beyond an idle Forgejo's polling.
    const idleShare = (Date.now() - jobsT0) / 60_000;
    const pollTimes = jobCalls.filter((r) => r.path.endsWith("/actions/runners/jobs")).map((r) => r.at);
    const polls = pollTimes.length;
    const gaps = pollTimes.slice(1).map((t, i) => t - pollTimes[i]);
    const puts = (await (await fetch(`${vars.POD_BACKEND_URL}/_control/state`)).json()).requests.filter((r) => r.method === "PUT");
    const putAt = (q) => puts.find((p) => JSON.parse(p.body).assignment.id === `forgejo-${q.id}-1`)?.at;
    const asked = queued.map((q) => putAt(q) - q.at).filter(Number.isFinite);
    // The part that is ours: from the first poll after the job was queued to its runner asked for.
    const afterPoll = queued.map((q) => putAt(q) - pollTimes.find((t) => t >= q.at)).filter(Number.isFinite);
    const boundToOwn = taken.filter((t) => t.runner === `gdr-forgejo-${t.job}-${t.attempt}`).length;
    return {
      pollMs,
      idle,
      jobs,
      toRunnerAsked: { n: asked.length, p50Ms: percentile(asked, 50), p99Ms: percentile(asked, 99), goalP50Ms: pollMs / 2 + 300 },
      afterPoll: { p50Ms: percentile(afterPoll, 50), p99Ms: percentile(afterPoll, 99) },
      pollGap: { p50Ms: percentile(gaps, 50), p99Ms: percentile(gaps, 99), maxMs: Math.max(...gaps) },
      perJob: {
        requests: (jobCalls.length - polls) / jobs,
        byCall: countBy(jobCalls.filter((r) => !r.path.endsWith("/actions/runners/jobs"))),
        pollsMeanwhile: polls,
        natsOps: (jobsCost1.ops - jobsCost0.ops - idle.natsOpsPerMinute * idleShare) / jobs,
        workerCpuMs: (jobsCost1.cpuMs - jobsCost0.cpuMs - idle.workerCpuMsPerMinute * idleShare) / jobs,
      },
      takenByOwnRunner: `${boundToOwn}/${taken.length}`,
    };
  } finally {
    clearInterval(ticker);
    worker.stop();
    await forgejo.close();
  }
}

function countBy(calls) {
  const out = {};
  for (const c of calls) {
    const key = `${c.method} ${c.path.replace(/\/\d+$/, "/{id}")}`;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}
