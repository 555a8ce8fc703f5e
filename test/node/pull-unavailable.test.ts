// A pull nobody answers (the consumer has no leader: an election after a server came back, or
// the consumer is gone) ends the pass as an error of its own, not as an exception out of the cron
// tick: the tick's summary counts it, the log names the backend, and the pass after it reconciles
// as usual once the consumer answers again.
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { closeNats, isNatsUnavailable, openNats } from "../../src/nats/connection.ts";
import { consumerName } from "../../src/nats/names.ts";
import { pullNoWait } from "../../src/nats/pull.ts";
import type { EventSink } from "../../src/model/events.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");

describe("a pull answered 503 (no responders)", () => {
  it("is NATS unavailable; the pass ends with it counted and logged, and the pass after it reconciles", async () => {
    const env = testEnv(nats, backendUrl, { EAGER_RECONCILE: "false" });
    await provisionEnv(env);
    const config = loadConfig(env);
    const errors: { message: string; fields: Record<string, unknown> }[] = [];
    const summaries: Record<string, unknown>[] = [];
    const sink: EventSink = {
      event: () => undefined,
      summary: (s) => void summaries.push({ ...s }),
      error: (message, fields = {}) => void errors.push({ message, fields }),
    };
    const d = createDispatcher({ config, sink });
    const handle = await openNats(config);
    try {
      await publishAssignment(d, assignment("pull-503-1"));
      const jsm = await jetstreamManager(handle.nc);
      const info = await jsm.consumers.info(config.stream, consumerName("pod"));
      await jsm.consumers.delete(config.stream, consumerName("pod"));
      const err = await pullNoWait(handle.nc, config.stream, consumerName("pod"), 1).catch((e: unknown) => e);
      expect([isNatsUnavailable(err), (err as Error).message]).toEqual([true, expect.stringContaining("503")]);

      const [failed] = await d.reconcile("cron * * * * *", 2_000);
      expect([failed!.fetched, failed!.errors]).toEqual([0, 1]);
      expect(errors.map((e) => [e.message, e.fields.backend])).toEqual([["pull failed", "pod"]]);
      expect(summaries.at(-1)).toMatchObject({ backend: "pod", errors: 1 });

      // The consumer answers again: the next pass reconciles the job the failed one could not pull.
      await jsm.consumers.add(config.stream, info.config);
      const [after] = await d.reconcile("cron * * * * *", 2_000);
      expect([after!.fetched, after!.errors]).toEqual([1, 0]);
    } finally {
      await closeNats(handle.nc);
      await d.close();
    }
  });
});
