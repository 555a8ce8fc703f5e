// Fair share decides among every waiting job, not only those a pass was handed: with runners that
// boot before they claim (the fake backend answers "pending"), the jobs behind them in the stream
// reach the wait set, so a slot freed by a cancel, or by a claim and a completion in one burst,
// goes by turn. Near misses: one owner only (the oldest), and FAIR_SHARE=off (stream order).
// Against the real nats-server, with passes run by hand.
import { describe, expect, inject, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import { createDispatcher, type Dispatcher } from "../../src/app/dispatcher.ts";
import { publishAssignment } from "../../src/domain/publish.ts";
import { cancelAssignment } from "../../src/domain/cancel.ts";
import { claimAssignment, completeAssignmentRun } from "../../src/domain/operations.ts";
import { assignment, provisionEnv, testEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const quiet = {
  event: (e: unknown) => {
    if (process.env.DBG) console.log(JSON.stringify(e));
  },
  summary: (e: unknown) => {
    if (process.env.DBG) console.log(JSON.stringify(e));
  },
  error: (m: string, e: unknown) => {
    if (process.env.DBG) console.log(m, JSON.stringify(e));
  },
};

/**
 * A pass's budget: ample, so that a loaded machine (CI's two cores) finishes each pass; a pass ends
 * as soon as its pulls come back empty, so this costs no time where it is quick.
 */
const PASS_BUDGET_MS = 15_000;

/** Capacity 2; six jobs of a/mono queued first, then `last` (b/fix's one job, or a seventh of a/mono). */
async function scene(opts: { fairShare: "on" | "off"; last: string; booting: boolean }) {
  const env = testEnv(nats, backendUrl, { CAPACITY_POD: 2, RETRY_DELAY_MS: 20, FAIR_SHARE: opts.fairShare });
  await provisionEnv(env);
  // Booting: the backend answers "pending" until far more calls than the test makes.
  await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: opts.booting ? 1_000 : 0 }) });
  const d = createDispatcher({ config: loadConfig(env), sink: quiet });
  const jobs = [...[1, 2, 3, 4, 5, 6].map((n) => ["a" + n, "a/mono"] as const), ["z1", opts.last] as const];
  for (const [n, [id, repository]] of jobs.entries()) await publishAssignment(d, { ...assignment(id), job: { id: n + 1, runId: 1, attempt: 1, repository } });
  await settle(d);
  return d;
}

const ALL = ["a1", "a2", "a3", "a4", "a5", "a6", "z1"];

const states = (d: Dispatcher, ids: string[]) =>
  d.withState(async ({ records }) => Object.fromEntries(await Promise.all(ids.map(async (id) => [id, (await records.get(id))?.state] as const))));
/**
 * Passes until nothing more changes and every job was seen (a turn is published again and pulled
 * in the next round). More than one where a pass ends early: with RETRY_DELAY_MS=20 a slow
 * machine's pass meets its own nak'd messages again before the rest, and stops there.
 */
const settle = async (d: Dispatcher) => {
  let before = "";
  for (let pass = 0; pass < 6; pass++) {
    await new Promise((r) => setTimeout(r, 50));
    await d.reconcile("test", PASS_BUDGET_MS);
    const now = await states(d, ALL);
    const seen = JSON.stringify(now);
    if (seen === before && !Object.values(now).includes("received")) return;
    before = seen;
  }
};

describe("a slot freed while runners boot", () => {
  it("by a cancel goes to b/fix's one job, not to a/mono's next", async () => {
    const d = await scene({ fairShare: "on", last: "b/fix", booting: true });
    expect(await states(d, ["a1", "a2", "a3", "z1"])).toEqual({ a1: "backend_pending", a2: "backend_pending", a3: "capacity_wait", z1: "capacity_wait" });
    await cancelAssignment(d, "a1", "cancelled");
    await settle(d);
    // a2's runner, still booting, was delivered again meanwhile: it keeps its slot, out of the wait set.
    expect(await states(d, ["a2", "a3", "z1"])).toEqual({ a2: "backend_pending", a3: "capacity_wait", z1: "backend_pending" });
  });

  it("by a claim and a completion in one burst goes to b/fix's one job", async () => {
    const d = await scene({ fairShare: "on", last: "b/fix", booting: false });
    expect(await states(d, ["a1", "a2", "z1"])).toEqual({ a1: "backend_ready", a2: "backend_ready", z1: "capacity_wait" });
    await claimAssignment(d, "a2");
    await Promise.all([claimAssignment(d, "a1"), completeAssignmentRun(d, "a2")]);
    await settle(d);
    expect(await states(d, ["a1", "a2", "a3", "z1"])).toEqual({ a1: "claimed", a2: "completed", a3: "capacity_wait", z1: "backend_ready" });
  });

  it("near miss, one owner only: goes to the oldest waiting job", async () => {
    const d = await scene({ fairShare: "on", last: "a/mono", booting: true });
    await cancelAssignment(d, "a1", "cancelled");
    await settle(d);
    expect(await states(d, ["a3", "a4", "z1"])).toEqual({ a3: "backend_pending", a4: "capacity_wait", z1: "capacity_wait" });
  });

  it("near miss, FAIR_SHARE=off: goes to the next in stream order, a/mono's", async () => {
    const d = await scene({ fairShare: "off", last: "b/fix", booting: true });
    await cancelAssignment(d, "a1", "cancelled");
    await settle(d);
    const after = await states(d, ["a3", "z1"]);
    expect(after.a3).toBe("backend_pending");
    expect(after.z1).not.toBe("backend_pending");
  });
});

describe("a batch of several repositories, with nobody in the wait set", () => {
  it("tries for the slots in turn order: the one free slot goes to b/fix's job, pulled beside a/mono's older one", async () => {
    // a1's runner is not delivered again in the second pass: its nak delay is longer.
    const env = testEnv(nats, backendUrl, { CAPACITY_POD: 2, RETRY_DELAY_MS: 5_000 });
    await provisionEnv(env);
    await fetch(`${env.POD_BACKEND_URL}/_control/mode`, { method: "POST", body: JSON.stringify({ readyAfter: 1_000 }) });
    const d = createDispatcher({ config: loadConfig(env), sink: quiet });
    const publish = (id: string, n: number, repository: string) =>
      publishAssignment(d, { ...assignment(id), job: { id: n, runId: 1, attempt: 1, repository } });
    await publish("a1", 1, "a/mono");
    await d.reconcile("test", PASS_BUDGET_MS);
    // One pull sees both: a/mono holds a runner, b/fix none.
    await publish("a2", 2, "a/mono");
    await publish("b1", 3, "b/fix");
    await d.reconcile("test", PASS_BUDGET_MS);
    expect(await states(d, ["a1", "a2", "b1"])).toEqual({ a1: "backend_pending", a2: "capacity_wait", b1: "backend_pending" });
  });
});
