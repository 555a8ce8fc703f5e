// npm start: the dispatcher on an embedded default stack. A throwaway nats-server, provisioning,
// `wrangler dev` with cron ticks every few seconds, and a simulated runner backend that becomes
// ready and claims after a delay. Prints each assignment's progress. Ctrl-C stops everything.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { startFakeBackend } from "./fake-backend.mjs";
import { findNatsServer, startNatsServer } from "./nats-server.mjs";
import { loadEnv } from "./dev-vars.mjs";
import { loadProvisionConfig } from "../src/config.ts";
import { provision } from "../src/layout.ts";
import { withNats } from "../src/nats/connection.ts";

const PORT = Number(process.env.PORT ?? 8787);
const TICK_MS = Number(process.env.TICK_MS ?? 5_000);
const base = `http://127.0.0.1:${PORT}`;

try {
  findNatsServer();
} catch (err) {
  console.error(err.message);
  process.exit(1);
}

const nats = await startNatsServer();
const backend = await startFakeBackend({
  mode: { token: "local-backend-token", readyAfterMs: 1_500, autoClaimMs: 1_000, autoCompleteMs: 3_000 },
});
const user = loadEnv(process.env.DEV_VARS ?? ".dev.vars");
const vars = {
  TRUST_DOMAIN: "local.gitea-edge-dispatcher",
  DISPATCH_TOKEN: randomBytes(18).toString("base64url"),
  CLAIM_SIGNING_KEY: randomBytes(32).toString("base64url"),
  RETRY_DELAY_MS: "1000",
  ...pick(user, ["TRUST_DOMAIN", "DISPATCH_TOKEN", "CLAIM_SIGNING_KEY", "CAPACITY_POD", "CAPACITY_VM", "RETRY_DELAY_MS", "CLAIM_TIMEOUT_MS", "BATCH_SIZE"]),
  NATS_URL: nats.wsUrl,
  PUBLIC_URL: base,
  POD_BACKEND_URL: `${backend.url}/pod`,
  POD_BACKEND_TOKEN: "local-backend-token",
  VM_BACKEND_URL: `${backend.url}/vm`,
  VM_BACKEND_TOKEN: "local-backend-token",
};
await withNats(loadProvisionConfig(vars), (h) => provision(h, loadProvisionConfig(vars)));

const args = ["wrangler", "dev", "--ip", "127.0.0.1", "--port", String(PORT), "--test-scheduled", "--show-interactive-dev-session=false"];
for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
const wrangler = spawn("npx", args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WRANGLER_SEND_METRICS: "false" } });

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
    if (e.event === "reconcile_summary" && e.fetched === 0) return;
    const step = STEPS[e.event];
    if (step && e.assignment) {
      const seen = progress.get(e.assignment) ?? [];
      if (seen.includes(step)) return;
      seen.push(step);
      progress.set(e.assignment, seen);
      console.log(`${e.assignment} (${e.backend}): ${seen.join(" → ")}`);
    } else if (["capacity_wait", "backend_retry", "claim_timeout", "invalid", "conflict", "error"].includes(e.event)) {
      console.log(`${e.assignment ?? ""} ${e.event}${e.reason ? `: ${e.reason}` : ""}`);
    }
  });
}

let ticker;
let announced = false;
function announce() {
  if (announced) return;
  announced = true;
  ticker = setInterval(() => fetch(`${base}/__scheduled?cron=*+*+*+*+*`).catch(() => undefined), TICK_MS);
  console.log(`
gitea-edge-dispatcher on ${base}   (nats-server ${nats.wsUrl}, cron tick every ${TICK_MS / 1000}s)
Try:
  curl -s -X POST ${base}/v1/assignments -H 'authorization: Bearer ${vars.DISPATCH_TOKEN}' \\
    -H 'content-type: application/json' -d '{"version":1,"id":"demo-1","backend":"pod","labels":["ubuntu-latest"]}'
  curl -s ${base}/v1/assignments/demo-1 -H 'authorization: Bearer ${vars.DISPATCH_TOKEN}'
  curl -s ${base}/healthz
`);
}

let stopping = false;
async function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  clearInterval(ticker);
  wrangler.kill("SIGTERM");
  await backend.close();
  await nats.stop();
  process.exit(code);
}
wrangler.on("exit", (code) => stop(code ?? 1));
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));

function pick(obj, keys) {
  return Object.fromEntries(keys.filter((k) => obj[k] !== undefined && obj[k] !== "").map((k) => [k, obj[k]]));
}
