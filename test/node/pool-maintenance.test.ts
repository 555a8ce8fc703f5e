// Pool maintenance run by many isolates at once, against the real nats-server: the warm positions'
// compare-and-set keeps the warm runners at the target, never above, whatever number of passes
// race; vacancies left by runners that took a job are filled once each.
import { written } from "../harness/memory.ts";
import { describe, expect, inject, it } from "vitest";
import { loadConfig, type Config } from "../../src/app/config.ts";
import { createDispatcher, type State } from "../../src/app/dispatcher.ts";
import { adoptWarm, maintainPools } from "../../src/pools/maintain.ts";
import { settleTaken } from "../../src/pools/taken.ts";
import { drainWarm } from "../../src/pools/drain.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { poolsTestEnv, provisionEnv } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

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

const claimedNow = (r: AssignmentRecord): AssignmentRecord => written({ ...r, state: "claimed", claimedAt: new Date().toISOString() });
const job = (id: string) => ({
  version: 1 as const,
  id,
  backend: "pod" as const,
  workload: `gdr-${id}`,
  labels: ["ubuntu-latest"],
  createdAt: new Date().toISOString(),
});

describe("pool maintenance from many isolates at once", () => {
  it("fills to the target and never above; refills each vacancy once", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 3, maxRunners: 5 }], {
        CAPACITY_VM: 0,
      }),
    );
    const first = await race(config, 12);
    expect(first).toHaveLength(3);
    expect(await race(config, 12)).toEqual([]);
    // Two of them take a job: exactly two new ones, whoever sees the vacancies.
    await createDispatcher({ config, sink: silent }).withState(async ({ records }) => {
      for (const id of first.slice(0, 2)) await records.update(id, (r) => written({ ...r, state: "claimed" }));
    });
    const second = await race(config, 12);
    expect(second).toHaveLength(2);
    expect(second.filter((id) => first.includes(id))).toEqual([]);
    const positions = await createDispatcher({ config, sink: silent }).withState(({ warm }) => warm.list());
    expect(positions.get("small")?.map((p) => p.index)).toEqual([0, 1, 2]);
    expect(new Set(positions.get("small")?.map((p) => p.id))).toEqual(new Set([first[2], ...second]));
  });

  it("a warm runner booting past its pool's boot timeout and two AckWaits (no delivery looked at it: its message stranded) is ended and its position filled anew; near miss: one asked just within it stays", async () => {
    const env = poolsTestEnv(
      nats,
      backendUrl,
      "http://127.0.0.1:9",
      [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2, bootTimeoutMs: 60_000 }],
      {
        CAPACITY_VM: 0,
        ACK_WAIT_MS: 30_000,
      },
    );
    const config = await provisionEnv(env);
    const [stuck, fine] = await race(config, 1);
    const events: string[] = [];
    const d = createDispatcher({
      config,
      sink: { ...silent, event: (e: { event: string; assignment: string }) => void events.push(`${e.event} ${e.assignment}`) },
    });
    const asked = (ms: number) => (r: AssignmentRecord) => written({ ...r, state: "backend_pending", askedAt: new Date(Date.now() - ms).toISOString() });
    await d.withState(async (state) => {
      await state.records.update(stuck!, asked(60_000 + 2 * 30_000 + 5_000));
      await state.records.update(fine!, asked(60_000 + 2 * 30_000 - 5_000));
    });
    await d.withState((state) => maintainPools(d, state));
    expect(events.filter((e) => e.startsWith("warm_boot_stalled"))).toEqual([`warm_boot_stalled ${stuck}`]);
    const after = await d.withState(async (state) => ({
      ended: (await state.records.get(stuck!))?.state,
      kept: (await state.records.get(fine!))?.state,
      positions: (await state.warm.list()).get("small")!.map((p) => p.id),
    }));
    expect([after.ended, after.kept]).toEqual(["terminated", "backend_pending"]);
    expect(after.positions).toHaveLength(2);
    expect(after.positions).toContain(fine);
    expect(after.positions).not.toContain(stuck);
  });

  it("a scale-down that moves a warm runner to a lower position leaves its old position empty", async () => {
    const env = poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 3 }], {
      CAPACITY_VM: 0,
    });
    const config = await provisionEnv(env);
    await race(config, 1);
    const d = createDispatcher({ config, sink: silent });
    const [p0, p1, p2] = await d.withState(async (state) => (await state.warm.list()).get("small")!);
    // Position 0's runner took a job a minute ago (busy, its position free); the target drops to 2.
    await d.withState((state) =>
      state.records.update(p0!.id, (r) => written({ ...r, state: "claimed", claimedAt: new Date(Date.now() - 60_000).toISOString() })),
    );
    const lowered = loadConfig({ ...env, RUNNER_POOLS: JSON.stringify([{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2 }]) });
    const d2 = createDispatcher({ config: lowered, sink: silent });
    await d2.withState((state) => maintainPools(d2, state));
    const after = await d2.withState(async (state) => (await state.warm.list()).get("small")!.map((s) => [s.index, s.id]));
    expect(after).toEqual([
      [0, p2!.id],
      [1, p1!.id],
    ]);
  });

  it("a job's runner made warm takes the position its settling vacated, not another one left empty", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2 }], { CAPACITY_VM: 0 }),
    );
    const d = createDispatcher({ config, sink: silent });
    await race(config, 1);
    await d.withState(async (state) => {
      const [p0, p1] = (await state.warm.list()).get("small")!;
      // Position 0's runner took a job long ago (empty to any pass); position 1's just now, and
      // this settling vacates it.
      const claimed =
        (ago: number) =>
        (r: AssignmentRecord): AssignmentRecord =>
          written({ ...r, state: "claimed", claimedAt: new Date(Date.now() - ago).toISOString() });
      await state.records.update(p0!.id, claimed(60_000));
      await state.records.update(p1!.id, claimed(0));
      await state.records.offer({
        version: 1,
        id: "gitea-77-1",
        backend: "pod",
        workload: "gdr-gitea-77-1",
        labels: ["ubuntu-latest"],
        createdAt: new Date().toISOString(),
      });
      expect(await adoptWarm(d, state, "gitea-77-1", "small", new Set([p1!.id]))).toBe(true);
      const after = (await state.warm.list()).get("small")!;
      expect(after.find((p) => p.index === 1)?.id).toBe("gitea-77-1");
      expect(after.find((p) => p.index === 0)?.id).toBe(p0!.id);
    });
  });

  it("a job's runner that took a job before it could be made warm leaves the position to the runner that vacated it", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2 }], { CAPACITY_VM: 0 }),
    );
    const d = createDispatcher({ config, sink: silent });
    await race(config, 1);
    await d.withState(async (state) => {
      const [, p1] = (await state.warm.list()).get("small")!;
      await state.records.update(p1!.id, claimedNow);
      await state.records.offer(job("gitea-77-1"));
      await state.records.update("gitea-77-1", claimedNow);
      expect(await adoptWarm(d, state, "gitea-77-1", "small", new Set([p1!.id]))).toBe(false);
      expect((await state.warm.list()).get("small")!.find((p) => p.index === 1)?.id).toBe(p1!.id);
      expect((await state.records.get("gitea-77-1"))?.warm).toBeUndefined();
    });
  });

  it("settling a warm runner's take follows the chain when the job's runner takes another job while it is being made warm", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 1 }], { CAPACITY_VM: 0 }),
    );
    await race(config, 1);
    const placed = (r: AssignmentRecord): AssignmentRecord => written({ ...r, state: "backend_pending", placement: { pool: "small", backend: "pod" } });
    const w = await createDispatcher({ config, sink: silent }).withState(async ({ records, warm }) => {
      const [p0] = (await warm.list()).get("small")!;
      await records.update(p0!.id, claimedNow); // warm runner W took job A
      for (const id of ["gitea-1-1", "gitea-2-1"]) {
        await records.offer(job(id));
        await records.update(id, placed);
      }
      return p0!.id;
    });
    // A's runner takes job B just as the settling makes A's runner warm (its first write to A).
    let raced = false;
    const racing = (state: State): State => ({
      ...state,
      records: {
        ...state.records,
        update: async (id, change) => {
          if (id === "gitea-1-1" && !raced) {
            raced = true;
            await state.records.update(id, (r) => ({ ...claimedNow(r), took: "gitea-2-1" }));
          }
          return state.records.update(id, change);
        },
      },
    });
    const events: { event: string; assignment: string }[] = [];
    const d = createDispatcher({
      config,
      sink: { ...silent, event: (e: { event: string; assignment: string }) => void events.push(e) },
      decorateState: racing,
    });
    await settleTaken(d, { own: "gitea-1-1", by: w, warm: true, pool: "small" });
    expect(raced).toBe(true);
    // B's runner, made for a job A's runner ran, is the one kept warm, in W's position.
    expect(events.filter((e) => e.event.startsWith("warm_") || e.event === "taken_by_other").map((e) => `${e.event} ${e.assignment}`)).toEqual([
      "warm_converted gitea-2-1",
    ]);
    const after = await createDispatcher({ config }).withState(async ({ records, warm }) => ({
      positions: (await warm.list()).get("small"),
      a: await records.get("gitea-1-1"),
      b: await records.get("gitea-2-1"),
    }));
    expect(after.positions?.map((p) => p.id)).toEqual(["gitea-2-1"]);
    expect(after.a).toMatchObject({ state: "claimed", took: "gitea-2-1" });
    expect(after.a?.warm).toBeUndefined();
    expect(after.b).toMatchObject({ state: "backend_pending", warm: true });
  });

  it("a job's runner that a warm runner's take made surplus, with its pool at its target, is torn down and deleted from Gitea too", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 0 }], { CAPACITY_VM: 0 }),
    );
    const gitea = stubGitea();
    const deleted: number[] = [];
    gitea.deleteRunner = async (runner) => void deleted.push(runner.id);
    const d = createDispatcher({ config, sink: silent, gitea });
    await d.withState(async ({ records }) => {
      await records.offer(job("gitea-5-1"));
      await records.update("gitea-5-1", (r) =>
        written({
          ...r,
          state: "backend_pending",
          placement: { pool: "small", backend: "pod" },
          runner: { id: 42, name: "gdr-gitea-5-1", registeredAt: new Date().toISOString(), sealed: "x" },
        }),
      );
    });
    await settleTaken(d, { own: "gitea-5-1", by: "warm-small-0-x", warm: true, pool: "small" });
    expect(await d.withState(({ records }) => records.get("gitea-5-1"))).toMatchObject({
      state: "terminated",
      reason: "its job ran on warm runner warm-small-0-x",
    });
    expect(deleted).toEqual([42]);
  });

  it("a claim that lands while a warm runner is being drained wins: the runner is neither ended nor torn down", async () => {
    const config = await provisionEnv(
      poolsTestEnv(nats, backendUrl, "http://127.0.0.1:9", [{ name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 1 }], { CAPACITY_VM: 0 }),
    );
    await race(config, 1);
    const gitea = stubGitea();
    const deleted: number[] = [];
    gitea.deleteRunner = async (runner) => void deleted.push(runner.id);
    const d = createDispatcher({ config, sink: silent, gitea });
    const w = await d.withState(async ({ records, warm }) => {
      const [p0] = (await warm.list()).get("small")!;
      await records.update(p0!.id, (r) =>
        written({
          ...r,
          state: "backend_ready",
          readyAt: new Date().toISOString(),
          runner: { id: 7, name: "gdr-w", registeredAt: new Date().toISOString(), sealed: "x" },
        }),
      );
      return p0!.id;
    });
    // Gitea says it is idle, and its claim lands right after that answer.
    gitea.getRunner = async () => {
      await d.withState(({ records }) => records.update(w, claimedNow));
      return { id: 7, busy: false } as Awaited<ReturnType<typeof gitea.getRunner>>;
    };
    expect(await d.withState((state) => drainWarm(d, state, w, "scaled_down", "small"))).toBe(false);
    expect((await d.withState(({ records }) => records.get(w)))?.state).toBe("claimed");
    expect(deleted).toEqual([]);
    const pod = config.backends.find((b) => b.backend === "pod");
    const requests = (await (await fetch(`${pod && "url" in pod ? pod.url : ""}/_control/state`)).json()) as { requests: { method: string }[] };
    expect(requests.requests.filter((r) => r.method === "DELETE")).toEqual([]);
  });
});
