// A slot held by a job nobody asks a runner for (reconcile/stalled.ts, give-turn.ts), over a
// stateful in-memory world: slots with the time each was taken and a capacity, records, the wait
// set. Each case runs the pass that failed and then the pass after it, against a full backend:
// a turn out of budget gives its slot back; a turn whose pass died is resumed once its slot is
// older than ACK_WAIT_MS; a new job's pass that died has its slot given back. Near misses: a slot
// younger than that, a holder whose runner was asked for, a holder kept here as claimed.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import { admitWaiting } from "../../src/reconcile/admit-waiting.ts";
import type { Finish } from "../../src/reconcile/give-turn.ts";
import type { ProcessDeps, WaitingDeps } from "../../src/reconcile/types.ts";
import type { Verdict } from "../../src/reconcile/decide.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import type { DeliveredMessage } from "../../src/nats/pull.ts";
import { memoryLedger } from "../harness/memory.ts";
import { memoryWaitSet } from "../harness/memory-wait-set.ts";

const TRUST = "dispatch.test";
const STALL_MS = 60_000;
const ackOf = (seq: number) => `$JS.ACK.S.pod.1.${seq}.${seq}.1733300000000000000.0`;

function world({ capacity = 1, ledger }: { capacity?: number; ledger?: ReturnType<typeof memoryLedger> } = {}) {
  let now = 1_000_000;
  const slots = new Map<string, number>();
  const records = new Map<string, AssignmentRecord>();
  const kept = new Map<string, AssignmentRecord>();
  const waits = memoryWaitSet();
  const asked: string[] = [];
  const sent: string[] = [];
  const events: string[] = [];
  const reads: string[][] = [];
  const held = (subject: string, data: Uint8Array): DeliveredMessage => ({
    data,
    seq: Number(subject.split(".")[5]),
    deliveryCount: 1,
    ackSubject: subject,
    ack: () => void sent.push(`ack ${subject}`),
    ackAck: async () => void sent.push(`ack ${subject}`),
    nak: (d) => void sent.push(`nak ${d}`),
    term: () => void sent.push(`term ${subject}`),
  });
  const waiting = {
    rules: { weight: () => 1, limits: () => (ledger ? { owner: 5 } : {}) },
    ...(ledger ? { ledger } : {}),
    capacity,
    stallAfterMs: STALL_MS,
    held,
    set: waits.set,
  } as unknown as WaitingDeps;
  const deps = {
    backend: "pod",
    trustDomain: TRUST,
    pools: new Map(),
    needsIdentity: false,
    now: () => now,
    sink: { event: (e: { event: string }) => void events.push(`${e.event}`), summary: () => undefined, error: () => undefined },
    records: {
      getMany: async (ids: string[]) => (
        reads.push([...ids]),
        new Map(ids.flatMap((id) => (records.has(id) ? [[id, { value: records.get(id)!, revision: 1 }]] : [])))
      ),
      kept: (ids: string[]) => new Map(ids.flatMap((id) => (kept.has(id) ? [[id, kept.get(id)!]] : []))),
    },
    admission: {
      holders: async () => [...slots.keys()],
      heldSince: async () => new Map(slots),
      placeMany: async (candidates: { id: string; places: unknown[] }[]) => {
        const c = candidates[0]!;
        if (!slots.has(c.id) && slots.size >= capacity) return { admitted: new Map(), reserved: new Set(), fullBackends: new Set(["pod"]) };
        if (!slots.has(c.id)) slots.set(c.id, now);
        return { admitted: new Map([[c.id, c.places[0]]]), reserved: new Set(), fullBackends: new Set() };
      },
      release: async (_place: unknown, id: string) => (slots.delete(id), false),
      endRegistrations: async () => undefined,
    },
    waiting,
  } as unknown as ProcessDeps;
  /** A job waiting in the wait set with its message held. */
  const wait = async (id: string, repository: string) => {
    const decoded = completeAssignment({ version: 1, id, backend: "pod", labels: ["x"], job: { id: 1, runId: 1, attempt: 1, repository } }, TRUST, new Date(0));
    if (!decoded.ok) throw new Error("bad fixture");
    const data = btoa(String.fromCharCode(...encodeAssignment(decoded.assignment)));
    const seq = (await waits.set.add("pod", { id, owner: repository.split("/")[0]!, repository, data, ack: ackOf(waits.entries.length + 1) }, "i-1"))!;
    records.set(id, { id, backend: "pod", state: "capacity_wait", job: { repository }, receivedAt: "2026-12-04T00:00:00Z" } as AssignmentRecord);
    return seq;
  };
  /** finishMessage as far as these passes need it: the runner asked for, the record moved on. */
  const asking: Finish = async (_d, p) => {
    asked.push(p.assignment!.id);
    records.set(p.assignment!.id, { ...records.get(p.assignment!.id)!, state: "backend_pending" } as AssignmentRecord);
    p.known = { value: records.get(p.assignment!.id)!, revision: 2 };
    p.msg.nak(2_000);
    return { next: "done", action: { kind: "nak", delayMs: 2_000 }, events: ["backend_pending"], effects: ["mark_pending"] } as Verdict;
  };
  return {
    deps,
    slots,
    records,
    kept,
    waits,
    asked,
    sent,
    events,
    reads,
    wait,
    asking,
    later: (ms: number) => void (now += ms),
    at: () => now,
  };
}

describe("a turn whose pass ran out of budget", () => {
  it("gives its slot back and keeps its entry and its hold; the next pass gives the turn again and asks for the runner", async () => {
    const w = world();
    await w.wait("a-1", "a/mono");
    const spent = w.at() - 1;
    expect(await admitWaiting(w.deps, { finish: w.asking, deadline: spent })).toBe(1);
    expect([w.asked, [...w.slots.keys()], w.sent]).toEqual([[], [], []]);
    expect(w.waits.entries.map((e) => e.head.id)).toEqual(["a-1"]);
    // The pass after it, against the same (now not full) backend.
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(1);
    expect([w.asked, [...w.slots.keys()]]).toEqual([["a-1"], ["a-1"]]);
    expect(w.waits.entries).toEqual([]);
  });

  it("gives its QUOTAS place back with its slot", async () => {
    const ledger = memoryLedger();
    const w = world({ ledger });
    await w.wait("a-1", "a/mono");
    await admitWaiting(w.deps, { finish: w.asking, deadline: w.at() - 1 });
    expect(ledger.places.get("o:a")).toEqual(new Set());
    // Near miss: a turn within its budget keeps the place it took.
    await admitWaiting(w.deps, { finish: w.asking });
    expect(ledger.places.get("o:a")).toEqual(new Set(["a-1"]));
  });
});

describe("a slot held by a turn whose pass died before asking", () => {
  /** a-1's turn took the only slot, and its pass died: its record still waits, its entry is there. */
  async function died() {
    const w = world();
    await w.wait("a-1", "a/mono");
    await w.wait("b-1", "b/fix");
    w.slots.set("a-1", w.at());
    return w;
  }

  it("is its job's again once older than ACK_WAIT_MS: the next turn-giving pass asks for its runner first, and the entry goes", async () => {
    const w = await died();
    w.later(STALL_MS + 1);
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(1);
    expect(w.asked).toEqual(["a-1"]);
    expect(w.events).toContain("turn_resumed");
    expect(w.waits.entries.map((e) => e.head.id)).toEqual(["b-1"]);
    // The backend is full with a runner asked for: the pass after gives no turn.
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(0);
    expect(w.asked).toEqual(["a-1"]);
  });

  it("near miss: a slot younger than ACK_WAIT_MS (its pass may still be asking) keeps the backend full; no turn, no second ask", async () => {
    const w = await died();
    w.later(STALL_MS - 1);
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(0);
    expect(w.asked).toEqual([]);
  });

  it("near miss: a holder whose runner was asked for (backend_pending) is not stalled, however old its slot", async () => {
    const w = await died();
    w.records.set("a-1", { ...w.records.get("a-1")!, state: "backend_pending" } as AssignmentRecord);
    w.later(10 * STALL_MS);
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(0);
    expect(w.asked).toEqual([]);
  });

  it("costs no read while each holder is kept here as claimed", async () => {
    const w = await died();
    w.slots.delete("a-1");
    w.slots.set("c-1", w.at());
    w.kept.set("c-1", { id: "c-1", state: "claimed" } as AssignmentRecord);
    w.later(10 * STALL_MS);
    expect(await admitWaiting(w.deps, { finish: w.asking, joined: true })).toBe(0);
    expect(w.reads).toEqual([]);
  });
});

describe("a slot held by a new job whose pass died before asking (no entry)", () => {
  it("goes back once older than ACK_WAIT_MS, and the turn goes to the job that waits", async () => {
    const w = world();
    w.records.set("n-1", { id: "n-1", backend: "pod", state: "received", job: { repository: "n/new" } } as AssignmentRecord);
    w.slots.set("n-1", w.at());
    await w.wait("b-1", "b/fix");
    w.later(STALL_MS + 1);
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(1);
    expect(w.events).toContain("slot_reclaimed");
    expect(w.asked).toEqual(["b-1"]);
    expect([...w.slots.keys()]).toEqual(["b-1"]);
  });

  it("near miss: younger, it stays, and nobody gets a turn", async () => {
    const w = world();
    w.records.set("n-1", { id: "n-1", backend: "pod", state: "received", job: { repository: "n/new" } } as AssignmentRecord);
    w.slots.set("n-1", w.at());
    await w.wait("b-1", "b/fix");
    w.later(STALL_MS);
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(0);
    expect([...w.slots.keys()]).toEqual(["n-1"]);
  });
});

describe("a resumed turn in a pass with room left (capacity 2)", () => {
  /** a-1's turn took a slot and its pass died; n-1's new-job pass died too; a-2 and b-1 wait. */
  async function twoStalled() {
    const w = world({ capacity: 2 });
    await w.wait("a-1", "a/mono");
    await w.wait("a-2", "a/mono");
    await w.wait("b-1", "b/fix");
    w.slots.set("a-1", w.at());
    w.records.set("n-1", { id: "n-1", backend: "pod", state: "received", job: { repository: "n/new" } } as AssignmentRecord);
    w.slots.set("n-1", w.at());
    w.later(STALL_MS + 1);
    return w;
  }

  it("leaves the pass's heads once resumed: its job is asked for once, and the slot n-1 gave back goes by turn, never to a-1 again", async () => {
    const w = await twoStalled();
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(2);
    expect(w.asked.filter((id) => id === "a-1")).toEqual(["a-1"]);
    expect(w.asked).toHaveLength(2);
    expect([...w.slots.keys()].sort()).toEqual([w.asked[0], w.asked[1]].sort());
    expect(w.events.filter((e) => e === "turn_resumed")).toHaveLength(1);
  });

  it("puts its repository's next job in its place: with b/fix at its QUOTAS limit, a-2 gets the freed slot", async () => {
    const w = await twoStalled();
    w.deps.waiting!.rules = { weight: () => 1, limits: (r: string) => (r === "b/fix" ? { repository: 0 } : {}) } as never;
    expect(await admitWaiting(w.deps, { finish: w.asking })).toBe(2);
    expect(w.asked).toEqual(["a-1", "a-2"]);
    expect(w.waits.entries.map((e) => e.head.id)).toEqual(["b-1"]);
  });
});
