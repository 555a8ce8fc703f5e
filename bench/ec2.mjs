// npm run bench:ec2: the ec2 driver against the fake EC2 API (SigV4 checked, every request read
// through the model), the Worker in workerd (Miniflare), NATS and the fake Gitea on loopback.
// Instances boot and run a simulated runner that fetches its launch once, claims, works, completes,
// and watches its IMDS for a Spot notice (every 200 ms here; 5 s on EC2). Prints, and writes to
// bench/results/ec2.json:
//   - EC2 requests per job, by action, one job at a time (the sweep's DescribeInstances included);
//   - the time from a Spot notice before the claim to the replacement's claim, p50/p90;
//   - BENCH_EC2_JOBS (200) jobs on Spot with a fifth of their instances interrupted at a random
//     moment (before or after the claim): every job done, or rerun once and done, and 0 instances left.
import { mkdirSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { FAKE_GITEA, startFakeGitea } from "../scripts/fake-gitea.mjs";
import { FAKE_AWS, FAKE_REGION, startFakeEc2 } from "../scripts/fake-ec2.mjs";
import { startNatsServer } from "../scripts/nats-server.mjs";
import { loadConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { withNats } from "../src/nats/connection.ts";
import { percentile, startWorker } from "./lib.mjs";

const SERIAL = Number(process.env.BENCH_EC2_SERIAL ?? 20);
const NOTICES = Number(process.env.BENCH_EC2_NOTICES ?? 10);
const JOBS = Number(process.env.BENCH_EC2_JOBS ?? 200);
const log = (...a) => console.error("[bench:ec2]", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const nats = await startNatsServer();
const gitea = await startFakeGitea();
const ec2 = await startFakeEc2();
const secret = randomBytes(16).toString("hex");
let n = 0;

function varsFor(name, capacity) {
  const s = `EC2${++n}_${name}`;
  return {
    NATS_URL: nats.wsUrl,
    TRUST_DOMAIN: "bench.local",
    DISPATCH_TOKEN: "bench-dispatch-token-0000",
    CLAIM_SIGNING_KEY: "bench-claim-signing-key-000000000000000",
    ASSIGNMENT_STREAM: s,
    ASSIGNMENT_SUBJECT_BASE: `bench.${s.toLowerCase()}`,
    CAPACITY_POD: "0",
    CAPACITY_VM: String(capacity),
    BATCH_SIZE: "64",
    VM_DRIVER: "ec2",
    EC2_API_URL: `${ec2.url}/${s}/`,
    EC2_REGION: FAKE_REGION,
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
    VM_TEMPLATE: JSON.stringify({ ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large" }),
    RUNNER_POOLS: JSON.stringify([
      {
        name: "spot",
        backend: "vm",
        labels: ["ubuntu-latest"],
        candidates: [
          { InstanceType: "m7i.large", SubnetId: "subnet-0a0a0a0a" },
          { InstanceType: "m6i.large", SubnetId: "subnet-0b0b0b0b" },
        ],
        market: "spot",
        spotFallback: "on-demand",
      },
    ]),
    GITEA_URL: `${gitea.url}/${s}`,
    GITEA_API_TOKEN: FAKE_GITEA.apiToken,
    GITEA_WEBHOOK_SECRET: secret,
    RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
    GITEA_JOB_PAGES: "0",
    RETRY_DELAY_MS: "500",
  };
}
async function provisioned(vars) {
  const config = loadConfig({ ...vars, PUBLIC_URL: "http://x" });
  await withNats(config, (h) => provision(h, config));
}
const account = (vars) => vars.EC2_API_URL.replace(/\/$/, "");
const ctl = async (base, what, body) => (await fetch(`${base}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {})).json();

/** A fresh scene: the Worker, Gitea (1.27, delivering its webhooks to the Worker) and the account's mode. */
async function scene(name, capacity, mode) {
  const vars = varsFor(name, capacity);
  await provisioned(vars);
  await ctl(account(vars), "mode", { bootMs: 300, ...mode });
  const worker = await startWorker(vars, undefined, "miniflare");
  // 1.27: its simulated runners claim through the Worker only, never a FetchTask, which is where 1.26 numbers a job.
  await ctl(vars.GITEA_URL, "version", { version: "1.27.0" });
  await ctl(vars.GITEA_URL, "webhook", { url: `${worker.url}/v1/gitea/webhook`, secret });
  const state = () => ctl(account(vars), "state");
  const queue = async (k) =>
    (
      await ctl(
        vars.GITEA_URL,
        "queue",
        Array.from({ length: k }, () => ({ labels: ["ubuntu-latest"] })),
      )
    ).jobs;
  return { vars, worker, state, queue };
}

/** Ticks every `everyMs` until `done()` or `timeoutMs`. */
async function until(worker, done, timeoutMs, everyMs = 1_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done()) && Date.now() < deadline) {
    await worker.tick();
    await sleep(everyMs);
  }
}

const completedIds = (worker) => new Set(worker.events.filter((e) => e.event === "completed").map((e) => e.assignment));
const live = (st) => st.instances.filter((i) => i.state !== "terminated").length;

async function serial() {
  const s = await scene("serial", 10, { simulate: { jobMs: 300, watchMs: 200 } });
  try {
    const ids = [];
    for (let i = 0; i < SERIAL; i++) {
      const [job] = await s.queue(1);
      ids.push(`gitea-${job}-1`);
      await until(s.worker, async () => completedIds(s.worker).has(ids.at(-1)), 30_000, 300);
    }
    await until(s.worker, async () => live(await s.state()) === 0, 30_000);
    const st = await s.state();
    const byAction = {};
    for (const r of st.requests) byAction[r.action ?? "?"] = (byAction[r.action ?? "?"] ?? 0) + 1;
    const done = ids.filter((id) => completedIds(s.worker).has(id)).length;
    return {
      jobs: SERIAL,
      completed: done,
      instancesLeft: live(st),
      requestsPerJob: +(st.requests.length / SERIAL).toFixed(2),
      perJob: Object.fromEntries(Object.entries(byAction).map(([k, v]) => [k, +(v / SERIAL).toFixed(2)])),
      errors: st.requests.filter((r) => r.error).length,
    };
  } finally {
    s.worker.stop();
  }
}

async function noticeToClaim() {
  // Claims 5 s after boot: a notice at boot comes before the claim.
  const s = await scene("notice", 10, { simulate: { jobMs: 300, watchMs: 200, claimAfterMs: 5_000 } });
  const times = [];
  try {
    for (let k = 0; k < NOTICES; k++) {
      const [job] = await s.queue(1);
      const id = `gitea-${job}-1`;
      let first;
      await until(
        s.worker,
        async () => (first = (await s.state()).instances.find((i) => i.tags["gdr-assignment"] === id && i.state === "running")),
        20_000,
        100,
      );
      if (!first) continue;
      const at = Date.now();
      await ctl(account(s.vars), "interrupt", { id: first.id });
      await until(s.worker, async () => s.worker.events.some((e) => e.event === "claimed" && e.assignment === id), 60_000, 200);
      const claimed = s.worker.events.find((e) => e.event === "claimed" && e.assignment === id);
      if (claimed) times.push(claimed.seenAt - at);
    }
    await until(s.worker, async () => live(await s.state()) === 0, 30_000);
    times.sort((a, b) => a - b);
    return { notices: NOTICES, claimed: times.length, p50Ms: percentile(times, 50), p90Ms: percentile(times, 90), instancesLeft: live(await s.state()) };
  } finally {
    s.worker.stop();
  }
}

async function spotMix() {
  const s = await scene("mix", 60, { simulate: { jobMs: 3_000, watchMs: 200, claimAfterMs: 1_000 } });
  const started = Date.now();
  try {
    const jobs = await s.queue(JOBS);
    const interrupted = new Set();
    const chosen = new Set(jobs.filter((_, k) => k % 5 === 0));
    const lost = new Set();
    const deadline = Date.now() + 20 * 60_000;
    for (;;) {
      const st = await s.state();
      for (const i of st.instances) {
        const job = Number(/^gitea-(\d+)-1$/.exec(i.tags["gdr-assignment"] ?? "")?.[1]);
        // Each chosen job's first instance, at a random moment of its life (its claim comes 1 s after boot, its job takes 3 s).
        if (chosen.has(job) && !interrupted.has(job) && i.state === "running" && i.market === "spot") {
          interrupted.add(job);
          setTimeout(() => void ctl(account(s.vars), "interrupt", { id: i.id, noticeMs: 10_000 }).catch(() => undefined), Math.random() * 3_500);
        }
      }
      // Gitea gives up on a lost task (its zombie timeout, fast-forwarded): the run fails, and may be rerun.
      for (const e of s.worker.events.filter((x) => x.event === "interrupted_after_claim")) {
        const job = Number(/^gitea-(\d+)-1$/.exec(e.assignment)?.[1]);
        if (!lost.has(job)) {
          lost.add(job);
          await ctl(s.vars.GITEA_URL, "fail-lost", { id: job });
        }
      }
      const done = completedIds(s.worker);
      const finished = jobs.filter((j) => done.has(`gitea-${j}-1`) || done.has(`gitea-${j}-2`));
      if ((finished.length === jobs.length && live(st) === 0) || Date.now() > deadline) break;
      await s.worker.tick();
      await sleep(500);
    }
    const st = await s.state();
    const done = completedIds(s.worker);
    const count = (event) => s.worker.events.filter((e) => e.event === event).length;
    const actions = await ctl(s.vars.GITEA_URL, "actions");
    return {
      jobs: JOBS,
      interrupted: interrupted.size,
      beforeClaim: count("interrupted_before_claim"),
      afterClaim: count("interrupted_after_claim"),
      rerunsAsked: count("rerun_asked"),
      giteaReruns: actions.reruns,
      doneFirstTime: jobs.filter((j) => done.has(`gitea-${j}-1`)).length,
      doneOnRerun: jobs.filter((j) => done.has(`gitea-${j}-2`)).length,
      notDone: jobs.filter((j) => !done.has(`gitea-${j}-1`) && !done.has(`gitea-${j}-2`)).length,
      instances: st.instances.length,
      instancesLeft: live(st),
      onDemand: st.instances.filter((i) => i.market === "on-demand").length,
      requests: st.requests.length,
      seconds: Math.round((Date.now() - started) / 1000),
    };
  } finally {
    s.worker.stop();
  }
}

try {
  log(`${SERIAL} jobs one at a time`);
  const one = await serial();
  log(JSON.stringify(one));
  log(`${NOTICES} notices before the claim`);
  const notice = await noticeToClaim();
  log(JSON.stringify(notice));
  log(`${JOBS} Spot jobs, a fifth interrupted`);
  const mix = await spotMix();
  log(JSON.stringify(mix));
  mkdirSync("bench/results", { recursive: true });
  writeFileSync("bench/results/ec2.json", `${JSON.stringify({ at: new Date().toISOString(), serial: one, notice, mix }, null, 2)}\n`);
  console.log(
    [
      `EC2 requests per job:        ${one.requestsPerJob} (${Object.entries(one.perJob)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}), ${one.completed}/${one.jobs} completed, ${one.instancesLeft} instances left, ${one.errors} refused`,
      `notice → replacement claim:  p50 ${notice.p50Ms} ms, p90 ${notice.p90Ms} ms (${notice.claimed}/${notice.notices} claimed)`,
      `${mix.jobs} Spot jobs, ${mix.interrupted} interrupted (${mix.beforeClaim} before the claim, ${mix.afterClaim} after): ${mix.doneFirstTime} done, ${mix.doneOnRerun} done on their rerun (${mix.rerunsAsked} reruns asked, ${mix.giteaReruns} taken by Gitea), ${mix.notDone} not done, ${mix.instancesLeft} of ${mix.instances} instances left (${mix.onDemand} on-demand), ${mix.seconds} s`,
    ].join("\n"),
  );
} finally {
  await ec2.close();
  await gitea.close();
  await nats.stop();
}
