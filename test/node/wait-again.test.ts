// A job's waits in the wait set (reconcile/effects.ts), over in-memory records and wait set: every
// wait has its entry, and one wait never has two. A job that waits a second time after its entry
// was taken out (its turn's backend call failed, its slot lost, a move undone) gets a new entry;
// a return from its hold, or a pass repeated after it died before its write, adds none (not even
// once JetStream's duplicate window has passed). A delivery that read the job waiting never moves
// the record out of what its turn wrote meanwhile.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import { applyEffects, waitNumber } from "../../src/reconcile/effects.ts";
import { finishMessage } from "../../src/reconcile/process.ts";
import type { Prepared, ProcessDeps } from "../../src/reconcile/types.ts";
import type { Effect } from "../../src/reconcile/decide.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { revive } from "../../src/state/transitions.ts";
import { memoryRecords } from "../harness/memory.ts";
import { memoryWaitSet } from "../harness/memory-wait-set.ts";

const TRUST = "dispatch.test";
const decoded = completeAssignment(
  { version: 1, id: "j-1", backend: "pod", labels: ["x"], job: { id: 1, runId: 1, attempt: 1, repository: "a/mono" } },
  TRUST,
  new Date(0),
);
if (!decoded.ok) throw new Error("bad fixture");
const assignment = decoded.assignment;
const base = { id: "j-1", backend: "pod", job: { repository: "a/mono" }, receivedAt: "2026-12-04T00:00:00Z", contentHash: "h" } as const;

function world(state: AssignmentRecord["state"], extra: Partial<AssignmentRecord> = {}) {
  const mem = memoryRecords([{ ...base, state, ...extra } as AssignmentRecord]);
  const waits = memoryWaitSet();
  const sent: string[] = [];
  const events: string[] = [];
  const records = mem.records;
  const deps = {
    backend: "pod",
    trustDomain: TRUST,
    policy: { claimTimeoutMs: 60_000 },
    pools: new Map(),
    records,
    now: () => Date.parse("2026-12-05T00:00:00Z"),
    sink: { event: (e: { event: string }) => void events.push(e.event), summary: () => undefined, error: () => undefined },
    waiting: { set: waits.set },
    admission: { release: async () => false },
  } as unknown as ProcessDeps;
  let delivery = 0;
  /** A delivery of the job's message that read the record as it stands now. */
  const deliver = async (): Promise<Prepared> => {
    delivery++;
    const value = (await mem.records.get("j-1"))!;
    return {
      msg: {
        data: encodeAssignment(assignment),
        seq: 2,
        deliveryCount: delivery,
        ackSubject: `$JS.ACK.S.pod.1.2.${delivery}.0.0`,
        ack: () => undefined,
        ackAck: async () => void sent.push("ack"),
        nak: (d) => void sent.push(`nak ${d}`),
        term: () => void sent.push("term"),
      },
      facts: { now: 0, budgetSpent: false, decoded: true, offer: "same", state: value.state, admitted: false, waitSet: true, waitedMs: 0, jitter: 0.5 },
      assignment,
      known: { value, revision: 1 },
      reserved: false,
    };
  };
  const wait: Effect[] = ["enter_wait_set", "mark_waiting"];
  const enter = async () => applyEffects(deps, await deliver(), wait, undefined);
  return { mem, waits, deps, deliver, enter, wait, sent, events, ids: () => waits.entries.map((e) => e.head.id) };
}

describe("a job's waits in the wait set", () => {
  it("a new job's first wait puts it in once; a return from its hold adds nothing, and names its latest delivery", async () => {
    const w = world("received");
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    expect(await w.mem.records.get("j-1")).toMatchObject({ state: "capacity_wait", waits: 1 });
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    expect((await w.mem.records.get("j-1"))!.heldBy).toBe("$JS.ACK.S.pod.1.2.2.0.0");
  });

  it("a return from its hold after JetStream's duplicate window passed adds nothing either", async () => {
    const w = world("received");
    await w.enter();
    w.waits.windowPassed();
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
  });

  it("a job that waited across the upgrade to counted waits (its record names its held message, no count) adds no second entry", async () => {
    const w = world("capacity_wait", { heldBy: "$JS.ACK.S.pod.1.2.1.0.0" });
    // Its entry, put in before the upgrade under the id of the job's life alone.
    await w.deps.waiting!.set.add("pod", { id: "j-1", owner: "a", repository: "a/mono", data: "" }, Date.parse(base.receivedAt).toString(36));
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    expect(await w.mem.records.get("j-1")).toMatchObject({ state: "capacity_wait", waits: 0 });
  });

  it("a job that waits again after its turn took its entry out (its backend call failed, the backend full again) gets a new entry", async () => {
    const w = world("received");
    await w.enter();
    // Its turn: asked for, its entry taken out; then its backend call failed and gave the slot back.
    w.waits.entries.splice(0);
    await w.mem.records.update("j-1", (r) => ({ ...r, state: "backend_pending" }) as AssignmentRecord);
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    expect(await w.mem.records.get("j-1")).toMatchObject({ state: "capacity_wait", waits: 2 });
  });

  it("a pass that died between the put and the write is repeated with the same wait's id: one entry", async () => {
    const w = world("received");
    const p = await w.deliver();
    await w.deps.waiting!.set.add(
      "pod",
      { id: "j-1", owner: "a", repository: "a/mono", data: "", ack: p.msg.ackSubject },
      `${Date.parse(base.receivedAt).toString(36)}-1`,
    );
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
  });

  it("a chosen job (a turn published again) that waits again is a new wait, and is chosen anew", async () => {
    const w = world("capacity_wait", { waits: 1, chosen: true, heldBy: "$JS.ACK.S.pod.1.2.1.0.0" });
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    const after = await w.mem.records.get("j-1");
    expect(after).toMatchObject({ waits: 2 });
    expect(after!.chosen).toBeUndefined();
  });

  it("waitNumber: the record's own wait while it waits there; the next one otherwise; near misses: received, quota_wait", () => {
    const r = (state: AssignmentRecord["state"], extra: Partial<AssignmentRecord> = {}) => ({ ...base, state, ...extra }) as AssignmentRecord;
    expect(waitNumber(r("received"))).toBe(1);
    const held = { waits: 3, heldBy: "$JS.ACK.S.pod.1.2.1.0.0" };
    expect(waitNumber(r("capacity_wait", held))).toBe(3);
    expect(waitNumber(r("quota_wait", held))).toBe(3);
    expect(waitNumber(r("backend_pending", held))).toBe(4);
    expect(waitNumber(r("backend_ready", held))).toBe(4);
    // Waiting, but not in the wait set for it (revived, or a wait without fair share).
    expect(waitNumber(r("capacity_wait", { waits: 3 }))).toBe(4);
    // A record from before the count that waits in the wait set: wait 0 (its entry has the old id).
    expect(waitNumber(r("capacity_wait", { heldBy: held.heldBy }))).toBe(0);
    expect(waitNumber(r("received"))).toBe(1);
  });

  it("a revived job (a Forgejo move undone) waits anew: a new entry, and a turn chosen before is over", async () => {
    const w = world("received");
    await w.enter();
    // Moved: its entry goes at the move's turn; then the move is undone.
    w.waits.entries.splice(0);
    await w.mem.records.update("j-1", (r) => ({ ...r, state: "terminated", movedTo: "w-1", chosen: true }) as AssignmentRecord);
    const { record } = await revive(w.mem.records, "j-1", () => true);
    expect(record).toMatchObject({ state: "capacity_wait", waits: 1 });
    expect([record!.chosen, record!.heldBy]).toEqual([undefined, undefined]);
    await w.enter();
    expect(w.ids()).toEqual(["j-1"]);
    expect(await w.mem.records.get("j-1")).toMatchObject({ waits: 2 });
  });
});

describe("a delivery back from its hold while its turn is given", () => {
  it("does not move the record out of what the turn wrote; it is looked at again soon, not held for minutes", async () => {
    const w = world("capacity_wait", { waits: 1 });
    const p = await w.deliver();
    // The turn's write lands between this delivery's read and its write.
    w.mem.between("j-1", (r) => ({ ...r, state: "backend_pending", askedAt: "2026-12-05T00:00:00Z" }) as AssignmentRecord);
    const verdict = await finishMessage(w.deps, p, false);
    expect(await w.mem.records.get("j-1")).toMatchObject({ state: "backend_pending" });
    expect(verdict.action).toEqual({ kind: "nak", delayMs: 2_000 });
    expect(w.sent).toEqual(["nak 2000"]);
    expect(w.events).toEqual(["stale_delivery"]);
  });

  it("a claim that landed meanwhile is acked", async () => {
    const w = world("capacity_wait", { waits: 1 });
    const p = await w.deliver();
    w.mem.between("j-1", (r) => ({ ...r, state: "claimed" }) as AssignmentRecord);
    const verdict = await finishMessage(w.deps, p, false);
    expect(verdict.action.kind).toBe("ack");
    expect(w.sent).toEqual(["ack"]);
  });

  it("near miss: a delivery that read backend_pending (its slot lost) does wait again", async () => {
    const w = world("backend_pending", { waits: 1, askedAt: "2026-12-04T00:00:00Z" });
    await w.enter();
    expect(await w.mem.records.get("j-1")).toMatchObject({ state: "capacity_wait", waits: 2 });
  });
});

describe("a delivery's registration write", () => {
  const ref = (id: number) => ({ id, uuid: `u-${id}`, name: `r-${id}`, sealed: "x" }) as unknown as NonNullable<AssignmentRecord["runner"]>;

  it("never replaces a runner identity another pass stored between this pass's read and its compare-and-set retry: the first registration stays", async () => {
    const w = world("received");
    const p = await w.deliver();
    w.mem.between("j-1", (r) => ({ ...r, runner: ref(1), state: "backend_pending", askedAt: "2026-12-05T00:00:00Z" }) as AssignmentRecord);
    const after = await applyEffects(w.deps, p, ["mark_pending"], ref(2));
    expect(after!.runner).toEqual(ref(1));
    expect((await w.mem.records.get("j-1"))!.runner).toEqual(ref(1));
  });

  it("near miss: with no runner stored meanwhile, its own is written", async () => {
    const w = world("received");
    const after = await applyEffects(w.deps, await w.deliver(), ["mark_pending"], ref(2));
    expect(after!.runner).toEqual(ref(2));
  });
});
