// Admission of a batch (reconcile/process.ts prepareBatch) over in-memory fakes of its narrow
// dependencies: QUOTAS places given back by a delivery refused a slot, a job that boots keeping its
// slot while others wait, and a batch of several repositories trying in turn order.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import type { Backend } from "../../src/nats/names.ts";
import type { DeliveredMessage } from "../../src/nats/pull.ts";
import { prepareBatch } from "../../src/reconcile/process.ts";
import type { ProcessDeps } from "../../src/reconcile/types.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import { memoryLedger } from "../harness/memory.ts";
import { turnMessageId } from "../../src/state/wait-set.ts";

const TRUST = "dispatch.test";
let seq = 0;
const message = (id: string, repository: string): DeliveredMessage => {
  const decoded = completeAssignment(
    { version: 1, id, backend: "pod", labels: ["ubuntu-latest"], job: { id: ++seq, runId: 1, attempt: 1, repository } },
    TRUST,
    new Date(0),
  );
  if (!decoded.ok) throw new Error("bad fixture");
  return {
    data: encodeAssignment(decoded.assignment),
    seq,
    deliveryCount: 1,
    ackSubject: `$JS.ACK.S.pod.1.${seq}.${seq}.0.0`,
    ack: () => undefined,
    ackAck: async () => undefined,
    nak: () => undefined,
    term: () => undefined,
  };
};

interface Options {
  /** Slots free now; each candidate tried takes one, in the order asked. */
  free: number;
  /** Records that exist already (a job delivered again), by id; a tombstone's content matches any. */
  known?: Record<string, Partial<AssignmentRecord>>;
  waiting?: boolean;
  ledger?: ReturnType<typeof memoryLedger>;
  /** Runners held now per repository (all on this backend). */
  held?: Record<string, number>;
  /** Ids that hold a slot already with no runner asked for (their pass died after taking it). */
  holding?: string[];
}

function deps(opts: Options) {
  const asked: string[] = [];
  const turns: string[] = [];
  const records = new Map<string, AssignmentRecord>();
  const record = (id: string, extra: Partial<AssignmentRecord> = {}) =>
    ({ id, state: "received", receivedAt: new Date(0).toISOString(), ...extra }) as AssignmentRecord;
  for (const [id, r] of Object.entries(opts.known ?? {})) records.set(id, record(id, { tombstone: true, ...r }));
  const holders = Object.entries(opts.held ?? {}).flatMap(([repo, n]) => Array.from({ length: n }, (_, i) => `${repo}#${i}`));
  let holdersRead = 0;
  for (const h of holders) records.set(h, record(h, { state: "claimed", job: { repository: h.split("#")[0]! } }));
  let free = opts.free;
  const d = {
    backend: "pod" as Backend,
    trustDomain: TRUST,
    policy: { claimTimeoutMs: 60_000 },
    pools: new Map(),
    warmGraceMs: 0,
    warmPools: new Set(),
    needsIdentity: false,
    now: () => 1_000,
    sink: { event: () => undefined, summary: () => undefined, error: () => undefined },
    records: {
      getMany: async (_ids: string[]) => new Map<string, { value: AssignmentRecord; revision: number }>(),
      kept: () => new Map(),
      offer: async (a: { id: string }) => {
        records.set(a.id, record(a.id));
        return { result: "new", record: records.get(a.id)!, revision: 1 };
      },
    },
    admission: {
      holders: async () => (holdersRead++, [...holders, ...(opts.holding ?? [])]),
      placeMany: async (candidates: { id: string; places: { backend: Backend }[] }[], _reserve: unknown, o?: { turns?: ReadonlySet<string> }) => {
        turns.push(...(o?.turns ?? []));
        const admitted = new Map<string, { backend: Backend }>();
        for (const c of candidates) {
          asked.push(c.id);
          const holds = records.get(c.id)?.askedAt !== undefined || (opts.holding ?? []).includes(c.id);
          if (holds || free > 0) {
            if (!holds) free--;
            admitted.set(c.id, c.places[0]!);
          }
        }
        return { admitted, reserved: new Set(), fullBackends: new Set(admitted.size < candidates.length ? ["pod"] : []) };
      },
    },
    waiting: {
      rules: { weight: () => 1, limits: () => ({ owner: 10, repository: 10 }) },
      ...(opts.ledger ? { ledger: opts.ledger } : {}),
      set: { any: async () => opts.waiting ?? false },
    },
  };
  // The holders' records are read by heldNow in one batch read.
  d.records.getMany = async (ids: string[]) => new Map(ids.filter((id) => records.has(id)).map((id) => [id, { value: records.get(id)!, revision: 1 }]));
  return { deps: d as unknown as ProcessDeps, asked, turns, holdersRead: () => holdersRead };
}

describe("prepareBatch", () => {
  it("a fresh delivery refused a slot gives its QUOTAS places back; the admitted one keeps its own", async () => {
    const ledger = memoryLedger();
    const { deps: d } = deps({ free: 1, ledger });
    const batch = await prepareBatch(d, [message("first", "acme/app"), message("second", "acme/app")], Infinity);
    expect(batch.map((p) => p.facts.admitted)).toEqual([true, false]);
    expect(batch[1]!.facts.waitSet).toBe(true);
    expect(await ledger.held(["acme"])).toEqual(new Map([["acme", 1]]));
    expect(ledger.places.get("r:acme/app")).toEqual(new Set(["first"]));
  });

  it("while others wait, a new job joins them, but a job delivered again while its runner boots keeps its slot", async () => {
    const { deps: d, asked } = deps({ free: 0, waiting: true, known: { booting: { state: "backend_pending", askedAt: new Date(0).toISOString() } } });
    const batch = await prepareBatch(d, [message("booting", "a/mono"), message("new", "b/fix")], Infinity);
    expect(batch.map((p) => [p.assignment!.id, p.facts.admitted, p.facts.waitSet])).toEqual([
      ["booting", true, undefined],
      ["new", false, true],
    ]);
    expect(asked).toEqual(["booting"]);
  });

  it("while others wait, a job delivered again that holds a slot no runner was asked for (its pass died) asks now, with that slot; near misses: one delivered again holding none waits, a first delivery reads no holders", async () => {
    const again = (m: DeliveredMessage) => ({ ...m, deliveryCount: 2 });
    for (const state of ["received", "capacity_wait"] as const) {
      const { deps: d } = deps({ free: 0, waiting: true, holding: ["stalled"], known: { stalled: { state }, other: { state } } });
      const batch = await prepareBatch(d, [again(message("stalled", "a/mono")), again(message("other", "b/fix"))], Infinity);
      expect(batch.map((p) => [p.assignment!.id, p.facts.admitted, p.facts.waitSet])).toEqual([
        ["stalled", true, undefined],
        ["other", false, true],
      ]);
    }
    const { deps: d, holdersRead } = deps({ free: 0, waiting: true, holding: ["new"] });
    const batch = await prepareBatch(d, [message("new", "a/mono")], Infinity);
    expect([batch[0]!.facts.waitSet, holdersRead()]).toEqual([true, 0]);
  });

  it("a waiting job's wait counts from its record's making (its hold grows with it); near miss: a new job's is its own moment", async () => {
    const { deps: d } = deps({ free: 0, waiting: true, known: { long: { state: "capacity_wait", receivedAt: new Date(1_000 - 8 * 60_000).toISOString() } } });
    const batch = await prepareBatch(d, [message("long", "a/mono"), message("new", "b/fix")], Infinity);
    expect(batch.map((p) => [p.assignment!.id, p.facts.waitedMs])).toEqual([
      ["long", 8 * 60_000],
      ["new", 1_000],
    ]);
  });

  it("a batch of several repositories tries for the slots in turn order: the one free slot goes to b/fix", async () => {
    const { deps: d, asked } = deps({ free: 1, held: { "a/mono": 1 } });
    const batch = await prepareBatch(d, [message("a-2", "a/mono"), message("a-3", "a/mono"), message("b-1", "b/fix")], Infinity);
    expect(asked).toEqual(["b-1", "a-2", "a-3"]);
    expect(batch.filter((p) => p.facts.admitted).map((p) => p.assignment!.id)).toEqual(["b-1"]);
  });

  it("near miss: one repository's batch keeps stream order", async () => {
    const { deps: d, asked } = deps({ free: 1, held: { "b/fix": 3 } });
    await prepareBatch(d, [message("a-2", "a/mono"), message("a-3", "a/mono")], Infinity);
    expect(asked).toEqual(["a-2", "a-3"]);
  });

  it("fair share: whether anybody waits is asked alongside the records' read, not after it (one round trip less)", async () => {
    const { deps: d } = deps({ free: 0, waiting: true });
    const order: string[] = [];
    const getMany = d.records.getMany.bind(d.records);
    d.records.getMany = async (ids) => {
      order.push("records asked");
      await new Promise((r) => setTimeout(r, 5));
      order.push("records read");
      return getMany(ids);
    };
    const any = d.waiting!.set.any.bind(d.waiting!.set);
    d.waiting!.set.any = async (b) => (order.push("waiting asked"), any(b));
    const batch = await prepareBatch(d, [message("new-1", "b/fix")], Infinity);
    expect(order.slice(0, 3)).toEqual(["waiting asked", "records asked", "records read"]);
    expect(batch[0]!.facts).toMatchObject({ admitted: false, waitSet: true });
  });

  it("asks the records of first deliveries as such (their offer may answer), and no redelivery's", async () => {
    const { deps: d } = deps({ free: 2, known: { booting: { state: "backend_pending", askedAt: new Date(0).toISOString() } } });
    const asked: { ids: string[]; first: string[] }[] = [];
    const getMany = d.records.getMany.bind(d.records);
    d.records.getMany = async (ids, first) => (asked.push({ ids: [...ids], first: [...(first ?? [])] }), getMany(ids));
    await prepareBatch(d, [{ ...message("booting", "a/mono"), deliveryCount: 2 }, message("new-3", "b/fix")], Infinity);
    expect(asked[0]).toEqual({ ids: ["booting", "new-3"], first: ["new-3"] });
  });

  it("takes whether anybody waits from the pass that asked alongside its pull, and does not ask again", async () => {
    const { deps: d } = deps({ free: 1, waiting: false });
    let asked = 0;
    d.waiting!.set.any = async () => (asked++, false);
    const batch = await prepareBatch(d, [message("new-4", "b/fix")], Infinity, Promise.resolve(true));
    expect(asked).toBe(0);
    expect(batch[0]!.facts).toMatchObject({ admitted: false, waitSet: true });
    // The same pass's batch of redeliveries (split from its new jobs): one that needs its turn takes that answer too.
    const again = await prepareBatch(d, [{ ...message("again-1", "b/fix"), deliveryCount: 2 }], Infinity, Promise.resolve(true));
    expect(asked).toBe(0);
    expect(again[0]!.facts).toMatchObject({ admitted: false, waitSet: true });
  });

  it("near miss: a batch of redeliveries does not ask; one that must know and cannot fails as before", async () => {
    const { deps: d } = deps({ free: 1, known: { booting: { state: "backend_pending", askedAt: new Date(0).toISOString() } } });
    let asked = 0;
    d.waiting!.set.any = async () => {
      asked++;
      throw new Error("NATS went away");
    };
    const again = { ...message("booting", "a/mono"), deliveryCount: 2 };
    const batch = await prepareBatch(d, [again], Infinity);
    expect(asked).toBe(0);
    expect(batch[0]!.facts.admitted).toBe(true);
    await expect(prepareBatch(d, [message("new-2", "b/fix")], Infinity)).rejects.toThrow("NATS went away");
    expect(asked).toBe(1);
  });

  it("a turn's message asks nobody whether anybody waits: its job was chosen; near misses: a new job's message, and a turn's whose record is not chosen", async () => {
    const { deps: d } = deps({ free: 1, known: { turned: { state: "capacity_wait", chosen: true }, odd: { state: "capacity_wait" } } });
    let asked = 0;
    d.waiting!.set.any = async () => (asked++, false);
    const turn = { ...message("turned", "a/mono"), msgId: turnMessageId("turned", 12) };
    const batch = await prepareBatch(d, [turn], Infinity);
    expect(asked).toBe(0);
    expect(batch[0]!.facts.admitted).toBe(true);
    await prepareBatch(d, [{ ...message("new-5", "b/fix"), msgId: "new-5" }], Infinity);
    expect(asked).toBe(1);
    // Not chosen after all (a message named like a turn's): asked where it is needed, not before.
    const odd = await prepareBatch(d, [{ ...message("odd", "b/fix"), msgId: "odd.turn-3" }], Infinity);
    expect(asked).toBe(2);
    expect(odd[0]!.facts.admitted).toBe(false);
  });

  it("names to admission, as a turn's, only its message's first delivery (a slot handed on goes to no other); near misses: its redelivery, a new job", async () => {
    const { deps: d, turns } = deps({ free: 3, known: { turned: { state: "capacity_wait", chosen: true }, again: { state: "capacity_wait", chosen: true } } });
    await prepareBatch(
      d,
      [
        { ...message("turned", "a/mono"), msgId: turnMessageId("turned", 4) },
        { ...message("again", "b/fix"), msgId: turnMessageId("again", 5), deliveryCount: 2 },
        { ...message("new-6", "c/app"), msgId: "new-6" },
      ],
      Infinity,
    );
    expect(turns).toEqual(["turned"]);
  });
});
