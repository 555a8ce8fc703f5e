// Admission with runner pools, against the real nats-server: a pool's cap and its backend's cap
// both hold at every instant, whichever is reached first, across connections; a job spills to its
// next pool only when the one before is full; a release frees the pool's slot with the backend's.
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import type { Config } from "../../src/app/config.ts";
import { poolSlotsStream, slotsStream, type Backend } from "../../src/nats/names.ts";
import { withNats } from "../../src/nats/connection.ts";
import type { Placement } from "../../src/state/admission.ts";
import { poolsTestEnv, provisionEnv } from "../harness/env.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const silent = { event: () => undefined, summary: () => undefined, error: () => undefined };
const labels = ["ubuntu-latest"];
const pool = (name: string, backend: Backend, extra: object = {}) => ({ name, backend, labels: [...labels, name], ...extra });

async function setup(pools: unknown[], overrides: Record<string, unknown> = {}) {
  return provisionEnv(poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", pools, overrides));
}

/** One placeMany per id, each on a connection of its own: as separate invocations would. */
async function placeApart(config: Config, ids: string[], places: Placement[]) {
  const results = await Promise.all(
    ids.map((id) => createDispatcher({ config, sink: silent }).withState(({ admission }) => admission.placeMany([{ id, places }]))),
  );
  return new Map(results.flatMap((r) => [...r.admitted]));
}

const placeOne = (config: Config, id: string, places: Placement[]) =>
  createDispatcher({ config, sink: silent }).withState(({ admission }) => admission.placeMany([{ id, places }]));

async function counts(config: Config, streams: string[]) {
  return withNats(config, async (h) => {
    const jsm = await jetstreamManager(h.nc);
    return Object.fromEntries(await Promise.all(streams.map(async (s) => [s, (await jsm.streams.info(s)).state.messages] as const)));
  });
}

describe("admission with runner pools", () => {
  it("a pool at its cap refuses while its backend has room; the backend at its cap refuses while the pool has room", async () => {
    const config = await setup([pool("small", "pod", { maxRunners: 2 }), pool("roomy", "pod", { maxRunners: 8 })], { CAPACITY_POD: 5 });
    const small = await placeApart(config, ["s1", "s2", "s3", "s4"], [{ backend: "pod", pool: "small" }]);
    expect(small.size).toBe(2);
    // Who refused: small's cap, while the backend had room.
    expect(await placeOne(config, "s5", [{ backend: "pod", pool: "small" }])).toMatchObject({ admitted: new Map(), fullBackends: new Set() });
    const roomy = await placeApart(config, ["r1", "r2", "r3", "r4", "r5"], [{ backend: "pod", pool: "roomy" }]);
    // The backend holds 5 in all: 2 of small's, so 3 of roomy's, though roomy allows 8.
    expect(roomy.size).toBe(3);
    const names = { stream: config.stream, subjectBase: config.subjectBase };
    // A refused backend slot gives its pool slot back: nothing is held that no runner has.
    expect(await counts(config, [slotsStream(names, "pod"), poolSlotsStream(names, "small"), poolSlotsStream(names, "roomy")])).toEqual({
      [slotsStream(names, "pod")]: 5,
      [poolSlotsStream(names, "small")]: 2,
      [poolSlotsStream(names, "roomy")]: 3,
    });
    // Who refused: the backend (roomy had room).
    const backendRefusal = await placeOne(config, "r6", [{ backend: "pod", pool: "roomy" }]);
    expect(backendRefusal).toMatchObject({ admitted: new Map(), fullBackends: new Set(["pod"]) });
  });

  it("spills to the next pool, on another backend, only when the first is full; exact under 20 concurrent callers", async () => {
    const config = await setup([pool("pods", "pod", { maxRunners: 3 }), pool("vms", "vm", { maxRunners: 10, priority: 200 })], {
      CAPACITY_POD: 10,
      CAPACITY_VM: 4,
    });
    const ids = Array.from({ length: 20 }, (_, i) => `job-${i}`);
    const placed = await placeApart(config, ids, [
      { backend: "pod", pool: "pods" },
      { backend: "vm", pool: "vms" },
    ]);
    const where = [...placed.values()].map((p) => p.pool);
    expect(where.filter((p) => p === "pods")).toHaveLength(3);
    // The vm pool allows 10, CAPACITY_VM 4: the smaller holds.
    expect(where.filter((p) => p === "vms")).toHaveLength(4);
    expect([...placed.values()].every((p) => p.backend === (p.pool === "pods" ? "pod" : "vm"))).toBe(true);
    // Asked again, an admitted id keeps its place; a refused one is still refused.
    await createDispatcher({ config, sink: silent }).withState(async ({ admission }) => {
      const inPods = [...placed].find(([, p]) => p.pool === "pods")![0];
      const again = await admission.placeMany([
        {
          id: inPods,
          places: [
            { backend: "pod", pool: "pods" },
            { backend: "vm", pool: "vms" },
          ],
        },
      ]);
      expect(again.admitted.get(inPods)).toEqual({ backend: "pod", pool: "pods" });
      const refused = ids.find((id) => !placed.has(id))!;
      expect(
        (
          await admission.placeMany([
            {
              id: refused,
              places: [
                { backend: "pod", pool: "pods" },
                { backend: "vm", pool: "vms" },
              ],
            },
          ])
        ).admitted.size,
      ).toBe(0);
      // A release frees both slots: the refused one now gets the pod pool's, its first choice.
      expect(await admission.release({ backend: "pod", pool: "pods" }, inPods)).toBe(true);
      const after = await admission.placeMany([
        {
          id: refused,
          places: [
            { backend: "pod", pool: "pods" },
            { backend: "vm", pool: "vms" },
          ],
        },
      ]);
      expect(after.admitted.get(refused)).toEqual({ backend: "pod", pool: "pods" });
    });
  });

  it("a pool without a cap is held by its backend's alone; ids named like prototype keys are ids like any other", async () => {
    const config = await setup([pool("open", "pod")], { CAPACITY_POD: 3 });
    const placed = await placeApart(config, ["constructor", "__proto__", "toString", "x"], [{ backend: "pod", pool: "open" }]);
    expect(placed.size).toBe(3);
    await withNats(config, async (h) => {
      const jsm = await jetstreamManager(h.nc);
      await expect(jsm.streams.info(poolSlotsStream({ stream: config.stream, subjectBase: config.subjectBase }, "open"))).rejects.toThrow();
    });
  });
});
