// Warm by reuse in pool maintenance, against the real nats-server, with a backend whose parked
// servers are given: each parked server is rebuilt as one warm runner, however many passes race;
// a pass killed between its position's write and its runner's publish leaves the server covered
// for a minute (the position's grace) and then rebuilt once; one whose hour has less than warmUntil
// left is not rebuilt. Near misses: a second parked server, a server just past warmUntil.
import { describe, expect, inject, it } from "vitest";
import { loadConfig, type Config } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { maintainPools } from "../../src/pools/maintain.ts";
import { UNRECORDED_GRACE_MS } from "../../src/pools/warm-plan.ts";
import type { ParkedServer, RunnerBackend } from "../../src/domain/backend.ts";
import { poolsTestEnv, provisionEnv } from "../harness/env.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };
const WARM_UNTIL = 4 * 60_000;

/** A reuse pool on a backend whose parked servers are `parked`; `filled` hears each warm runner by reuse published. */
async function scene(parked: (t: number) => ParkedServer[]) {
  const env = poolsTestEnv(
    nats,
    backendUrl,
    "http://127.0.0.1:9",
    [{ name: "reusing", backend: "vm", labels: ["ubuntu-latest"], reuse: "rebuild", warmUntil: WARM_UNTIL }],
    {
      CAPACITY_VM: 10,
      VM_DRIVER: "hetzner",
      HCLOUD_API_URL: "http://127.0.0.1:9",
      HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
      VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" }),
    },
  );
  const config: Config = loadConfig(await provisionEnv(env).then(() => env));
  const clock = { t: Date.now() };
  const filled: { id: string; reason: string }[] = [];
  const sink = {
    ...silent,
    event: (e: { event: string; assignment: string; reason?: string }) =>
      void (e.event === "warm_reuse_filled" && filled.push({ id: e.assignment, reason: e.reason! })),
  };
  const started = clock.t;
  const vm: RunnerBackend = { accept: async () => "pending", teardown: async () => undefined, parked: async () => parked(started) };
  const dispatcher = (decorate?: Parameters<typeof createDispatcher>[0]["decorateState"]) =>
    createDispatcher({ config, sink, now: () => clock.t, runners: { vm }, ...(decorate ? { decorateState: decorate } : {}) });
  const pass = (decorate?: Parameters<typeof createDispatcher>[0]["decorateState"]) => {
    const d = dispatcher(decorate);
    return d.withState((state) => maintainPools(d, state));
  };
  return { clock, filled, pass };
}

describe("warm by reuse in pool maintenance", () => {
  it("each parked server gets one warm runner, however many passes race; one within warmUntil of its hour's end gets none", async () => {
    const s = await scene((t) => [
      { server: 11, paidUntil: t + 30 * 60_000 },
      { server: 12, paidUntil: t + 50 * 60_000 },
      { server: 13, paidUntil: t + WARM_UNTIL },
      { server: 14, paidUntil: t + WARM_UNTIL + 1 },
    ]);
    await Promise.all(Array.from({ length: 6 }, () => s.pass()));
    expect(s.filled.map((f) => f.reason).sort()).toEqual(["server 11", "server 12", "server 14"]);
    // Again: nothing more (each is under its warm runner).
    await s.pass();
    expect(s.filled).toHaveLength(3);
  });

  it("a pass killed after its position's write, before its runner's publish: the server waits the position's grace, then gets one warm runner", async () => {
    const s = await scene((t) => [{ server: 21, paidUntil: t + 40 * 60_000 }]);
    const now = s.clock.t;
    // The Worker dies as the position's write is answered: nothing is published.
    const died = new Error("the Worker was killed");
    await expect(
      s.pass((state) => ({
        ...state,
        warm: {
          ...state.warm,
          put: async (...args: Parameters<typeof state.warm.put>) => {
            await state.warm.put(...args);
            throw died;
          },
        },
      })),
    ).rejects.toBe(died);
    expect(s.filled).toEqual([]);
    // The pass after, within the grace: the position still covers it.
    s.clock.t = now + UNRECORDED_GRACE_MS - 1_000;
    await s.pass();
    expect(s.filled).toEqual([]);
    // Past it: rebuilt, once.
    s.clock.t = now + UNRECORDED_GRACE_MS + 1_000;
    await Promise.all([s.pass(), s.pass()]);
    expect(s.filled.map((f) => f.reason)).toEqual(["server 21"]);
  });
});
