// One Forgejo poll (forge/forgejo/poller.ts) over a stubbed client and an in-memory store of what
// earlier polls saw, against the real nats-server: the decisions a poll makes, each with its near
// miss, without a workerd scenario.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/config.ts";
import { createDispatcher } from "../../src/dispatcher.ts";
import type { ForgejoClient, ForgejoJob } from "../../src/forge/forgejo/client.ts";
import type { KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { GONE_GRACE_MS, pollForgejo, type KnownStore } from "../../src/forge/forgejo/poller.ts";
import { assignment, forgejoTestEnv, provisionEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

function memoryStore(initial: KnownJob[] = []): KnownStore & { known: Map<string, KnownJob> } {
  const known = new Map(initial.map((k) => [`${k.job}-${k.attempt}`, k]));
  return { known, all: async () => new Map(known), put: async (k, v) => void known.set(k, v), delete: async (k) => void known.delete(k) };
}

/** A Forgejo that lists `jobs()` and still has the runners in `runners`. */
function stubForgejo(jobs: () => ForgejoJob[], runners: Set<number>): ForgejoClient {
  return {
    jobs: async () => jobs(),
    getRunner: async (_scope: unknown, id: number) => (runners.has(id) ? { id } : null),
    deleteRunner: async (_scope: unknown, id: number) => void runners.delete(id),
  } as unknown as ForgejoClient;
}

describe("a claimed Forgejo job that left the list while its runner is still there", () => {
  it("completes after the grace counted from when it was first missed, not restarted at every poll", async () => {
    const env = forgejoTestEnv(nats, backendUrl, "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    let clock = Date.parse("2026-12-03T12:00:00Z");
    const client = stubForgejo(() => [], new Set([5]));
    const d = createDispatcher({ config: loadConfig(env), sink: silent, now: () => clock, forgejo: client });
    const id = "forgejo-41-1";
    await d.withState(async ({ records }) => {
      await records.offer({ ...assignment(id), job: { id: 41, runId: 0, attempt: 1, repository: "id-2/id-7" } });
      await records.update(id, (r) => ({ ...r, state: "claimed", claimedAt: new Date(clock).toISOString(), runner: { id: 5, name: `gdr-${id}`, registeredAt: new Date(clock).toISOString(), sealed: "x" } }));
    });
    const store = memoryStore([{ id, job: 41, attempt: 1, handle: "h", claimed: true }]);
    const stateOf = async () => (await d.withState(({ records }) => records.get(id)))?.state;
    await pollForgejo(d, client, config.forgejo!, store);
    expect(store.known.get("41-1")?.goneSince).toBe(clock);
    const firstMissed = clock;
    // Polls within the grace: still claimed, and the first miss is kept.
    for (const after of [5_000, 15_000, GONE_GRACE_MS - 1_000]) {
      clock = firstMissed + after;
      expect((await pollForgejo(d, client, config.forgejo!, store)).ended).toBe(0);
      expect(store.known.get("41-1")?.goneSince).toBe(firstMissed);
      expect(await stateOf()).toBe("claimed");
    }
    clock = firstMissed + GONE_GRACE_MS + 1_000;
    expect((await pollForgejo(d, client, config.forgejo!, store)).ended).toBe(1);
    expect(await stateOf()).toBe("completed");
    expect(store.known.has("41-1")).toBe(false);
  });
});
