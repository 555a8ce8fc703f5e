// Prints what one cron invocation reconciles, in workerd (`wrangler dev`), against a local
// nats-server and an instant fake backend: N assignments provisioned in one tick, then, once every
// runner has claimed, N acked in the next. Usage: node bench/tick.mjs [N=200]
import { startFakeBackend } from "../scripts/fake-backend.mjs";
import { natsServerVersion, startNatsServer } from "../scripts/nats-server.mjs";
import { encodeAssignment } from "../src/model/assignment.ts";
import { loadConfig } from "../src/app/config.ts";
import { provision } from "../src/nats/layout.ts";
import { createDispatcher } from "../src/app/dispatcher.ts";
import { withNats } from "../src/nats/connection.ts";
import os from "node:os";
import { freePort, startWorker } from "./lib.mjs";

const N = Number(process.argv[2] ?? 200);
const PORT = await freePort();
const nats = await startNatsServer();
const backend = await startFakeBackend({ mode: { token: "bench-token" } });
const vars = {
  NATS_URL: nats.wsUrl,
  TRUST_DOMAIN: "bench.local",
  PUBLIC_URL: `http://127.0.0.1:${PORT}`,
  DISPATCH_TOKEN: "bench-dispatch-token-000",
  CLAIM_SIGNING_KEY: "bench-claim-signing-key-0000000000000",
  CAPACITY_POD: String(N),
  CAPACITY_VM: "0",
  BATCH_SIZE: String(Math.min(N, 256)),
  RETRY_DELAY_MS: "500",
  POD_BACKEND_URL: `${backend.url}/pod`,
  POD_BACKEND_TOKEN: "bench-token",
};
const config = loadConfig(vars);
await withNats(config, async (h) => {
  await provision(h, config);
  await Promise.all(
    Array.from({ length: N }, (_, i) => {
      const id = `bench-${i}`;
      const a = {
        version: 1,
        id,
        backend: "pod",
        workload: `spiffe://bench.local/runner/pod/${id}`,
        labels: ["ubuntu-latest"],
        createdAt: new Date().toISOString(),
      };
      return h.js.publish(`${config.subjectBase}.pod`, encodeAssignment(a), { msgID: id });
    }),
  );
});

const worker = await startWorker(vars, PORT);
const summaries = () => worker.events.filter((e) => e.event === "reconcile_summary");

async function tick() {
  const before = summaries().length;
  const t = performance.now();
  await worker.tick();
  while (summaries().length === before) await new Promise((r) => setTimeout(r, 5));
  return { wallMs: Math.round(performance.now() - t), ...summaries().at(-1) };
}

const provisioned = await tick();
// Every runner claims. Written straight into the records (as the claim endpoint would) so that
// the cron invocation, not the claim-triggered passes, does the acking being measured.
const d = createDispatcher({ config, sink: { event() {}, summary() {}, error() {} } });
await d.withState(async ({ records }) => {
  for (let i = 0; i < N; i += 32) {
    await Promise.all(Array.from({ length: Math.min(32, N - i) }, (_, j) => records.update(`bench-${i + j}`, (r) => ({ ...r, state: "claimed" }))));
  }
});
await new Promise((r) => setTimeout(r, 1_000)); // the 500 ms nak delays run out
const acked = await tick();

console.log(`machine: ${os.cpus().length} cpus, node ${process.version}, ${natsServerVersion()}`);
console.log(`N=${N} assignments, one cron invocation each:`);
for (const [name, s] of [
  ["provision (backend ready)", provisioned],
  ["ack after claims", acked],
]) {
  console.log(
    `  ${name.padEnd(26)} fetched=${s.fetched} acked=${s.acked} naked=${s.naked} deferred=${s.deferred} errors=${s.errors} pass=${s.durationMs}ms wall=${s.wallMs}ms`,
  );
}
worker.stop();
await backend.close();
await nats.stop();
process.exit(0);
