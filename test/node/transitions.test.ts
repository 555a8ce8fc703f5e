// The named transitions (state/transitions.ts) over in-memory records: each starts only from the
// states its transition starts from and where the caller's guard holds as the record stands at
// the write, not as it stood when read; a write that loses a race leaves the winner's record.
import { written } from "../harness/memory.ts";
import { describe, expect, it } from "vitest";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { choose, claim, complete, forgetRunner, markWarm, revive, startOver, terminate } from "../../src/state/transitions.ts";
import { cleanRunner, type CleanContext } from "../../src/forge/runner-cleanup.ts";
import type { Dispatcher } from "../../src/domain/context.ts";
import { memoryRecords } from "../harness/memory.ts";

const T0 = "2026-12-01T10:00:00.000Z";
const AT = "2026-12-01T11:00:00.000Z";
const runner = { id: 41, name: "gdr-a1", registeredAt: T0, sealed: "x" };
const rec = (over: Partial<Record<keyof AssignmentRecord, unknown>> = {}): AssignmentRecord =>
  written({
    id: "a1",
    backend: "pod",
    contentHash: "h",
    createdAt: T0,
    receivedAt: T0,
    updatedAt: T0,
    state: "backend_ready",
    ...over,
  });

describe("named transitions", () => {
  it("terminate ends a waiting record once, with its reason; a completed one stays completed; the guard is asked of the record at the write", async () => {
    const m = memoryRecords([rec(), rec({ id: "done", state: "completed" })]);
    const first = await terminate(m.records, "a1", { at: AT, reason: "cancelled" });
    expect(first).toMatchObject({ changed: true, record: { state: "terminated", terminatedAt: AT, reason: "cancelled" } });
    expect((await terminate(m.records, "a1", { at: "later", reason: "again" })).changed).toBe(false);
    expect(m.rows.get("a1")?.terminatedAt).toBe(AT);
    expect(await terminate(m.records, "done", { at: AT, reason: "late" })).toMatchObject({ changed: false, record: { state: "completed" } });
    // Read as waiting, claimed before the write: a guard "not claimed" refuses it.
    const raced = memoryRecords([rec()]);
    raced.between("a1", (r) => written({ ...r, state: "claimed", claimedAt: AT }));
    const lost = await terminate(raced.records, "a1", { at: AT, reason: "cancelled", when: (r) => r.state !== "claimed" });
    expect(lost).toMatchObject({ changed: false, record: { state: "claimed" } });
    expect(await terminate(memoryRecords().records, "nobody", { at: AT, reason: "x" })).toEqual({ record: null, changed: false });
  });

  it("terminate writes `also` with the end (a move's target)", async () => {
    const m = memoryRecords([rec({ state: "capacity_wait" })]);
    expect((await terminate(m.records, "a1", { at: AT, reason: "moved", also: { movedTo: "w1" } })).record?.movedTo).toBe("w1");
  });

  it("claim writes the job it took only when that is another's; a claimed record is not claimed again", async () => {
    const m = memoryRecords([rec(), rec({ id: "a2" })]);
    expect((await claim(m.records, "a1", { at: AT, took: "a1" })).record?.took).toBeUndefined();
    expect((await claim(m.records, "a2", { at: AT, took: "a9" })).record).toMatchObject({ state: "claimed", took: "a9", claimedAt: AT });
    expect((await claim(m.records, "a2", { at: "later" })).changed).toBe(false);
    expect(m.rows.get("a2")?.claimedAt).toBe(AT);
  });

  it("complete finishes a claimed record, and never a terminated one", async () => {
    const m = memoryRecords([rec({ state: "claimed" }), rec({ id: "t", state: "terminated" })]);
    expect(await complete(m.records, "a1", { at: AT })).toMatchObject({ changed: true, record: { state: "completed", completedAt: AT } });
    expect(await complete(m.records, "t", { at: AT })).toMatchObject({ changed: false, record: { state: "terminated" } });
  });

  it("revive undoes a moved end and drops a registration stored meanwhile; a waiting record is not revived", async () => {
    const m = memoryRecords([
      rec({ state: "terminated", terminatedAt: AT, reason: "moved", movedTo: "w1", runner }),
      rec({ id: "w", state: "capacity_wait", movedTo: "w1" }),
    ]);
    const back = await revive(m.records, "a1", (r) => r.movedTo === "w1");
    expect(back.changed).toBe(true);
    expect(back.record).toMatchObject({ state: "capacity_wait" });
    expect(back.record).not.toHaveProperty("runner");
    expect(back.record).not.toHaveProperty("movedTo");
    expect(back.record).not.toHaveProperty("terminatedAt");
    expect((await revive(m.records, "w", () => true)).changed).toBe(false);
  });

  it("startOver makes a given-up record new, keeping its job and warm mark; only once for one give-up", async () => {
    const gaveUp = rec({ state: "terminated", gaveUpAt: T0, runner, job: { repository: "a/b", name: "build" }, warm: true });
    const m = memoryRecords([gaveUp]);
    const fresh = await startOver(m.records, "a1", { at: AT, when: (r) => r.gaveUpAt === T0 });
    expect(fresh.changed).toBe(true);
    expect(fresh.record).toEqual({
      id: "a1",
      backend: "pod",
      contentHash: "h",
      createdAt: T0,
      state: "received",
      receivedAt: AT,
      updatedAt: AT,
      job: gaveUp.job,
      warm: true,
    });
    expect((await startOver(m.records, "a1", { at: "later", when: () => true })).changed).toBe(false);
  });

  it("forgetRunner forgets only the runner named, only before a runner took the job: backend_ready asks again, capacity_wait stays", async () => {
    const m = memoryRecords([rec({ runner, readyAt: AT }), rec({ id: "w", state: "capacity_wait", runner }), rec({ id: "c", state: "claimed", runner })]);
    expect((await forgetRunner(m.records, "a1", 42)).changed).toBe(false); // one id off
    const forgot = await forgetRunner(m.records, "a1", 41);
    expect(forgot.record).toMatchObject({ state: "backend_pending" });
    expect(forgot.record).not.toHaveProperty("runner");
    expect(forgot.record).not.toHaveProperty("readyAt");
    expect((await forgetRunner(m.records, "w", 41)).record).toMatchObject({ state: "capacity_wait" });
    expect(await forgetRunner(m.records, "c", 41)).toMatchObject({ changed: false, record: { state: "claimed", runner } });
    const guarded = memoryRecords([rec({ runner })]);
    expect((await forgetRunner(guarded.records, "a1", 41, () => false)).changed).toBe(false);
    expect(guarded.rows.get("a1")?.runner).toEqual(runner);
  });

  it("choose and markWarm mark once, and never a settled record", async () => {
    const m = memoryRecords([rec({ state: "capacity_wait" }), rec({ id: "c", state: "claimed" })]);
    expect((await choose(m.records, "a1")).changed).toBe(true);
    expect((await choose(m.records, "a1")).changed).toBe(false);
    expect((await choose(m.records, "c")).changed).toBe(false);
    expect((await markWarm(m.records, "a1")).record?.warm).toBe(true);
    expect((await markWarm(m.records, "a1")).changed).toBe(false);
    expect((await markWarm(m.records, "c")).record?.warm).toBeUndefined();
  });
});

describe("cleaning a listed runner past its claim timeout", () => {
  const world = (raceToClaim: boolean) => {
    const m = memoryRecords([rec({ runner, readyAt: T0 })]);
    if (raceToClaim) m.between("a1", (r) => written({ ...r, state: "claimed", claimedAt: AT }));
    const done: string[] = [];
    const d = {
      config: { pools: [], claimTimeoutMs: 60_000 },
      now: () => Date.parse(AT),
      sink: { event: (e: { event: string }) => done.push(e.event), summary: () => undefined, error: () => undefined },
      callBackend: <T>(fn: (s: AbortSignal) => Promise<T>) => fn(new AbortController().signal),
      runnersFor: () => ({ accept: () => Promise.resolve("ready"), teardown: async (id: string) => void done.push(`teardown ${id}`) }),
      forge: { deleteRunner: async (r: { id: number }) => void done.push(`delete runner ${r.id}`), listsAtHome: () => true },
    } as unknown as Dispatcher;
    const context: CleanContext = {
      d,
      records: m.records as CleanContext["records"],
      admission: { release: async (_p: unknown, id: string) => (done.push(`release ${id}`), false) } as unknown as CleanContext["admission"],
      registering: async () => new Set(),
      summary: { runnersDeleted: 0 },
      graceMs: 0,
      deleteRunner: async (r) => void done.push(`delete runner ${r.id}`),
    };
    return { m, done, context };
  };

  it("forgets its identity, gives its slot back and tears it down", async () => {
    const { m, done, context } = world(false);
    await cleanRunner(context, 41, "a1");
    expect(done).toEqual(["release a1", "teardown a1", "delete runner 41", "runner_deleted"]);
    expect(m.rows.get("a1")).toMatchObject({ state: "backend_pending" });
  });

  it("leaves it alone when its runner claims between the sweep's read and its write: nothing of the running job is torn down", async () => {
    const { m, done, context } = world(true);
    await cleanRunner(context, 41, "a1");
    expect(done).toEqual([]);
    expect(m.rows.get("a1")).toMatchObject({ state: "claimed", runner });
    expect(context.summary.runnersDeleted).toBe(0);
  });
});

describe("a record's standing (typed parts)", () => {
  it("cannot be written in an impossible combination: `npm run typecheck` fails on each line marked, and passes the near misses", () => {
    const core = { id: "a1", backend: "pod", contentHash: "h", createdAt: T0, receivedAt: T0, updatedAt: T0 } as const;
    // @ts-expect-error -- claimed without the time of its claim
    const claimedNoTime: AssignmentRecord = { ...core, state: "claimed" };
    // @ts-expect-error -- waiting with an end's reason
    const waitingWithReason: AssignmentRecord = { ...core, state: "capacity_wait", reason: "cancelled" };
    // @ts-expect-error -- terminated without a reason
    const endedNoReason: AssignmentRecord = { ...core, state: "terminated", terminatedAt: AT };
    // @ts-expect-error -- moved to a warm runner and still waiting
    const movedWaiting: AssignmentRecord = { ...core, state: "capacity_wait", movedTo: "w1" };
    // @ts-expect-error -- completed and terminated at once
    const both: AssignmentRecord = { ...core, state: "completed", completedAt: AT, terminatedAt: AT, reason: "x" };
    const nearMisses: AssignmentRecord[] = [
      { ...core, state: "claimed", claimedAt: AT },
      { ...core, state: "terminated", terminatedAt: AT, reason: "moved", movedTo: "w1" },
      { ...core, state: "completed", completedAt: AT },
      { ...core, state: "backend_ready", readyAt: AT, runner },
    ];
    expect([claimedNoTime, waitingWithReason, endedNoReason, movedWaiting, both, ...nearMisses].map((r) => r.state)).toHaveLength(9);
  });
});
