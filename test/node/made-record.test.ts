// How a job's machine was made reaches its record with the pass's write after the ask
// (reconcile/effects.ts applyEffects, Prepared.made), over in-memory records: a claim then reads
// it for the start-up's split (state/record.ts startVia). Near misses: a backend that said
// nothing writes nothing; a claim that came first is not changed; a new boot attempt forgets it.
import { describe, expect, it } from "vitest";
import { completeAssignment } from "../../src/model/assignment.ts";
import { applyEffects } from "../../src/reconcile/effects.ts";
import { finishMessage } from "../../src/reconcile/process.ts";
import type { Effect } from "../../src/reconcile/decide.ts";
import type { Prepared, ProcessDeps } from "../../src/reconcile/types.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { memoryRecords } from "../harness/memory.ts";

const decoded = completeAssignment({ version: 1, id: "r-1", backend: "pod", labels: ["x"] }, "dispatch.test", new Date(0));
if (!decoded.ok) throw new Error("bad fixture");
const base = { id: "r-1", backend: "pod", receivedAt: "2026-12-07T00:00:00Z", contentHash: "h" } as const;

function depsOver(known: AssignmentRecord, more: Record<string, unknown> = {}) {
  const mem = memoryRecords([known]);
  const deps = {
    backend: "pod",
    trustDomain: "dispatch.test",
    policy: { claimTimeoutMs: 60_000 },
    pools: new Map(),
    records: mem.records,
    now: () => Date.parse("2026-12-07T00:00:03Z"),
    admission: { release: async () => false },
    // A new boot attempt tears the last machine down first.
    callBackend: <T>(fn: (signal: AbortSignal) => Promise<T>) => fn(AbortSignal.timeout(1_000)),
    runnersFor: () => ({ teardown: async () => undefined }),
    sink: { event: () => undefined, summary: () => undefined, error: () => undefined },
    ...more,
  } as unknown as ProcessDeps;
  return { deps, mem };
}

async function write(record: Partial<AssignmentRecord>, made: Prepared["made"], effects: Effect[]) {
  const known = { ...base, ...record } as AssignmentRecord;
  const { deps, mem } = depsOver(known);
  const p = {
    msg: { ackSubject: "$JS.ACK.S.pod.1.7.1.0.0" },
    facts: {},
    assignment: decoded.ok ? decoded.assignment : undefined,
    known: { value: known, revision: 1 },
    reserved: true,
    ...(made ? { made } : {}),
  } as unknown as Prepared;
  await applyEffects(deps, p, effects, undefined);
  return (await mem.records.get("r-1"))!;
}

describe("the pass writes how its machine was made", () => {
  it("with the write that says it was asked for", async () => {
    expect(await write({ state: "received" }, "rebuilt", ["mark_pending"])).toMatchObject({ state: "backend_pending", made: "rebuilt" });
  });
  it("near miss: a backend that said nothing (a new machine) writes nothing", async () => {
    expect((await write({ state: "received" }, undefined, ["mark_pending"])).made).toBeUndefined();
  });
  it("a claim that came before the write is left as it is", async () => {
    const r = await write({ state: "claimed", claimedAt: "2026-12-07T00:00:02Z" }, "rebuilt", ["mark_pending"]);
    expect(r).toMatchObject({ state: "claimed" });
    expect(r.made).toBeUndefined();
  });
  it("a new boot attempt forgets it: the next machine may be a new one", async () => {
    const r = await write({ state: "backend_pending", askedAt: "2026-12-07T00:00:01Z", made: "rebuilt" }, undefined, ["boot_retry"]);
    expect(r).toMatchObject({ state: "backend_pending", bootAttempts: 1 });
    expect(r.made).toBeUndefined();
  });
});

describe("a pass asks its backend how the machine was made, right after the accept", () => {
  it.each([
    ["rebuilt", "rebuilt"],
    [undefined, undefined],
  ] as const)("the backend says %s: the record says %s", async (said, written) => {
    const known = { ...base, state: "received" } as AssignmentRecord;
    const asked: string[] = [];
    const { deps, mem } = depsOver(known, {
      runnerRequest: async () => ({ request: { assignment: decoded.ok ? decoded.assignment : undefined } }),
      runnersFor: () => ({
        accept: async () => "pending",
        made: (id: string) => {
          asked.push(id);
          return said;
        },
      }),
    });
    const p = {
      msg: {
        data: new Uint8Array(),
        seq: 1,
        deliveryCount: 1,
        ackSubject: "$JS.ACK.S.pod.1.7.1.0.0",
        ack: () => undefined,
        nak: () => undefined,
        term: () => undefined,
      },
      facts: { now: 0, budgetSpent: false, decoded: true, offer: "same", state: "received", admitted: true, waitedMs: 0, jitter: 0.5 },
      assignment: decoded.ok ? decoded.assignment : undefined,
      known: { value: known, revision: 1 },
      reserved: true,
    } as unknown as Prepared;
    await finishMessage(deps, p, false);
    expect(asked).toEqual(["r-1"]);
    const r = (await mem.records.get("r-1"))!;
    expect(r.state).toBe("backend_pending");
    expect(r.made).toBe(written);
  });
});
