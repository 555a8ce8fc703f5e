// npm start: the dispatcher on an embedded default stack. A throwaway nats-server, provisioning,
// `wrangler dev` with cron ticks every few seconds, a fake Gitea that hands jobs to polling runners
// as Gitea does, and a fake backend whose runners boot (8 s), poll Gitea every 2 s and run one job.
// A pool keeps two runners warm; a demo queues three jobs once they are up, and the progress says
// which runner took which job, how long after it was queued. Ctrl-C stops everything.
//
// Pointed at a driver by configuration alone (environment or .dev.vars): POD_DRIVER / VM_DRIVER =
// http | kubernetes | kubevirt | hetzner | ec2. With K8S_API_URL the real cluster is used; without it an
// embedded fake Kubernetes API plays the cluster. With hetzner and no HCLOUD_API_URL (ec2 and no
// EC2_API_URL), an embedded fake Hetzner Cloud (EC2) API boots servers that run a simulated runner. Kubernetes drivers need the Gitea integration: without
// GITEA_URL an embedded fake Gitea is started and a signed webhook is printed to try.
// FORGE=forgejo: the same with an embedded fake Forgejo 15, found by the poller (FORGEJO_POLL_MS),
// each runner bound to its job's handle; the warm runners ask the dispatcher for theirs.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { startFakeBackend } from "./fake-backend.mjs";
import { startFakeGitea, FAKE_GITEA } from "./fake-gitea.mjs";
import { DEFAULT_GITEA_VERSION, numbersAtPickup } from "./fake-gitea-releases.mjs";
import { startFakeForgejo, FAKE_FORGEJO } from "./fake-forgejo.mjs";
import { startFakeKubernetes, FAKE_K8S_TOKEN } from "./fake-kubernetes.mjs";
import { startFakeHetzner, FAKE_HCLOUD_TOKEN } from "./fake-hetzner.mjs";
import { startFakeEc2, FAKE_AWS, FAKE_REGION } from "./fake-ec2.mjs";
import { findNatsServer, startNatsServer } from "./nats-server.mjs";
import { startNatsCluster } from "./nats-cluster.mjs";
import { loadEnv } from "./dev-vars.mjs";
import { passedFrom } from "./start-vars.mjs";
import { simulateCluster } from "./simulate-cluster.mjs";
import { ConfigError, loadConfig, loadProvisionConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { withNats } from "../src/nats/connection.ts";
import { giteaSignature } from "../src/forge/gitea/signature.ts";

// Whatever is started is stopped on the way out, a failed start included: a mistake in the
// configuration is one line per problem, naming the variable, and nothing is left running.
const stops = [];
let stopping = false;
let ticker;
process.on("uncaughtException", (err) => {
  console.error(err instanceof ConfigError ? `start: invalid configuration:\n  ${err.problems.join("\n  ")}` : `start failed: ${err?.message ?? err}`);
  void stop(1);
});
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));

const PORT = Number(process.env.PORT ?? 8787);
const TICK_MS = Number(process.env.TICK_MS ?? 5_000);
const base = `http://127.0.0.1:${PORT}`;

try {
  findNatsServer();
} catch (err) {
  console.error(err.message);
  process.exit(1);
}

const user = loadEnv(process.env.DEV_VARS ?? ".dev.vars");
const chosen = passedFrom(user);
const drivers = [chosen.POD_DRIVER ?? "http", chosen.VM_DRIVER ?? "http"];
const needsCluster = drivers.some((d) => d === "kubernetes" || d === "kubevirt");
const ec2 = drivers.includes("ec2");
// A cloud driver: its VMs are the vm backend's (or the pod backend's, if that one names it).
const hetzner = drivers.includes("hetzner");
const cloud = hetzner || ec2;

// NATS_CLUSTER=3 (or 5): a cluster of that many nodes on loopback, NATS_URL listing every node,
// and the layout replicated (JETSTREAM_REPLICAS 3 unless set).
const clusterSize = Number(process.env.NATS_CLUSTER ?? user.NATS_CLUSTER ?? 1);
if (![1, 3, 5].includes(clusterSize)) {
  console.error(`NATS_CLUSTER must be 1, 3 or 5, got ${process.env.NATS_CLUSTER ?? user.NATS_CLUSTER}`);
  process.exit(1);
}
const nats = clusterSize > 1 ? await startNatsCluster({ size: clusterSize }) : await startNatsServer();
stops.push(() => nats.stop());
const natsUrl = clusterSize > 1 ? nats.natsUrl : nats.wsUrl;
// Runners as act_runner behaves: booted after BOOT_MS, polling Gitea every 2 s, one job each.
const BOOT_MS = Number(process.env.BOOT_MS ?? 8_000);
const backend = await startFakeBackend({ mode: { token: "local-backend-token", runner: true, bootMs: BOOT_MS, fetchIntervalMs: 2_000, jobMs: 6_000 } });
stops.push(() => backend.close());
// The Actions cache's demo (docs/cache.md): each runner's job restores its dependencies, else saves them.
const CACHE_SAID = {
  hit: "restored from the cache (a hit)",
  miss: "found no cache entry (a miss)",
  saved: "saved the cache",
  taken: "left the save to another job",
};
let cacheSaved;
const firstSave = new Promise((r) => (cacheSaved = r));
backend.onEvent((e) => {
  if (e.event !== "runner_cache" || !CACHE_SAID[e.result]) return;
  console.log(`[cache] ${e.id}: ${CACHE_SAID[e.result]}`);
  if (e.result === "saved") cacheSaved();
});

const vars = {
  TRUST_DOMAIN: "local.gitea-edge-dispatcher",
  DISPATCH_TOKEN: randomBytes(18).toString("base64url"),
  CLAIM_SIGNING_KEY: randomBytes(32).toString("base64url"),
  STATUS_TOKEN: randomBytes(12).toString("base64url"),
  METRICS_TOKEN: randomBytes(18).toString("base64url"),
  RETRY_DELAY_MS: "1000",
  POD_BACKEND_URL: `${backend.url}/pod`,
  POD_BACKEND_TOKEN: "local-backend-token",
  VM_BACKEND_URL: `${backend.url}/vm`,
  VM_BACKEND_TOKEN: "local-backend-token",
  ...(clusterSize > 1 ? { JETSTREAM_REPLICAS: String(Math.min(clusterSize, 3)) } : {}),
  ...chosen,
  NATS_URL: natsUrl,
  PUBLIC_URL: base,
};

let cluster;
if (needsCluster && !vars.K8S_API_URL) {
  cluster = await startFakeKubernetes();
  stops.push(() => cluster.close());
  Object.assign(vars, { K8S_API_URL: `${cluster.url}/local`, K8S_TOKEN: FAKE_K8S_TOKEN, K8S_NAMESPACE: vars.K8S_NAMESPACE ?? "gitea-runners" });
  if (drivers.includes("kubevirt")) vars.RUNNER_VM_IMAGE ??= "registry.local/act-runner-vm:latest";
}
// VM_DRIVER=hetzner without HCLOUD_API_URL: an embedded fake Hetzner Cloud API whose servers boot
// in BOOT_MS and run a simulated runner (it fetches its launch from the Worker, claims, completes).
if (hetzner && !vars.HCLOUD_API_URL) {
  const fake = await startFakeHetzner({ log: (line) => console.log(line) });
  stops.push(() => fake.close());
  await fetch(`${fake.url}/local/_control/mode`, { method: "POST", body: JSON.stringify({ bootMs: BOOT_MS, simulate: { jobMs: 6_000 } }) });
  Object.assign(vars, { HCLOUD_API_URL: `${fake.url}/local`, HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN });
  vars.VM_TEMPLATE ??= JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" });
}
// VM_DRIVER=ec2 without EC2_API_URL: an embedded fake EC2 API, alike.
if (ec2 && !vars.EC2_API_URL) {
  const fake = await startFakeEc2({ log: (line) => console.log(line.replace("[hetzner] server", "[ec2] instance")) });
  stops.push(() => fake.close());
  await fetch(`${fake.url}/local/_control/mode`, { method: "POST", body: JSON.stringify({ bootMs: BOOT_MS, simulate: { jobMs: 6_000 } }) });
  Object.assign(vars, {
    EC2_API_URL: `${fake.url}/local/`,
    EC2_REGION: FAKE_REGION,
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
  });
  vars.VM_TEMPLATE ??= JSON.stringify({ ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large" });
}
let fakeGitea;
const DEMO_POOL = { name: "small", minIdle: 2, maxRunners: 6 };
const forgejo = vars.FORGE === "forgejo";
const onTake = ({ job, runner, waitedMs }) =>
  console.log(`job ${job} → runner ${runner}, ${(waitedMs / 1000).toFixed(1)} s after it was queued${runner.includes("-warm-") ? " (a warm runner)" : ""}`);
if (forgejo && !vars.GITEA_URL) {
  fakeGitea = await startFakeForgejo({ onTake });
  stops.push(() => fakeGitea.close());
  Object.assign(vars, {
    GITEA_URL: `${fakeGitea.url}/local`,
    GITEA_API_TOKEN: FAKE_FORGEJO.apiToken,
    GITEA_WEBHOOK_SECRET: randomBytes(16).toString("hex"),
    RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
  });
  if (!vars.RUNNER_POOLS && !vars.RUNS_ON_ROUTES)
    vars.RUNNER_POOLS = JSON.stringify([{ ...DEMO_POOL, backend: "pod", labels: ["ubuntu-latest:docker://node:22-bookworm"] }]);
  // Forgejo's run-level webhook: the fake sends action_run_* to the Worker once a run is done.
  await fetch(`${vars.GITEA_URL}/_control/webhook`, {
    method: "POST",
    body: JSON.stringify({ url: `${base}/v1/forgejo/webhook`, secret: vars.GITEA_WEBHOOK_SECRET }),
  });
}
let giteaVersion;
if (!vars.GITEA_URL) {
  fakeGitea = await startFakeGitea({ onTake });
  stops.push(() => fakeGitea.close());
  const backendOf = needsCluster || cloud ? (vars.POD_DRIVER && vars.POD_DRIVER !== "http" ? "pod" : "vm") : "pod";
  const labels = ["ubuntu-latest:docker://node:20-bookworm"];
  Object.assign(vars, {
    GITEA_URL: `${fakeGitea.url}/local`,
    GITEA_API_TOKEN: FAKE_GITEA.apiToken,
    GITEA_WEBHOOK_SECRET: randomBytes(16).toString("hex"),
    RUNNER_IDENTITY_KEY: randomBytes(32).toString("base64"),
  });
  if (!vars.RUNNER_POOLS && !vars.RUNS_ON_ROUTES) {
    // The embedded Kubernetes and Hetzner APIs do not run act_runner: warm runners there would never poll.
    if (needsCluster || cloud) vars.RUNS_ON_ROUTES = JSON.stringify([{ backend: backendOf, labels }]);
    else vars.RUNNER_POOLS = JSON.stringify([{ ...DEMO_POOL, backend: backendOf, labels }]);
  }
  // The release the fake plays (GITEA_VERSION, default 1.27): the Worker reads it from the fake's
  // GET /api/v1/version, as from a real Gitea, rather than being told.
  giteaVersion = vars.GITEA_VERSION ?? DEFAULT_GITEA_VERSION;
  delete vars.GITEA_VERSION;
  await fetch(`${vars.GITEA_URL}/_control/version`, { method: "POST", body: JSON.stringify({ version: giteaVersion }) });
  // Gitea's webhook: the fake delivers each workflow_job to the Worker, signed with its secret.
  await fetch(`${vars.GITEA_URL}/_control/webhook`, {
    method: "POST",
    body: JSON.stringify({ url: `${base}/v1/gitea/webhook`, secret: vars.GITEA_WEBHOOK_SECRET }),
  });
}
// The Worker's own checks, before wrangler starts it: every problem at once, by variable.
loadConfig(vars);
await withNats(loadProvisionConfig(vars), (h) => provision(h, loadProvisionConfig(vars)));

// The variables, secrets among them, go to wrangler in a file only this user can read: on a
// command line, `ps` would show them to everyone on the machine.
const varsDir = mkdtempSync(join(tmpdir(), "gdr-start-"));
const envFile = join(varsDir, "worker.env");
writeFileSync(
  envFile,
  Object.entries(vars)
    .map(([k, v]) => `${k}=${dotenvQuote(v)}`)
    .join("\n") + "\n",
  { mode: 0o600 },
);
stops.push(() => rmSync(varsDir, { recursive: true, force: true }));
const args = [
  "wrangler",
  "dev",
  "--ip",
  "127.0.0.1",
  "--port",
  String(PORT),
  "--test-scheduled",
  "--show-interactive-dev-session=false",
  "--env-file",
  envFile,
];
// Its own process group: npx, wrangler and workerd all go with one signal, and none is left
// holding the port.
const wrangler = spawn("npx", args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, detached: true });
stops.unshift(() => stopGroup(wrangler));
if (cluster) stops.unshift(simulateCluster(vars.K8S_API_URL, { namespace: vars.K8S_NAMESPACE, log: (line) => console.log(line) }));

const STEPS = { published: "published", capacity_acquired: "admitted", backend_ready: "ready", claimed: "claimed", acked: "acked", completed: "completed" };
const progress = new Map();
for (const stream of [wrangler.stdout, wrangler.stderr]) {
  createInterface({ input: stream }).on("line", (line) => {
    const start = line.indexOf("{");
    let e;
    try {
      e = start >= 0 ? JSON.parse(line.slice(start)) : undefined;
    } catch {
      e = undefined;
    }
    if (!e) {
      if (/\[ERROR\]|✘|ready on/i.test(line)) console.log(`[wrangler] ${line}`);
      if (/ready on/i.test(line)) announce();
      return;
    }
    const step = STEPS[e.event];
    if (step && e.assignment) {
      const seen = progress.get(e.assignment) ?? [];
      if (seen.includes(step)) return;
      seen.push(step);
      progress.set(e.assignment, seen);
      console.log(`${e.assignment} (${e.backend}): ${seen.join(" → ")}`);
    } else if (
      [
        "capacity_wait",
        "backend_retry",
        "backend_auth",
        "claim_timeout",
        "invalid",
        "conflict",
        "no_route",
        "cancelled",
        "recovered",
        "error",
        "warm_filled",
        "warm_took_job",
        "warm_converted",
        "taken_by_other",
        "warm_scaled_down",
        "warm_recycled",
        "boot_timeout",
        "boot_gave_up",
        "lifetime_reached",
        "poller_armed",
        "forgejo_poll_failed",
        "forgejo_poll_recovered",
        "handle_conflict",
        "unbindable_job",
        "backend_full",
        "orphan_deleted",
        "bootstrap_taken",
      ].includes(e.event)
    ) {
      console.log(`${e.assignment ?? ""} ${e.event}${e.reason ? `: ${e.reason}` : ""}${e.message ? `: ${e.message}` : ""}`);
    }
  });
}

let announced = false;
async function announce() {
  if (announced) return;
  announced = true;
  ticker = setInterval(() => fetch(`${base}/__scheduled?cron=*+*+*+*+*`).catch(() => undefined), TICK_MS);
  console.log(`
gitea-edge-dispatcher on ${base}   (${clusterSize > 1 ? `${clusterSize}-node NATS cluster` : "nats-server"} ${natsUrl}, cron tick every ${TICK_MS / 1000}s)
drivers: pod=${drivers[0]} vm=${drivers[1]}${cluster ? ` (embedded fake Kubernetes API at ${vars.K8S_API_URL})` : ""}
Try:
  # An assignment published by hand, with no ${forgejo ? "Forgejo" : "Gitea"} job behind it: its runner comes up and waits for
  # a job that never comes, so demo-1 stays backend_ready (never claimed) until its claim timeout
  # (${Number(vars.CLAIM_TIMEOUT_MS ?? 240_000) / 1000} s), is then torn down and asked for again.${fakeGitea ? " A job queued in the embedded Gitea (below) does run and complete." : ""}
  curl -s -X POST ${base}/v1/assignments -H 'authorization: Bearer ${vars.DISPATCH_TOKEN}' \\
    -H 'content-type: application/json' -d '{"version":1,"id":"demo-1","backend":"pod","labels":["ubuntu-latest"]}'
  curl -s ${base}/v1/assignments/demo-1 -H 'authorization: Bearer ${vars.DISPATCH_TOKEN}'
  curl -s ${base}/healthz
  curl -s ${base}/metrics -H 'authorization: Bearer ${vars.METRICS_TOKEN}'
Status page: ${base}/status   (any user name, password: ${vars.STATUS_TOKEN})`);
  if (fakeGitea && forgejo) {
    console.log(`  # a workflow run queues a job in the embedded Forgejo; the poller finds it within ${Number(vars.FORGEJO_POLL_MS ?? 3000) / 1000} s:
  curl -s -X POST ${vars.GITEA_URL}/_control/queue -d '[{"runs_on":["ubuntu-latest"]}]'`);
  } else if (fakeGitea) {
    console.log(`  # a workflow run queues a job in the embedded Gitea ${giteaVersion} (GITEA_VERSION picks another), which sends the webhook and hands the job to a runner:
  curl -s -X POST ${vars.GITEA_URL}/_control/queue -d '[{"labels":["ubuntu-latest"]}]'`);
  }
  demo();
  if (vars.GITEA_WEBHOOK_SECRET && !forgejo) {
    // Next to the Worker's variables, so that stopping removes it too.
    const file = join(varsDir, "queued.json");
    const body = JSON.stringify({
      action: "queued",
      // A first run's queued: 0 before 1.27 (attempts numbered at pickup), 1 on 1.27.
      workflow_job: {
        id: 1187,
        run_id: 311,
        run_attempt: giteaVersion && numbersAtPickup(giteaVersion) ? 0 : 1,
        name: "build",
        labels: ["ubuntu-latest"],
        status: "queued",
        created_at: new Date().toISOString(),
      },
      repository: { full_name: "acme/widgets" },
    });
    writeFileSync(file, body);
    const sig = await giteaSignature(vars.GITEA_WEBHOOK_SECRET, new TextEncoder().encode(body));
    console.log(`  # a signed Gitea workflow_job delivery:
  curl -s -X POST ${base}/v1/gitea/webhook -H 'content-type: application/json' -H 'x-gitea-event-type: workflow_job' \\
    -H 'x-gitea-signature: ${sig}' --data-binary @${file}`);
  }
  console.log("");
}

/** Once the demo pool's warm runners are up: three jobs, two for the warm runners, one for a cold boot. */
async function demo() {
  if (!fakeGitea || process.env.START_DEMO === "off") return;
  if (cloud && !forgejo && vars.RUNS_ON_ROUTES) {
    // A cloud driver's demo: one job, one server (instance) created for it, its runner fetching its launch, the job, the delete.
    const what = ec2 ? "an instance (EC2)" : "a server (Hetzner Cloud)";
    console.log(
      `\nQueueing 1 job: the embedded cloud makes ${what} for it, which boots (${BOOT_MS / 1000} s), fetches its launch once, runs the job and is deleted.`,
    );
    await fetch(`${vars.GITEA_URL}/_control/queue`, { method: "POST", body: JSON.stringify([{ labels: ["ubuntu-latest"] }]) });
    return;
  }
  if (!vars.RUNNER_POOLS) return;
  const target = JSON.parse(vars.RUNNER_POOLS)[0]?.minIdle ?? 0;
  for (;;) {
    await new Promise((r) => setTimeout(r, 1_000));
    if (stopping) return;
    const res = await fetch(`${base}/v1/status`, { headers: { authorization: `Bearer ${vars.DISPATCH_TOKEN}` } }).catch(() => undefined);
    const pools = res?.ok ? (await res.json()).pools : [];
    if (pools[0] && pools[0].idle >= target) break;
  }
  const found = forgejo ? `the poller finds them within ${Number(vars.FORGEJO_POLL_MS ?? 3000) / 1000} s and gives` : "Gitea hands";
  console.log(
    `\n${target} warm runners are up. Queueing ${target + 1} jobs: ${found} ${target} to the warm runners, which start within about 2 s (their fetch interval); the last waits for a cold runner to boot (${BOOT_MS / 1000} s).`,
  );
  const job = forgejo ? { runs_on: ["ubuntu-latest"] } : { labels: ["ubuntu-latest"] };
  await fetch(`${vars.GITEA_URL}/_control/queue`, { method: "POST", body: JSON.stringify(Array.from({ length: target + 1 }, () => job)) });
  if (forgejo) return;
  // Once a job saved its dependencies in the Actions cache, one more job of the same repository restores them.
  await firstSave;
  if (stopping) return;
  console.log("\nA job saved its dependencies in the Actions cache. Queueing one more job of the same repository: its runner restores them.");
  await fetch(`${vars.GITEA_URL}/_control/queue`, { method: "POST", body: JSON.stringify([job]) });
}

async function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  clearInterval(ticker);
  for (const s of stops) await s();
  process.exit(code);
}
wrangler.on("exit", (code) => stop(code ?? 1));
// Whatever started us (npm, a shell) went away without passing a signal on: stop too, rather than
// keep the port and a nats-server with nobody to stop them.
const parent = process.ppid;
setInterval(() => process.ppid !== parent && stop(0), 500).unref();

/** SIGTERM to the child's process group, SIGKILL if it is still there after 5 s; resolves once it exited. */
async function stopGroup(child) {
  if (child.exitCode !== null || child.signalCode !== null) return signalGroup(child, "SIGKILL");
  const exited = new Promise((r) => child.once("exit", r));
  signalGroup(child, "SIGTERM");
  const timer = setTimeout(() => signalGroup(child, "SIGKILL"), 5_000);
  await exited;
  clearTimeout(timer);
  // What the group's leader left behind (workerd outliving wrangler) goes too.
  signalGroup(child, "SIGKILL");
}

function signalGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // the group is gone
  }
}

/** A value for a dotenv file, in a quote it does not contain (single quotes take it literally). */
function dotenvQuote(value) {
  const v = String(value);
  for (const q of ["'", "`", '"']) if (!v.includes(q)) return `${q}${v}${q}`;
  throw new Error("a variable holds every kind of quote; it cannot go into a dotenv file");
}
