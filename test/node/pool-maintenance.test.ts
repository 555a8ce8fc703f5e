// Pool maintenance run by many isolates at once, against the real nats-server: the warm positions'
// compare-and-set keeps the warm runners at the target, never above, whatever number of passes
// race; vacancies left by runners that took a job are filled once each.
import { describe, expect, inject, it } from "vitest";
import type { Config } from "../../src/config.ts";
import { createDispatcher } from "../../src/dispatcher.ts";
import { adoptWarm, maintainPools } from "../../src/pools/maintain.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { poolsTestEnv, provisionEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };

/** `n` passes at once, each on a connection of its own; the warm runners they published. */
async function race(config: Config, n: number): Promise<string[]> {
  const filled: string[] = [];
  const sink = { ...silent, event: (e: { event: string; assignment: string }) => void (e.event === "warm_filled" && filled.push(e.assignment)) };
  await Promise.all(
    Array.from({ length: n }, () => {
      const d = createDispatcher({ config, sink });
      return d.withState((state) => maintainPools(d, state));
    }),
  );
  return filled;
}

describe("pool maintenance from many isolates at once", () => {
  it("fills to the target and never above; refills each vacancy once", async () => {
    const config = await provisionEnv(poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 3, maxRunners: 5 }], { CAPACITY_VM: 0 }));
    const first = await race(config, 12);
    expect(first).toHaveLength(3);
    expect(await race(config, 12)).toEqual([]);
    // Two of them take a job: exactly two new ones, whoever sees the vacancies.
    await createDispatcher({ config, sink: silent }).withState(async ({ records }) => {
      for (const id of first.slice(0, 2)) await records.update(id, (r) => ({ ...r, state: "claimed" }));
    });
    const second = await race(config, 12);
    expect(second).toHaveLength(2);
    expect(second.filter((id) => first.includes(id))).toEqual([]);
    const positions = await createDispatcher({ config, sink: silent }).withState(({ warm }) => warm.list());
    expect(positions.get("small")?.map((p) => p.index)).toEqual([0, 1, 2]);
    expect(new Set(positions.get("small")?.map((p) => p.id))).toEqual(new Set([first[2], ...second]));
  });

  it("a job's runner made warm takes the position its settling vacated, not another one left empty", async () => {
    const config = await provisionEnv(poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2 }], { CAPACITY_VM: 0 }));
    const d = createDispatcher({ config, sink: silent });
    await race(config, 1);
    await d.withState(async (state) => {
      const [p0, p1] = (await state.warm.list()).get("small")!;
      // Position 0's runner took a job long ago (empty to any pass); position 1's just now, and
      // this settling vacates it.
      const claimed = (ago: number) => (r: AssignmentRecord): AssignmentRecord => ({ ...r, state: "claimed", claimedAt: new Date(Date.now() - ago).toISOString() });
      await state.records.update(p0!.id, claimed(60_000));
      await state.records.update(p1!.id, claimed(0));
      await state.records.offer({ version: 1, id: "gitea-77-1", backend: "pod", workload: "gdr-gitea-77-1", labels: ["ubuntu-latest"], createdAt: new Date().toISOString() });
      expect(await adoptWarm(d, state, "gitea-77-1", "small", new Set([p1!.id]))).toBe(true);
      const after = (await state.warm.list()).get("small")!;
      expect(after.find((p) => p.index === 1)?.id).toBe("gitea-77-1");
      expect(after.find((p) => p.index === 0)?.id).toBe(p0!.id);
    });
  });
});
