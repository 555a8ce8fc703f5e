// One Hetzner rate budget for every invocation, against the fake Hetzner API: drivers of ten
// isolates on one records bucket and one project. Together they never send a call Hetzner
// answers with 429, deletes keep their requests across isolates, and a fresh driver starts from
// the budget others spent down.
import { describe, expect, it } from "vitest";
import { createRunnerBackend } from "../../src/app/select-backend.ts";
import type { RunnerBackend } from "../../src/domain/backend.ts";
import { RateBudgetExhausted } from "../../src/backends/hetzner/rate-budget.ts";
import { hetznerScene, type HetznerScene, keptScenes, sweepOnce, vmRequest } from "../harness/hetzner.ts";

const { scenes } = keptScenes();
const within = () => AbortSignal.timeout(5_000);

/** `n` drivers as `n` isolates build them: each its own object, all on the scene's records bucket. */
const isolates = (s: HetznerScene, n: number): RunnerBackend[] =>
  Array.from({ length: n }, () => createRunnerBackend(s.config, s.config.backends[0]!, undefined, { now: () => s.clock.t, withStores: (fn) => fn(s.stores) }));
const sent429 = async (s: HetznerScene) => (await s.state()).requests.filter((r) => (r as { status?: number }).status === 429).length;
const settle = async (calls: Promise<unknown>[]) => {
  const r = await Promise.allSettled(calls);
  const refused = r.filter((x) => x.status === "rejected");
  for (const x of refused) expect((x as PromiseRejectedResult).reason).toBeInstanceOf(RateBudgetExhausted);
  return { ok: r.length - refused.length, refused: refused.length };
};

describe("the hetzner budget across isolates", () => {
  it("ten jobs made and ended at once, by ten isolates, with 16 requests left: no 429, and every server goes once the budget refills", async () => {
    const s = await hetznerScene();
    scenes.push(s);
    s.clock.t = Date.now();
    const drivers = isolates(s, 10);
    await s.ctl("mode", { rateRemaining: 16 });
    // One answer teaches the shared record what is left.
    await drivers[0]!.accept(vmRequest("seed"), within());
    const ids = Array.from({ length: 10 }, (_, i) => `job-${i}`);
    const made = await settle(ids.map((id, i) => drivers[i]!.accept(vmRequest(id), within())));
    // Creates leave the deletes' reserve: ten asked, fifteen left, ten made.
    expect(made.ok).toBe(10);
    const ended = await settle(ids.map((id, i) => drivers[(i + 3) % 10]!.teardown(id, within())));
    expect(await sent429(s)).toBe(0);
    expect(ended.ok).toBeGreaterThanOrEqual(5);
    // A create now is held back for the deletes, by a fresh isolate too, without asking Hetzner.
    const asked = (await s.state()).requests.length;
    await expect(isolates(s, 1)[0]!.accept(vmRequest("late"), within())).rejects.toBeInstanceOf(RateBudgetExhausted);
    expect((await s.state()).requests.length).toBe(asked);
    // The refill: the teardowns the budget held back go on.
    s.clock.t += 20_000;
    await s.ctl("clock", { advanceMs: 20_000 });
    await settle(ids.map((id, i) => drivers[i]!.teardown(id, within())));
    expect(await sent429(s)).toBe(0);
    expect((await s.state()).servers.map((v) => v.labels["gdr-assignment"])).toEqual(["seed"]);
  });

  it("a budget spent down by one driver holds back a fresh driver's reads and creates on the same records, without asking Hetzner", async () => {
    const s = await hetznerScene();
    scenes.push(s);
    s.clock.t = Date.now();
    await s.ctl("mode", { rateRemaining: 6 });
    await s.driver.accept(vmRequest("a-1"), within());
    const [fresh] = isolates(s, 1);
    const asked = (await s.state()).requests.length;
    await expect(sweepOnce(fresh!, new Map(), new Map(), 5_000, () => s.clock.t)).rejects.toBeInstanceOf(RateBudgetExhausted);
    await expect(fresh!.accept(vmRequest("a-2"), within())).rejects.toBeInstanceOf(RateBudgetExhausted);
    expect((await s.state()).requests.length).toBe(asked);
    // Its deletes still go.
    await fresh!.teardown("a-1", within());
    expect((await s.state()).servers).toEqual([]);
  });
});
