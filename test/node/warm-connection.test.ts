// A connection kept for days (the gateway's) must not accumulate anything per call: every call
// of the request path, and the passes, leave no timer and no subscription behind. nats.js's own
// batch direct get did (a 5 s timer and a live subscription each), which workerd ends at 10,000.
import { describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { KEEP_ALIVE } from "../../src/gateway/keeper.ts";
import { openNats, type NatsHandle } from "../../src/nats/connection.ts";
import { recentRecords } from "../../src/observe/recent.ts";
import { recordsBucket } from "../../src/nats/names.ts";
import { incarnationOf } from "../../src/state/records.ts";
import { directPath } from "../../src/app/request-path.ts";
import { provisionEnv, testEnv } from "../harness/env.ts";

const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };
const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
const subscriptions = (h: NatsHandle) => (h.nc as unknown as { protocol: { subscriptions: { size(): number } } }).protocol.subscriptions.size();

describe("a warm connection", () => {
  it("is left with no timer and no subscription per call, after every kind of call", { timeout: 60_000 }, async () => {
    const config = await provisionEnv(testEnv(inject("natsWsUrl"), inject("backendUrl"), { CAPACITY_POD: 100, RETRY_DELAY_MS: 20 }));
    const handle = await openNats(config, "warm-test", { keepAlive: KEEP_ALIVE });
    try {
      const d = createDispatcher({ config, sink: silent, borrowed: handle });
      const path = directPath(d);
      const body = (i: number) => ({ version: 1, id: `w-${i}`, backend: "pod", labels: ["ubuntu-latest"] });
      await path.publish(body(0)).then((p) => path.record(p.pending!));
      await d.withState((s) => s.records.getMany(["w-0"]));
      const before = { timers: timers(), subs: subscriptions(handle) };

      for (let i = 1; i <= 40; i++) {
        const published = await path.publish(body(i));
        if (published.pending) await path.record(published.pending);
        await path.get(`w-${i}`);
      }
      await path.reconcile("test", 5_000, { eager: true });
      const incarnations = await Promise.all(Array.from({ length: 40 }, async (_, i) => incarnationOf(await path.get(`w-${i + 1}`))));
      for (let i = 1; i <= 40; i++) await path.claim(`w-${i}`, incarnations[i - 1]!).catch(() => undefined);
      await path.reconcile("test", 5_000, {});
      for (let i = 1; i <= 40; i++) await path.complete(`w-${i}`, incarnations[i - 1]!).catch(() => undefined);
      await d.withState(async (s) => {
        for (let i = 0; i < 20; i++) {
          await s.records.getMany(["w-1", "w-2", "w-3"]);
          await s.admission.registering("pod");
          await s.admission.snapshot("pod");
        }
      });
      for (let i = 0; i < 20; i++) await recentRecords(handle, recordsBucket(config), 10);

      expect(subscriptions(handle)).toBe(before.subs);
      // The keep-alive ping may be between two timers at either reading.
      expect(timers()).toBeLessThanOrEqual(before.timers + 1);
    } finally {
      await handle.nc.close();
    }
  });
});
