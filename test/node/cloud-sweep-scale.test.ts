// The cloud drivers' sweeps at scale: 500 listed workloads (250 of live jobs, 250 orphans) with a
// NATS round trip of 50 ms. A tick makes progress whatever the number: notes are read in batches,
// each delete has its own bound, and a tick whose time runs out keeps what it deleted; the next one goes on.
import { afterAll, describe, expect, it } from "vitest";
import type { KV } from "@nats-io/kv";
import { ORPHAN_GRACE_MS } from "../../src/backends/cloud-sweep.ts";
import { createEc2Api } from "../../src/backends/ec2/client.ts";
import { deploymentInstance } from "../../src/app/select-backend.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";
import { aroundKv, hetznerScene, sweepOnce, TEMPLATE, vmRequest, type SceneWrap } from "../harness/hetzner.ts";
import { ec2Scene, EC2_TEMPLATE } from "../harness/ec2.ts";
import type { RunnerBackend } from "../../src/domain/backend.ts";

const RTT_MS = 50;
const N = 250;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const within = () => AbortSignal.timeout(5_000);
const KV_CALLS = new Set(["get", "put", "create", "update", "delete", "purge", "keys"]);

interface Cloud {
  driver: RunnerBackend;
  /** Moves the cloud's own clock with the driver's (Hetzner's rate reset is in its time). */
  advance(ms: number): Promise<void>;
  clock: { t: number };
  close(): Promise<void>;
  /** A workload made behind the driver's back with this deployment's labels (an orphan). */
  orphan(i: number): Promise<void>;
  live(): Promise<number>;
}

/** A scene whose records bucket answers after a NATS round trip while `slow.on`, and whose deletes take `slow.deleteMs`. */
function wrapOf(slow: { on: boolean; deleteMs: number }): SceneWrap {
  const late = async <T>(call: () => Promise<T>) => {
    if (slow.on) await sleep(RTT_MS);
    return call();
  };
  return {
    kv: (real: KV) => aroundKv(real, KV_CALLS, late),
    readMany: (real) => (keys) => late(() => real(keys)),
    fetch: async (input, init) => {
      const body = typeof init?.body === "string" ? init.body : "";
      if (init?.method === "DELETE" || body.includes("Action=TerminateInstances") || (input instanceof Request && input.method === "DELETE"))
        await sleep(slow.deleteMs);
      if (input instanceof Request && (await input.clone().text()).includes("Action=TerminateInstances")) await sleep(slow.deleteMs);
      return fetch(input, init);
    },
  };
}

const clouds: Record<string, (slow: { on: boolean; deleteMs: number }) => Promise<Cloud>> = {
  hetzner: async (slow) => {
    const s = await hetznerScene({}, wrapOf(slow));
    const instance = deploymentInstance(s.config.stream, s.config.publicUrl);
    return {
      driver: s.driver,
      clock: s.clock,
      close: () => s.close(),
      advance: async (ms) => void (await s.ctl("clock", { advanceMs: ms })),
      orphan: async (i) => {
        const labels = { "managed-by": "gitea-edge-dispatcher", "gdr-instance": instance, "gdr-backend": "pod", "gdr-assignment": `orphan-${i}` };
        const res = await fetch(`${s.base}/servers`, {
          method: "POST",
          headers: { authorization: `Bearer ${FAKE_HCLOUD_TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify({ ...TEMPLATE, name: `orphan-${i}`, labels }),
        });
        expect(res.status).toBe(201);
      },
      live: async () => (await s.state()).servers.length,
    };
  },
  ec2: async (slow) => {
    const s = await ec2Scene({}, wrapOf(slow));
    const api = createEc2Api({ url: `${s.base}/`, region: FAKE_REGION, ...FAKE_AWS });
    const instance = deploymentInstance(s.config.stream, s.config.publicUrl);
    return {
      driver: s.driver,
      clock: s.clock,
      close: () => s.close(),
      advance: async () => undefined,
      orphan: async (i) => {
        const tags = { "managed-by": "gitea-edge-dispatcher", "gdr-instance": instance, "gdr-backend": "pod", "gdr-assignment": `orphan-${i}` };
        const Tags = Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
        await api.runInstances({ ...EC2_TEMPLATE, TagSpecifications: [{ ResourceType: "instance", Tags }] }, within());
      },
      live: async () => (await s.live()).length,
    };
  },
};

const opened: Cloud[] = [];
afterAll(async () => {
  for (const c of opened.splice(0)) await c.close();
});

/** N jobs of live assignments (noted by the driver) and N orphans, all past the grace; then NATS slows down. */
async function crowded(kind: string, deleteMs = 0) {
  const slow = { on: false, deleteMs: 0 };
  const c = await clouds[kind]!(slow);
  opened.push(c);
  c.clock.t = Date.now();
  const live = new Map<string, { ended: boolean }>();
  for (let i = 0; i < N; i += 25)
    await Promise.all(
      Array.from({ length: 25 }, async (_, j) => {
        live.set(`job-${i + j}`, { ended: false });
        await c.driver.accept(vmRequest(`job-${i + j}`), within());
        await c.orphan(i + j);
      }),
    );
  expect(await c.live()).toBe(2 * N);
  c.clock.t += ORPHAN_GRACE_MS + 60_000;
  await c.advance(ORPHAN_GRACE_MS + 60_000);
  Object.assign(slow, { on: true, deleteMs });
  return { c, live };
}

describe.each(Object.keys(clouds))("the %s sweep at scale", (kind) => {
  it(`500 listed at ${RTT_MS} ms a NATS round trip: one tick deletes every orphan and keeps every live job's workload`, { timeout: 120_000 }, async () => {
    const { c, live } = await crowded(kind);
    const started = Date.now();
    const swept = await sweepOnce(c.driver, live, new Map(), 20_000, () => c.clock.t);
    const took = Date.now() - started;
    console.log(`${kind}: one sweep of ${2 * N} listed at ${RTT_MS} ms: ${took} ms`);
    expect(swept.deleted).toBe(N);
    expect(await c.live()).toBe(N);
    // Reads one after another would take 2 × 500 × 50 ms = 50 s.
    expect(took).toBeLessThan(20_000);
  });

  it("a tick that runs out of time keeps what it deleted, and the next ticks finish the rest", { timeout: 120_000 }, async () => {
    const { c, live } = await crowded(kind, 100);
    // The driver's clock runs with the machine's here: the tick's deadline passes while deletes are under way.
    const base = c.clock.t;
    const started = Date.now();
    const ticking = setInterval(() => (c.clock.t = base + (Date.now() - started)), 5);
    const now = () => c.clock.t;
    const first = await sweepOnce(c.driver, live, new Map(), 2_500, now);
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(first.deleted).toBeGreaterThan(0);
    expect(first.deleted).toBeLessThan(N);
    expect(await c.live()).toBe(2 * N - first.deleted);
    let total = first.deleted;
    for (let tick = 0; tick < 20 && total < N; tick++) total += (await sweepOnce(c.driver, live, new Map(), 2_500, now)).deleted;
    clearInterval(ticking);
    expect(total).toBe(N);
    expect(await c.live()).toBe(N);
  });
});
