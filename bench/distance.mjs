// NATS at network distance: the Worker's webhook answer and time to runner with the gateway on
// and off, at 0, 10 and 50 ms RTT (delay proxies), beside raw Node clients through the same proxy.
import { wsconnect } from "@nats-io/nats-core";
import { jetstream } from "@nats-io/jetstream";
import { encodeAssignment } from "../src/model/assignment.ts";
import { busyBetween, cpuTimes, load } from "./lib.mjs";

/**
 * `proxies`: RTT (ms) → a ws-proxy delaying each frame by half of it. Every other dependency is
 * the bench's own (run.mjs), so that these figures come from the same run as the others.
 */
export async function measureDistance({ proxies, varsFor, provisioned, startWorker, sendWebhook, timeToRunner, log, n = 100, throughputN = 400 }) {
  const out = { webhook: {}, throughput: {}, timeToRunner: {}, raw: {}, connectionsPer1000: {} };
  let job = 900_000;
  for (const [rtt, proxy] of Object.entries(proxies)) {
    out.webhook[`rtt${rtt}`] = {};
    for (const mode of ["on", "off"]) {
      const vars = varsFor(`dist${rtt}${mode}`, { NATS_GATEWAY: mode });
      await provisioned(vars);
      const tag = `dist-${rtt}-${mode}-${vars.ASSIGNMENT_STREAM}`;
      const worker = await startWorker({ ...vars, NATS_URL: proxy.url(tag) });
      try {
        log(`distance: ${n} webhooks one at a time, ${rtt} ms RTT, gateway ${mode}`);
        await load(5, 1, () => sendWebhook(worker, job++));
        // What the Worker's host itself adds to any request (no NATS): the floor under the webhook figures.
        const trivial = await load(30, 1, async () => (await fetch(`${worker.url}/openapi.json`)).arrayBuffer());
        const one = await load(n, 1, () => sendWebhook(worker, job++));
        out.webhook[`rtt${rtt}`][mode] = { p50Ms: one.p50, p99Ms: one.p99, n, trivialP50Ms: trivial.p50 };
        let sent = 5 + n;
        if (rtt === "50") {
          log(`distance: ${throughputN} webhooks at c=16, 50 ms RTT, gateway ${mode}`);
          const before = cpuTimes();
          const many = await load(throughputN, 16, () => sendWebhook(worker, job++));
          out.throughput[mode] = { rps: many.rps, p50Ms: many.p50, p99Ms: many.p99, n: throughputN, machineBusy: busyBetween(before, cpuTimes()) };
          sent += throughputN;
        }
        // Eager passes included: they run in the gateway, or on each invocation's connection.
        await new Promise((r) => setTimeout(r, 1_000));
        out.connectionsPer1000[`rtt${rtt}`] ??= {};
        out.connectionsPer1000[`rtt${rtt}`][mode] = Math.round((proxy.counts(tag).connections / sent) * 1000);
      } finally {
        worker.stop();
      }
    }
    out.raw[`rtt${rtt}`] = await rawBaselines(proxy, `raw-${rtt}`, varsFor, provisioned, rtt === "50" ? throughputN : 0, log);
  }
  for (const mode of ["on", "off"]) {
    const vars = varsFor(`ttrdist${mode}`, { NATS_GATEWAY: mode });
    await provisioned(vars);
    out.timeToRunner[mode] = await timeToRunner(`ttr50${mode}`, proxies["50"].url(`ttr-${mode}-${vars.ASSIGNMENT_STREAM}`), vars);
  }
  out.throughput.ratio = out.throughput.on && out.throughput.off ? out.throughput.on.rps / out.throughput.off.rps : NaN;
  return out;
}

/** A bare publish from Node through the same proxy: on one held connection, and connecting for each. */
async function rawBaselines(proxy, tag, varsFor, provisioned, throughputN, log) {
  const vars = varsFor(tag);
  const config = await provisioned(vars);
  const subject = `${config.subjectBase}.pod`;
  const payload = encodeAssignment({
    version: 1,
    id: "x",
    backend: "pod",
    workload: "spiffe://bench.local/x",
    labels: ["a"],
    createdAt: new Date().toISOString(),
  });
  let i = 0;
  log(`distance: raw Node publishes through ${tag}`);
  const nc = await wsconnect({ servers: proxy.url(tag) });
  const js = jetstream(nc);
  const held = await load(50, 1, () => js.publish(subject, payload, { msgID: `h-${i++}` }));
  const heldMany = throughputN ? await load(throughputN, 16, () => js.publish(subject, payload, { msgID: `h-${i++}` })) : undefined;
  await nc.close();
  const fresh = async () => {
    const c = await wsconnect({ servers: proxy.url(tag) });
    await jetstream(c).publish(subject, payload, { msgID: `f-${i++}` });
    await c.drain();
  };
  const perRequest = await load(30, 1, fresh);
  const perRequestMany = throughputN ? await load(Math.min(throughputN, 200), 16, fresh) : undefined;
  return {
    held: { p50Ms: held.p50, p99Ms: held.p99, ...(heldMany ? { rpsAt16: heldMany.rps } : {}) },
    connectPerRequest: { p50Ms: perRequest.p50, p99Ms: perRequest.p99, ...(perRequestMany ? { rpsAt16: perRequestMany.rps } : {}) },
  };
}
