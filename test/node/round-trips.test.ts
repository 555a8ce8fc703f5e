// Round trips in series between a webhook's publish and its backend call, counted on the real
// nats-server behind a proxy that holds every frame 100 ms each way. The operations the pass sends
// fall into waves a round trip apart; those before the backend call is made are the path's round
// trips: the pull (whether anybody waits asked alongside it, and the record answered by the offer
// this isolate just made), the slot, and the registration stored before the backend is asked.
// Near misses: a pass not started for new jobs, a record another isolate offered, and, first come
// first served, a redelivery in the same batch, whose record is read before anything goes on.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment, recordAssignment } from "../../src/domain/publish.ts";
import { createRecordCache } from "../../src/state/record-cache.ts";
import { giteaTestEnv, provisionEnv, uniqueName } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

const RTT_MS = 200;
const slowProxy = inject("natsSlowProxyUrl").replace(/\/slow$/, "");
const quiet = { event: () => undefined, summary: () => undefined, error: () => undefined };
let job = 70_000;

const body = (id: string) => ({
  version: 1,
  id,
  backend: "pod",
  labels: ["ubuntu-latest"],
  job: { id: ++job, runId: 1, attempt: 1, repository: "acme/app" },
});

/**
 * The operations of `tag` sent from `since` until the backend was asked (at `asked`), grouped
 * into waves a round trip apart. Those sent in the last half round trip went with the backend
 * call, not before it (the batch's other deliveries' acks).
 */
async function wavesOf(tag: string, since: number, asked: number): Promise<string[][]> {
  const until = asked - RTT_MS / 2;
  const http = slowProxy.replace("ws://", "http://");
  const log = (await (await fetch(`${http}/_log/${encodeURIComponent(tag)}`)).json()) as [number, string][];
  const waves: { at: number; ops: string[] }[] = [];
  for (const [at, subject] of log.filter(([t]) => t >= since && t < until)) {
    const last = waves.at(-1);
    if (last && at - last.at < RTT_MS / 2) last.ops.push(subject);
    else waves.push({ at, ops: [subject] });
  }
  return waves.map((w) => w.ops);
}

/** When the fake backend was asked for `id`'s runner. */
async function askedAt(env: Record<string, string>, id: string): Promise<number> {
  const state = (await (await fetch(`${env.POD_BACKEND_URL}/_control/state`)).json()) as { runners: { id: string; created: number }[] };
  const runner = state.runners.find((r) => r.id === id);
  if (!runner) throw new Error(`no runner was asked for ${id}`);
  return runner.created;
}

async function setUp(fairShare: "on" | "off", capacity = 5) {
  const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9", {
    CAPACITY_POD: capacity,
    RETRY_DELAY_MS: 30,
    FAIR_SHARE: fairShare,
  });
  await provisionEnv(env);
  const tag = uniqueName("rt");
  // One warm connection for the publishes and the passes, as the gateway object keeps.
  const d = createDispatcher({ config: loadConfig({ ...env, NATS_URL: `${slowProxy}/${tag}` }), gitea: stubGitea(), sink: quiet, shareConnection: true });
  /** As the gateway does: answer once the message is stored, then write its record while the eager pass starts. */
  const webhook = async (id: string, trigger = "webhook", by = d) => {
    const published = await publishAssignment(by, body(id), { recordLater: true });
    const since = Date.now();
    const recorded = recordAssignment(by, published.pending!);
    if (by !== d) await recorded;
    const [summary] = await d.reconcile(trigger, 10_000, { eager: true, only: ["pod"] });
    await recorded;
    return { since, summary };
  };
  return { env, tag, d, webhook };
}

describe("round trips from a webhook's publish to its backend call", () => {
  it("are 3 with fair share: the pull, the slot, the registration stored", async () => {
    const { env, tag, d, webhook } = await setUp("on");
    try {
      const { since } = await webhook("rt-1");
      const waves = await wavesOf(tag, since, await askedAt(env, "rt-1"));
      expect(waves).toHaveLength(3);
      expect(waves[0]!.some((s) => s.includes("CONSUMER.MSG.NEXT"))).toBe(true);
      expect(waves[0]!.some((s) => s.includes("_waiting"))).toBe(true);
      expect(waves[1]!.some((s) => s.includes(".slots."))).toBe(true);
      expect(waves[2]!.some((s) => s.startsWith("$KV.") && s.endsWith("rt-1"))).toBe(true);
    } finally {
      await d.close();
    }
  });

  it("near miss: a pass not started for new jobs asks whether anybody waits after its pull: 4", async () => {
    const { env, tag, d, webhook } = await setUp("on");
    try {
      const { since } = await webhook("rt-2", "cron");
      expect(await wavesOf(tag, since, await askedAt(env, "rt-2"))).toHaveLength(4);
    } finally {
      await d.close();
    }
  });

  it("near miss: a record another isolate offered is read: 4", async () => {
    const { env, tag, d, webhook } = await setUp("on");
    const other = createDispatcher({ config: loadConfig(env), gitea: stubGitea(), sink: quiet, recordCache: createRecordCache() });
    try {
      const { since } = await webhook("rt-3", "webhook", other);
      const waves = await wavesOf(tag, since, await askedAt(env, "rt-3"));
      expect(waves).toHaveLength(4);
      expect(waves[1]!.some((s) => s.includes("DIRECT.GET.KV_"))).toBe(true);
    } finally {
      await d.close();
    }
  });

  it.each([
    ["on", 3],
    ["off", 4],
  ] as const)("with a booting runner's redelivery in the same pull (FAIR_SHARE=%s): %i", async (fairShare, expected) => {
    const { env, tag, d, webhook } = await setUp(fairShare);
    try {
      await webhook("rt-boot");
      // Its runner boots: its message comes back after RETRY_DELAY_MS, ahead of the next job's.
      await new Promise((r) => setTimeout(r, 100));
      const { since, summary } = await webhook("rt-new");
      expect(summary).toMatchObject({ fetched: 2, errors: 0 });
      expect(await wavesOf(tag, since, await askedAt(env, "rt-new"))).toHaveLength(expected);
    } finally {
      await d.close();
    }
  });
});

describe("first come first served keeps its order", () => {
  it("a job that waited for capacity, delivered again with a new one, takes the freed slot first", async () => {
    const { d, webhook, env } = await setUp("off", 2);
    try {
      // Both slots held by runners that claimed (their messages acked: the consumer's window is free).
      await d.withState(async ({ admission }) => {
        expect([await admission.acquire("pod", "holder-1"), await admission.acquire("pod", "holder-2")]).toEqual([true, true]);
      });
      await webhook("rt-w");
      await d.withState(({ admission }) => admission.release("pod", "holder-1"));
      await new Promise((r) => setTimeout(r, 100));
      const { summary } = await webhook("rt-b");
      expect(summary).toMatchObject({ fetched: 2 });
      await askedAt(env, "rt-w");
      await expect(askedAt(env, "rt-b")).rejects.toThrow("no runner");
    } finally {
      await d.close();
    }
  });
});
