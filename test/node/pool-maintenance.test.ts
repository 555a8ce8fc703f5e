// Pool maintenance run by many isolates at once, against the real nats-server: the warm positions'
// compare-and-set keeps the warm runners at the target, never above, whatever number of passes
// race; vacancies left by runners that took a job are filled once each.
import { describe, expect, inject, it } from "vitest";
import type { Config } from "../../src/config.ts";
import { createDispatcher } from "../../src/dispatcher.ts";
import { maintainPools } from "../../src/pools/maintain.ts";
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
});
