// A held job's turn (reconcile/give-turn.ts) over in-memory fakes of its narrow dependencies: the
// pass takes its slot and asks for its runner itself, through the delivery's own steps (`finish`),
// with the held message as the delivery; the entry goes only once the record left the waiting
// states. Near misses: an entry whose `ack` is not an ack subject, a job that ended or was asked
// for already, a refused slot, a pass out of budget, a backend that failed, a step that threw.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import { admitWaiting, type Told } from "../../src/reconcile/admit-waiting.ts";
import { giveHeldTurn, isHeld, type Finish } from "../../src/reconcile/give-turn.ts";
import type { Prepared, ProcessDeps, WaitingDeps } from "../../src/reconcile/types.ts";
import type { Verdict } from "../../src/reconcile/decide.ts";
import type { Versioned } from "../../src/state/kv.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import type { WaitHead } from "../../src/state/wait-set.ts";
import type { DeliveredMessage } from "../../src/nats/pull.ts";
import type { QuotaLedger } from "../../src/state/quota-ledger.ts";
import { memoryLedger } from "../harness/memory.ts";

const TRUST = "dispatch.test";
const ackOf = (seq: number) => `$JS.ACK.S.pod.1.${seq}.${seq}.1733300000000000000.0`;

function head(id: string, repository: string, seq: number, ack: string | null = ackOf(seq)): WaitHead {
  const decoded = completeAssignment(
    { version: 1, id, backend: "pod", labels: ["ubuntu-latest"], job: { id: seq, runId: seq, attempt: 1, repository } },
    TRUST,
    new Date(0),
  );
  if (!decoded.ok) throw new Error("bad fixture");
  const data = btoa(String.fromCharCode(...encodeAssignment(decoded.assignment)));
  return { id, owner: repository.split("/")[0]!, repository, seq, data, ...(ack !== null ? { ack } : {}) };
}

const record = (id: string, state: AssignmentRecord["state"], extra: Partial<AssignmentRecord> = {}): Versioned<AssignmentRecord> => ({
  value: { id, backend: "pod", state, job: { repository: "a/mono" }, receivedAt: "2026-12-04T00:00:00Z", ...extra } as AssignmentRecord,
  revision: 7,
});

const verdictOf = (kind: "ack" | "nak" | "term", events: string[] = [], delayMs = 2_000): Verdict =>
  ({
    next: "done",
    action: kind === "nak" ? { kind, delayMs } : kind === "term" ? { kind, reason: "x" } : { kind },
    events,
    effects: [],
  }) as Verdict;

function world(
  opts: {
    refuse?: "backend" | "pool";
    needsIdentity?: boolean;
    holders?: string[];
    capacity?: number;
    queues?: WaitHead[];
    ledger?: QuotaLedger;
    /** How many repositories the wait set lists (a look that did not hold every job lists them). */
    listed?: number;
  } = {},
) {
  const removed: number[] = [];
  const through: number[] = [];
  const placed: { id: string; reserve: string[] }[] = [];
  const sent: string[] = [];
  const ended: string[] = [];
  const released: string[] = [];
  const events: string[] = [];
  const errors: string[] = [];
  const manyRead: string[][] = [];
  const records = new Map<string, Versioned<AssignmentRecord>>();
  const held = (subject: string, data: Uint8Array): DeliveredMessage => ({
    data,
    seq: Number(subject.split(".")[5]),
    deliveryCount: 1,
    ackSubject: subject,
    ack: () => void sent.push(`ack ${subject}`),
    ackAck: async () => void sent.push(`ack ${subject}`),
    nak: (d) => void sent.push(`nak ${d} ${subject}`),
    term: () => void sent.push(`term ${subject}`),
  });
  const waiting = {
    rules: { weight: () => 1, limits: () => (opts.ledger ? { owner: 1 } : {}) },
    ...(opts.ledger ? { ledger: opts.ledger } : {}),
    ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}),
    held,
    set: {
      oldest: async (_b: string, limit: number) => (opts.queues ?? []).slice(0, limit),
      next: async () => undefined,
      repositories: async (_b: string, limit: number) => Array.from({ length: Math.min(opts.listed ?? 0, limit) }, (_, i) => `r${i}/x`),
      headsOf: async () => [],
      remove: async (seq: number) => void removed.push(seq),
      removeThrough: async (_b: string, seq: number) => void through.push(seq),
    },
  } as unknown as WaitingDeps;
  const deps = {
    backend: "pod",
    trustDomain: TRUST,
    pools: new Map(),
    needsIdentity: opts.needsIdentity ?? true,
    now: Date.now,
    sink: { event: (e: { event: string }) => void events.push(e.event), summary: () => undefined, error: (m: string) => void errors.push(m) },
    records: {
      getMany: async (ids: string[]) => (manyRead.push([...ids]), new Map(ids.flatMap((id) => (records.has(id) ? [[id, records.get(id)!]] : [])))),
      kept: () => new Map(),
    },
    admission: {
      holders: async () => opts.holders ?? [],
      placeMany: async (candidates: { id: string; places: unknown[] }[], reserve: Set<string>) => {
        const c = candidates[0]!;
        placed.push({ id: c.id, reserve: [...reserve] });
        if (opts.refuse) return { admitted: new Map(), reserved: new Set(), fullBackends: new Set(opts.refuse === "backend" ? ["pod"] : []) };
        return { admitted: new Map([[c.id, c.places[0]]]), reserved: new Set(reserve), fullBackends: new Set() };
      },
      endRegistrations: async (_b: string, ids: string[]) => void ended.push(...ids),
      release: async (_place: unknown, ...ids: string[]) => (released.push(...ids), false),
    },
    waiting,
  } as unknown as ProcessDeps;
  return { deps, waiting, removed, through, placed, sent, ended, released, events, errors, records, manyRead };
}

/** A finish that moves the record to `state` and answers `verdict`, remembering what it was given. */
function finishing(state: AssignmentRecord["state"], verdict: Verdict, given: Prepared[] = []): Finish {
  return async (_deps, p) => {
    given.push(p);
    // As finishMessage does: the delivery's nak, ack or term goes to its message.
    if (verdict.action.kind === "nak") p.msg.nak(verdict.action.delayMs);
    p.known = { value: { ...p.known!.value, state } as AssignmentRecord, revision: p.known!.revision + 1 };
    p.registered = true;
    return verdict;
  };
}

async function give(w: ReturnType<typeof world>, h: WaitHead, known: Versioned<AssignmentRecord> | null, finish: Finish, deadline = Infinity) {
  const started: Promise<void>[] = [];
  if (!isHeld(h)) throw new Error("fixture is not held");
  const outcome = await giveHeldTurn(w.deps, w.waiting, h, known, { deadline, started, finish, done: (seq) => void w.waiting.set.remove(seq) });
  await Promise.all(started);
  return outcome;
}

describe("a held job's turn", () => {
  it("takes its slot, reserves its registration, and asks for its runner through the delivery's steps, with its held message as the delivery; the entry goes once it was asked for", async () => {
    const w = world();
    const given: Prepared[] = [];
    const h = head("a-1", "a/mono", 3);
    expect(await give(w, h, record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak", ["backend_pending"]), given))).toBe("admitted");
    expect(w.placed).toEqual([{ id: "a-1", reserve: ["a-1"] }]);
    expect(given).toHaveLength(1);
    expect(given[0]!.msg.ackSubject).toBe(ackOf(3));
    expect(given[0]!.facts).toMatchObject({ decoded: true, offer: "same", state: "capacity_wait", admitted: true });
    expect(given[0]!.reserved).toBe(true);
    expect(w.removed).toEqual([3]);
    // The pending verdict's nak goes to the held message, as a delivery's would: its runner is looked at again.
    expect(w.sent).toEqual([`nak 2000 ${ackOf(3)}`]);
    expect(w.events).toEqual(["capacity_acquired", "turn_given"]);
  });

  it("near miss: a job whose record holds a runner already reserves nothing; one without the forge reserves nothing", async () => {
    const kept = world();
    await give(kept, head("a-1", "a/mono", 3), record("a-1", "capacity_wait", { runner: { id: 1 } as never }), finishing("backend_pending", verdictOf("nak")));
    expect(kept.placed).toEqual([{ id: "a-1", reserve: [] }]);
    const bare = world({ needsIdentity: false });
    await give(bare, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak")));
    expect(bare.placed).toEqual([{ id: "a-1", reserve: [] }]);
  });

  it.each([
    ["ended while it waited", record("x-1", "terminated")],
    ["asked for already (another pass gave the turn, or its message came back and took a slot)", record("x-1", "backend_pending")],
    ["with no record", null],
  ] as const)("a job %s gets no turn: no slot, its entry goes", async (_name, known) => {
    const w = world();
    const given: Prepared[] = [];
    expect(await give(w, head("x-1", "a/mono", 5), known, finishing("backend_pending", verdictOf("nak"), given))).toBe("gone");
    expect([w.placed, given, w.removed, w.events]).toEqual([[], [], [5], []]);
  });

  it("near miss: a job waiting at a quota limit (quota_wait) gets its turn", async () => {
    const w = world();
    expect(await give(w, head("q-1", "a/mono", 5), record("q-1", "quota_wait"), finishing("backend_pending", verdictOf("nak")))).toBe("admitted");
  });

  it.each([
    ["backend", "backend_full"],
    ["pool", "full"],
  ] as const)("a slot refused by the %s: no runner asked for, the entry stays", async (refuse, outcome) => {
    const w = world({ refuse });
    const given: Prepared[] = [];
    expect(await give(w, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak"), given))).toBe(outcome);
    expect([given, w.removed, w.events]).toEqual([[], [], []]);
  });

  it("QUOTAS: a slot refused gives back the owner's place the turn took; near misses: a place refused takes no slot, an admitted turn keeps its place", async () => {
    const ledger = memoryLedger();
    const refused = world({ refuse: "backend", ledger });
    expect(await give(refused, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak")))).toBe("backend_full");
    expect(ledger.places.get("o:a")).toEqual(new Set());
    const admitted = world({ ledger });
    expect(await give(admitted, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak")))).toBe("admitted");
    expect(ledger.places.get("o:a")).toEqual(new Set(["a-1"]));
    const limited = world({ ledger });
    expect(await give(limited, head("a-2", "a/mono", 4), record("a-2", "quota_wait"), finishing("backend_pending", verdictOf("nak")))).toBe("limited");
    expect([limited.placed, limited.removed]).toEqual([[], []]);
  });

  it("a pass out of budget asks for nothing and gives its slot back; the job keeps its entry and its hold", async () => {
    const w = world();
    const given: Prepared[] = [];
    expect(await give(w, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak"), given), Date.now() - 1)).toBe(
      "admitted",
    );
    expect(given).toEqual([]);
    expect(w.released).toEqual(["a-1"]);
    // Near miss of a deferral's nak 0: nothing is sent, the message keeps its hold.
    expect([w.removed, w.sent]).toEqual([[], []]);
    // Its reservation goes: it registered nothing.
    expect(w.ended).toEqual(["a-1"]);
  });

  it("a backend that failed: its retry delay goes to the held message, and the entry goes (its record asked)", async () => {
    const w = world();
    await give(w, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), finishing("backend_pending", verdictOf("nak", ["backend_retry"], 15_000)));
    expect(w.sent).toEqual([`nak 15000 ${ackOf(3)}`]);
    expect(w.removed).toEqual([3]);
  });

  it("a job claimed or ended meanwhile: the verdict's ack or term goes to the held message, and the entry goes", async () => {
    const acked = world();
    const ack: Finish = async (_d, p) => (await p.msg.ackAck(), verdictOf("ack", ["runner_claimed"]));
    await give(acked, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), ack);
    expect([acked.sent, acked.removed]).toEqual([[`ack ${ackOf(3)}`], [3]]);
    const termed = world();
    const term: Finish = async (_d, p) => (p.msg.term("x"), verdictOf("term", ["already_done"]));
    await give(termed, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), term);
    expect([termed.sent, termed.removed]).toEqual([[`term ${ackOf(3)}`], [3]]);
  });

  it("a step that throws leaves the entry (the next pass gives the turn again), says so, and ends the reservation", async () => {
    const w = world();
    const boom: Finish = async () => {
      throw new Error("records unavailable");
    };
    expect(await give(w, head("a-1", "a/mono", 3), record("a-1", "capacity_wait"), boom)).toBe("admitted");
    expect([w.removed, w.errors, w.ended]).toEqual([[], ["giving a turn failed"], ["a-1"]]);
  });

  it("only an entry whose `ack` is a JetStream ack subject is held; near misses: another subject, none, an ack subject with a wildcard", () => {
    expect(isHeld(head("a-1", "a/mono", 3))).toBe(true);
    expect(isHeld(head("a-1", "a/mono", 3, "$JS.API.STREAM.PURGE.S.x.y.z.a.b.c"))).toBe(false);
    expect(isHeld(head("a-1", "a/mono", 3, "gitea.assignments.pod"))).toBe(false);
    expect(isHeld(head("a-1", "a/mono", 3, null))).toBe(false);
    expect(isHeld(head("a-1", "a/mono", 3, "$JS.ACK.S.pod.1.*.3.0.0"))).toBe(false);
  });
});

describe("admitWaiting with held jobs", () => {
  it("reads the held jobs' records with the holders' in one request, and has each turn's runner asked for before it returns; it says when the turns filled the backend", async () => {
    const queues = [head("a-1", "a/mono", 1), head("c-1", "c/app", 2)];
    const w = world({ queues, holders: ["h-1"], capacity: 3 });
    for (const h of queues) w.records.set(h.id, record(h.id, "capacity_wait"));
    w.records.set("h-1", record("h-1", "claimed"));
    let asked = 0;
    const finish: Finish = async (d, p) => (await new Promise((r) => setTimeout(r, 20)), asked++, finishing("backend_pending", verdictOf("nak"))(d, p, false));
    const told: Told = { republished: 0 };
    expect(await admitWaiting(w.deps, { finish, told })).toBe(2);
    expect(asked).toBe(2);
    expect(w.manyRead).toEqual([["h-1", "a-1", "c-1"]]);
    expect(told).toEqual({ republished: 0, filled: true, exhausted: false });
    // Both entries were the glance's first: taken out in one request.
    expect(w.through).toEqual([2]);
    expect(w.removed).toEqual([]);
  });

  it("near misses: a slot left after the turns is not `filled`, and the look that saw everybody is `exhausted`; without `finish` a held job gets no turn", async () => {
    const queues = [head("a-1", "a/mono", 1)];
    const w = world({ queues, capacity: 3 });
    w.records.set("a-1", record("a-1", "capacity_wait"));
    const told: Told = { republished: 0, filled: true };
    expect(await admitWaiting(w.deps, { finish: finishing("backend_pending", verdictOf("nak")), told })).toBe(1);
    expect(told).toEqual({ republished: 0, filled: false, exhausted: true });
    const without = world({ queues, capacity: 3 });
    without.records.set("a-1", record("a-1", "capacity_wait"));
    expect(await admitWaiting(without.deps)).toBe(0);
    expect(without.placed).toEqual([]);
  });
});

describe("whether a pass's next round looks again (admitWaiting's `told`)", () => {
  const many = (n: number) => Array.from({ length: n }, (_, i) => head(`a-${i + 1}`, "a/mono", i + 1));
  const turns = async (w: ReturnType<typeof world>, told: Told) => {
    return admitWaiting(w.deps, { finish: finishing("backend_pending", verdictOf("nak")), told });
  };

  it("a look that held every job, each given its turn, leaves nobody for another look: exhausted", async () => {
    const w = world({ queues: many(3), capacity: 10 });
    for (const h of many(3)) w.records.set(h.id, record(h.id, "capacity_wait"));
    const told: Told = { republished: 0 };
    expect(await turns(w, told)).toBe(3);
    expect(told.exhausted).toBe(true);
  });

  it("near miss: a look that listed LOOK_REPOSITORIES repositories may have missed some: not exhausted; one fewer listed is", async () => {
    // 32 waiting (a glance's worth), so the repositories are listed: 64 of them, the most a look reads.
    for (const [listed, exhausted] of [
      [64, false],
      [63, true],
    ] as const) {
      const w = world({ queues: many(32), capacity: 100, listed });
      for (const h of many(32)) w.records.set(h.id, record(h.id, "capacity_wait"));
      const told: Told = { republished: 0 };
      expect(await turns(w, told)).toBe(32);
      expect(told.exhausted).toBe(exhausted);
    }
  });

  it("near misses: a look that found the backend full is `filled`, not exhausted; nobody waiting is exhausted", async () => {
    const full = world({ queues: many(1), capacity: 1, holders: ["h-1"] });
    const told: Told = { republished: 0 };
    expect(await turns(full, told)).toBe(0);
    expect(told).toEqual({ republished: 0, filled: true, exhausted: false });
    const nobody = world({ queues: [], capacity: 1 });
    const none: Told = { republished: 0 };
    expect(await turns(nobody, none)).toBe(0);
    expect(none.exhausted).toBe(true);
  });
});

describe("the entries a pass is done with, taken out (admitWaiting)", () => {
  const four = () => [head("a-1", "a/one", 1), head("b-1", "b/two", 2), head("c-1", "c/three", 3), head("d-1", "d/four", 4)];
  /** Asks for each runner, but throws for the jobs named. */
  const finishingBut = (failing: string[]): Finish => {
    const ok = finishing("backend_pending", verdictOf("nak"));
    return async (d, p, spent) => {
      if (failing.includes(p.assignment!.id)) throw new Error("backend down");
      return ok(d, p, spent);
    };
  };
  const pass = async (failing: string[], oldest = four()) => {
    const w = world({ queues: oldest, capacity: 10 });
    for (const h of oldest) w.records.set(h.id, record(h.id, "capacity_wait"));
    await admitWaiting(w.deps, { finish: finishingBut(failing) });
    return w;
  };

  it("the glance's first entries, each asked for, go in one request up to the last of them; one done with after a gap goes on its own", async () => {
    const w = await pass(["c-1"]);
    expect(w.through).toEqual([2]);
    expect(w.removed).toEqual([4]);
  });

  it("near miss: the glance's first entry not done with (its turn failed): no entry goes with it, each other one on its own", async () => {
    const w = await pass(["a-1"]);
    expect(w.through).toEqual([]);
    expect(w.removed.sort()).toEqual([2, 3, 4]);
  });

  it("near miss: only the first done with goes on its own, not through it (one request either way)", async () => {
    const w = await pass(["b-1", "c-1", "d-1"]);
    expect(w.through).toEqual([]);
    expect(w.removed).toEqual([1]);
  });

  it("a removal that fails is said, and neither fails the pass nor keeps the others' from going", async () => {
    const oldest = four();
    const w = world({ queues: oldest, capacity: 10 });
    for (const h of oldest) w.records.set(h.id, record(h.id, "capacity_wait"));
    (w.waiting.set as { removeThrough: unknown }).removeThrough = async () => {
      throw new Error("purge refused");
    };
    expect(await admitWaiting(w.deps, { finish: finishingBut(["c-1"]) })).toBe(4);
    expect(w.removed).toEqual([4]);
    expect(w.errors).toContain("taking waiting jobs out failed");
  });

  it("a job that ended while it waited counts as done with: its entry goes with the others", async () => {
    const oldest = four();
    const w = world({ queues: oldest, capacity: 10 });
    for (const h of oldest) w.records.set(h.id, record(h.id, h.id === "a-1" ? "terminated" : "capacity_wait"));
    await admitWaiting(w.deps, { finish: finishing("backend_pending", verdictOf("nak")) });
    expect(w.through).toEqual([4]);
    expect(w.removed).toEqual([]);
  });
});
