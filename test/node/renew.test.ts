// No assignment is stranded by JetStream's MaxDeliver: a message delivered RENEW_AT times (a job
// held for a day, a warm runner idle for hours, a full backend) is published again and only then
// acknowledged, by the pass that pulls it; the copy goes on from its first delivery, its record
// unchanged, and its runner's claim still ends it. A renewal asked twice (a Worker killed between
// the publish and the ack) leaves one copy.
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { claimAssignment } from "../../src/domain/operations.ts";
import { closeNats, openNats } from "../../src/nats/connection.ts";
import { consumerName } from "../../src/nats/names.ts";
import { pullNoWait } from "../../src/nats/pull.ts";
import { RENEW_AT, renewMessages } from "../../src/nats/renew.ts";
import { streamState } from "../harness/nats.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };

async function scene() {
  const env = testEnv(nats, backendUrl, { RETRY_DELAY_MS: 60_000 });
  await provisionEnv(env);
  // The backend's runners never come up: the job waits, delivered again and again.
  await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: 3_600_000 }) });
  const config = loadConfig(env);
  const d = createDispatcher({ config, sink: quiet });
  const handle = await openNats(config);
  /** Delivers the job's message (and naks it at once) until its next delivery is the `count`-th. */
  const deliverUntil = async (count: number) => {
    for (;;) {
      const [m] = await pullNoWait(handle.nc, config.stream, consumerName("pod"), 1, 2_000, 100);
      if (!m) continue;
      m.nak(0);
      await handle.nc.flush();
      if (m.deliveryCount + 1 >= count) return;
    }
  };
  return { env, config, d, handle, deliverUntil, close: () => closeNats(handle.nc) };
}

describe("messages near MaxDeliver", () => {
  it(
    "a pass renews a job's message at RENEW_AT deliveries: one copy, delivered afresh, its record unchanged; the claim still ends it",
    { timeout: 120_000 },
    async () => {
      const s = await scene();
      await publishAssignment(s.d, assignment("long-1"));
      await s.d.reconcile("test", 5_000);
      const before = await s.d.withState(({ records }) => records.get("long-1"));
      expect(before).toMatchObject({ state: "backend_pending" });
      // About a minute: nats-server redelivers a nak'd message some 60 ms later, whatever the delay asked.
      await s.deliverUntil(RENEW_AT);
      await s.d.reconcile("test", 5_000);
      const jsm = await jetstreamManager(s.handle.nc);
      const info = await jsm.consumers.info(s.config.stream, consumerName("pod"));
      // The original acknowledged, its copy the one message left: delivered at most a few times since.
      expect(await streamState(s.env)).toMatchObject({ messages: 1 });
      expect(info.num_redelivered).toBeLessThanOrEqual(1);
      const [copy] = await pullNoWait(s.handle.nc, s.config.stream, consumerName("pod"), 1, 2_000, 100, 3_000);
      expect(copy!.deliveryCount).toBeLessThan(5);
      expect(copy!.msgId).toMatch(/^renew-\d+$/);
      copy!.nak(0);
      expect(await s.d.withState(({ records }) => records.get("long-1"))).toMatchObject({ state: before!.state, receivedAt: before!.receivedAt });
      await claimAssignment(s.d, "long-1");
      await s.d.reconcile("test", 5_000);
      expect(await streamState(s.env)).toMatchObject({ messages: 0, ackPending: 0, pending: 0 });
      await s.close();
    },
  );

  it("a renewal cut after its publish and asked again publishes one copy", { timeout: 120_000 }, async () => {
    const s = await scene();
    await publishAssignment(s.d, assignment("long-2"));
    const [m] = await pullNoWait(s.handle.nc, s.config.stream, consumerName("pod"), 1, 2_000, 100, 3_000);
    const cut = { ...m!, ackAck: () => Promise.reject(new Error("killed before the ack")) };
    await expect(renewMessages(s.handle.js, [cut])).rejects.toThrow(/killed/);
    await renewMessages(s.handle.js, [m!]);
    expect(await streamState(s.env)).toMatchObject({ messages: 1 });
    await s.close();
  });
});
