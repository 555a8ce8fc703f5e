// The turn loop (quotas/admit-waiting.ts) over in-memory state: a refusal by the backend itself
// ends the pass, so a slot freed a moment later is not given to whichever repository the pass
// would try next; a refusal by a pool's cap passes over only that repository.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/model/assignment.ts";
import { admitWaiting } from "../../src/reconcile/admit-waiting.ts";
import type { ProcessDeps } from "../../src/reconcile/types.ts";
import type { Backend } from "../../src/nats/names.ts";
import type { WaitHead } from "../../src/state/wait-set.ts";
import type { QuotaLedger } from "../../src/state/quota-ledger.ts";
import { memoryLedger } from "../harness/memory.ts";
import { waitingCapacity } from "../../src/app/dispatcher.ts";
import type { Pool } from "../../src/pools/config.ts";

const TRUST = "dispatch.test";
type Refusal = "backend" | "pool" | undefined;

const head = (id: string, repository: string, seq: number): WaitHead => {
  const decoded = completeAssignment(
    { version: 1, id, backend: "pod", labels: ["ubuntu-latest"], job: { id: seq, runId: seq, attempt: 1, repository } },
    TRUST,
    new Date(0),
  );
  if (!decoded.ok) throw new Error("bad fixture");
  return { id, owner: repository.split("/")[0]!, repository, seq, data: btoa(String.fromCharCode(...encodeAssignment(decoded.assignment))) };
};

interface WorldOptions {
  /** Waiting jobs per repository, oldest first; the first of each is a head. */
  queues?: WaitHead[][];
  /** Runners held now, all of a/mono. */
  held?: number;
  ledger?: QuotaLedger;
  limits?: (repository: string) => { owner?: number; repository?: number };
  /** Jobs whose records ended (cancelled) while they waited. */
  ended?: string[];
  /** The backend's capacity, given where no pool runs elsewhere. */
  capacity?: number;
  /** Holders whose records this isolate keeps (RecordStore.kept). */
  keptHolders?: string[];
  /** Jobs that hold their slot already (a turn re-given after a pass died): among the holders. */
  holding?: string[];
}

function world(refusals: Refusal[], opts: WorldOptions = {}) {
  // a/mono holds two runners, c/app none: c's head is picked first.
  const queues = (opts.queues ?? [[head("a-1", "a/mono", 1)], [head("c-1", "c/app", 2)]]).map((q) => [...q]);
  const heads = queues.map((q) => q[0]!);
  const holders = [...Array.from({ length: opts.held ?? 2 }, (_, i) => `held-${i + 1}`), ...(opts.holding ?? [])];
  const records = new Map<string, { id: string; state: string; chosen?: boolean; job: { repository: string } }>([
    ...queues.flat().map((h) => [h.id, { id: h.id, state: "capacity_wait", job: { repository: h.repository } }] as const),
    ...holders.filter((id) => !opts.holding?.includes(id)).map((id) => [id, { id, state: "claimed", job: { repository: "a/mono" } }] as const),
  ]);
  for (const id of opts.ended ?? []) records.set(id, { ...records.get(id)!, state: "terminated" });
  const tried: string[] = [];
  const turns: string[] = [];
  let headsRead = 0;
  let oldestRead = 0;
  let holdersRead = 0;
  let nextRead = 0;
  let repositoriesRead = 0;
  const recordsRead: string[] = [];
  const manyRead: string[] = [];
  const handedOn: boolean[] = [];
  const removed: string[] = [];
  const republished: string[] = [];
  const deps = {
    backend: "pod" as Backend,
    trustDomain: TRUST,
    pools: new Map(),
    sink: {
      event: (e: { event: string; assignment?: string }) => void (e.event === "turn_given" && turns.push(e.assignment!)),
      summary: () => undefined,
      error: () => undefined,
    },
    records: {
      get: async (id: string) => (recordsRead.push(id), records.get(id) ?? null),
      update: async (id: string, fn: (r: unknown) => unknown) => {
        const next = fn(records.get(id));
        if (next) records.set(id, next as never);
        return records.get(id) ?? null;
      },
      getMany: async (ids: string[]) => (manyRead.push(...ids), new Map(ids.map((id) => [id, { value: records.get(id) }]))),
      // The isolate keeps the holders it saw (`keptHolders`): whose job each is never changes.
      kept: (ids: string[]) => new Map(ids.filter((id) => opts.keptHolders?.includes(id)).map((id) => [id, records.get(id)])),
      republished: (id: string) => void republished.push(id),
    },
    admission: {
      holders: async () => (holdersRead++, holders),
      placeMany: async (candidates: { id: string; places: { backend: Backend }[] }[], _reserve: unknown, o?: { handOn?: boolean }) => {
        const c = candidates[0]!;
        handedOn.push(o?.handOn === true);
        tried.push(c.id);
        const refusal = refusals.shift();
        if (refusal) return { admitted: new Map(), reserved: new Set(), fullBackends: new Set(refusal === "backend" ? ["pod"] : []) };
        return { admitted: new Map([[c.id, c.places[0]]]), reserved: new Set(), fullBackends: new Set() };
      },
    },
    waiting: {
      rules: { weight: () => 1, limits: opts.limits ?? (() => ({})) },
      ...(opts.ledger ? { ledger: opts.ledger } : {}),
      ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}),
      set: {
        repositories: async () => (repositoriesRead++, heads.map((h) => h.repository)),
        headsOf: async () => (headsRead++, heads),
        // The look reads the oldest jobs: here every one waiting, so that each next is found in it.
        oldest: async (_backend: Backend, limit: number) => (
          oldestRead++,
          queues
            .flat()
            .sort((a, b) => a.seq - b.seq)
            .slice(0, limit)
        ),
        next: async (_backend: Backend, repository: string, afterSeq: number) => (
          nextRead++,
          queues.find((q) => q[0]!.repository === repository)!.find((h) => h.seq > afterSeq)
        ),
        republish: async () => true,
        remove: async (seq: number) => void removed.push(heads.concat(queues.flat()).find((h) => h.seq === seq)!.id),
      },
    },
  };
  return {
    deps: deps as unknown as ProcessDeps,
    tried,
    turns,
    removed,
    republished,
    records,
    recordsRead,
    manyRead,
    handedOn,
    headsRead: () => headsRead,
    oldestRead: () => oldestRead,
    holdersRead: () => holdersRead,
    nextRead: () => nextRead,
    repositoriesRead: () => repositoriesRead,
  };
}

describe("admitWaiting", () => {
  it("gives no turn while every slot of its backend is held, without reading the heads; near misses: one slot free, a capacity not given", async () => {
    const full = world([], { held: 2, capacity: 2 });
    expect(await admitWaiting(full.deps)).toBe(0);
    expect([full.tried, full.headsRead()]).toEqual([[], 0]);
    const room = world([], { held: 2, capacity: 3 });
    expect(await admitWaiting(room.deps)).toBeGreaterThan(0);
    expect(room.tried[0]).toBe("c-1");
    // Without a capacity (a pool may spill to another backend) the turn is tried all the same.
    // Nobody waits: the holders are not read either (one request per pass, as without fair share's turns).
    const nobody = world([], { queues: [], capacity: 2 });
    expect(await admitWaiting(nobody.deps)).toBe(0);
    expect(nobody.holdersRead()).toBe(0);
    const spills = world(["backend"], { held: 2 });
    expect(await admitWaiting(spills.deps)).toBe(0);
    expect(spills.tried).toEqual(["c-1"]);
  });

  it("after its pass put a job in the wait set, reads the holders first: every slot held, it reads nothing more; near misses: a slot free, a pass that put none in", async () => {
    const joinedFull = world([], { held: 2, capacity: 2 });
    expect(await admitWaiting(joinedFull.deps, { joined: true })).toBe(0);
    expect([joinedFull.holdersRead(), joinedFull.oldestRead()]).toEqual([1, 0]);
    const joinedRoom = world([], { held: 2, capacity: 3 });
    expect(await admitWaiting(joinedRoom.deps, { joined: true })).toBe(1);
    expect([joinedRoom.holdersRead(), joinedRoom.oldestRead()]).toEqual([1, 1]);
    const full = world([], { held: 2, capacity: 2 });
    expect(await admitWaiting(full.deps)).toBe(0);
    expect([full.holdersRead(), full.oldestRead()]).toEqual([1, 1]);
  });

  it("stops at a backend's refusal: the slot freed after it is not given to the next repository", async () => {
    // Refused for c/app; the next placeMany (a/mono's, were it asked) would get a freed slot.
    const { deps, tried, turns } = world(["backend"]);
    expect(await admitWaiting(deps)).toBe(0);
    expect(tried).toEqual(["c-1"]);
    expect(turns).toEqual([]);
  });

  it("passes over a repository whose pool is at its cap, and gives the turn to the next one", async () => {
    const { deps, tried, turns, republished } = world(["pool"]);
    expect(await admitWaiting(deps)).toBe(1);
    // The turn given hands its chosen record on to its message's delivery; the one refused does not.
    expect(republished).toEqual(turns);
    expect(tried).toEqual(["c-1", "a-1"]);
    expect(turns).toEqual(["a-1"]);
  });

  it("gives up after exactly 3 turns in a row refused by their pools' caps, while the backend has room: the 4th repository is not tried; near miss: a turn given between refusals starts the count again", async () => {
    const queues = ["b/x", "c/x", "d/x", "e/x", "f/x", "g/x"].map((r, i) => [head(`${r[0]}-1`, r, i + 1)]);
    const capped = world(["pool", "pool", "pool", undefined], { queues, held: 0 });
    expect(await admitWaiting(capped.deps)).toBe(0);
    expect(capped.tried).toEqual(["b-1", "c-1", "d-1"]);
    const between = world(["pool", "pool", undefined, "pool", "pool", undefined], { queues, held: 0 });
    expect(await admitWaiting(between.deps)).toBe(2);
    expect(between.tried).toEqual(["b-1", "c-1", "d-1", "e-1", "f-1", "g-1"]);
  });

  it("stops once the turns fill the slots its holders' read left, reading no next head; near misses: a slot left, a turn whose job held its slot already", async () => {
    const queues = [
      [head("a-1", "a/mono", 1), head("a-2", "a/mono", 3)],
      [head("c-1", "c/app", 2), head("c-2", "c/app", 4)],
    ];
    const filled = world([], { queues, held: 2, capacity: 3 });
    expect(await admitWaiting(filled.deps)).toBe(1);
    expect([filled.tried, filled.nextRead()]).toEqual([["c-1"], 0]);
    const room = world([], { queues, held: 2, capacity: 4 });
    expect(await admitWaiting(room.deps)).toBe(2);
    expect(room.tried).toEqual(["c-1", "c-2"]);
    // Every head, and c-2 (c-1's next), came from the glance at the oldest jobs: no request of their own.
    expect([room.oldestRead(), room.repositoriesRead(), room.headsRead(), room.nextRead()]).toEqual([1, 0, 0, 0]);
    // c-1 holds its slot already (its first turn's pass died before taking it out): it fills none.
    const again = world([], { queues, held: 2, holding: ["c-1"], capacity: 4 });
    expect(await admitWaiting(again.deps)).toBe(2);
    expect(again.tried).toEqual(["c-1", "a-1"]);
  });

  it("hands the slot of each turn it gives on to the turn's delivery (placeMany's handOn)", async () => {
    const { deps, handedOn } = world(["pool"]);
    await admitWaiting(deps);
    expect(handedOn).toEqual([true, true]);
  });

  it("gives turns while there is room: the fewest held first", async () => {
    const { deps, turns } = world([]);
    expect(await admitWaiting(deps)).toBe(2);
    expect(turns).toEqual(["c-1", "a-1"]);
  });
});

describe("admitWaiting, jobs that went away", () => {
  it("takes a job cancelled while it waited out of the wait set, asks no slot for it, and gives the turn to the next", async () => {
    const { deps, tried, turns, removed } = world([], { ended: ["c-1"] });
    expect(await admitWaiting(deps)).toBe(1);
    expect(removed).toContain("c-1");
    expect(tried).toEqual(["a-1"]);
    expect(turns).toEqual(["a-1"]);
  });

  it("chooses a job once: a job another pass chose already is not chosen again, and one chosen now is marked", async () => {
    const { deps, records, recordsRead } = world([]);
    await admitWaiting(deps);
    expect(records.get("c-1")?.chosen).toBe(true);
    expect(records.get("a-1")?.chosen).toBe(true);
    // The marks were written by compare-and-set: a write that landed needs no read.
    expect(recordsRead).toEqual([]);
  });

  it("takes the record its mark did not change as the store gives it: chosen already, the job gets its turn, reading nothing more", async () => {
    const chosen = world([]);
    chosen.records.set("c-1", { ...chosen.records.get("c-1")!, chosen: true });
    expect(await admitWaiting(chosen.deps)).toBe(2);
    expect(chosen.recordsRead).toEqual([]);
  });

  it("reads only the holders' records this isolate does not keep (whose job a record is never changes)", async () => {
    const some = world([], { held: 3, keptHolders: ["held-1", "held-3"] });
    await admitWaiting(some.deps);
    expect(some.manyRead).toEqual(["held-2"]);
    const all = world([], { held: 2, keptHolders: ["held-1", "held-2"] });
    await admitWaiting(all.deps);
    expect(all.manyRead).toEqual([]);
    // The shares are the same either way: c/app, holding none, gets the first turn.
    expect(all.turns[0]).toBe("c-1");
  });
});

describe("admitWaiting, counting and giving back", () => {
  it("counts each turn it gives against its owner for the next pick", async () => {
    // a/mono holds one, c/app none; three turns fit. By turn: c-1, then a-1 (one each, a waited
    // longer), then c-2. Counting nothing given, c/app would take every turn it has jobs for.
    const queues = [
      [head("a-1", "a/mono", 1), head("a-2", "a/mono", 3)],
      [head("c-1", "c/app", 2), head("c-2", "c/app", 4)],
    ];
    const { deps, turns } = world([undefined, undefined, undefined, "backend"], { queues, held: 1 });
    expect(await admitWaiting(deps)).toBe(3);
    expect(turns).toEqual(["c-1", "a-1", "c-2"]);
  });

  it("gives back the QUOTAS places a turn took when its pool's maxRunners refuses it", async () => {
    const ledger = memoryLedger();
    const { deps, tried } = world(["pool", "pool", "pool"], { ledger, limits: () => ({ owner: 5 }) });
    await admitWaiting(deps);
    expect(tried).toEqual(["c-1", "a-1"]);
    expect([...ledger.places.values()].every((ids) => ids.size === 0)).toBe(true);
    // Near miss: a turn admitted keeps them.
    const kept = memoryLedger();
    await admitWaiting(world([], { ledger: kept, limits: () => ({ owner: 5 }) }).deps);
    expect(await kept.held(["a", "c"])).toEqual(
      new Map([
        ["a", 1],
        ["c", 1],
      ]),
    );
  });
});

describe("the capacity a turn-giving pass may trust (waitingCapacity)", () => {
  const pool = (name: string, backend: Backend) => ({ name, backend }) as unknown as Pool;
  it("is the backend's when every pool runs there, or there are none; none when a pool runs on another backend", () => {
    const capacity = { pod: 4, vm: 2 } as Record<Backend, number>;
    expect(waitingCapacity({ pools: [], capacity }, "pod")).toEqual({ capacity: 4 });
    expect(waitingCapacity({ pools: [pool("a", "pod"), pool("b", "pod")], capacity }, "pod")).toEqual({ capacity: 4 });
    expect(waitingCapacity({ pools: [pool("a", "pod"), pool("b", "vm")], capacity }, "pod")).toEqual({});
  });
});
