// The turn loop (quotas/admit-waiting.ts) over in-memory state: a refusal by the backend itself
// ends the pass, so a slot freed a moment later is not given to whichever repository the pass
// would try next; a refusal by a pool's cap passes over only that repository.
import { describe, expect, it } from "vitest";
import { completeAssignment, encodeAssignment } from "../../src/assignment.ts";
import { admitWaiting } from "../../src/quotas/admit-waiting.ts";
import type { ProcessDeps } from "../../src/reconcile/types.ts";
import type { Backend } from "../../src/names.ts";
import type { WaitHead } from "../../src/state/wait-set.ts";

const TRUST = "dispatch.test";
type Refusal = "backend" | "pool" | undefined;

function world(refusals: Refusal[]) {
  const head = (id: string, repository: string, seq: number): WaitHead => {
    const decoded = completeAssignment({ version: 1, id, backend: "pod", labels: ["ubuntu-latest"], job: { id: seq, runId: seq, attempt: 1, repository } }, TRUST, new Date(0));
    if (!decoded.ok) throw new Error("bad fixture");
    return { id, owner: repository.split("/")[0]!, repository, seq, data: btoa(String.fromCharCode(...encodeAssignment(decoded.assignment))) };
  };
  // a/mono holds two runners, c/app none: c's head is picked first.
  const heads = [head("a-1", "a/mono", 1), head("c-1", "c/app", 2)];
  const records = new Map<string, { id: string; state: string; chosen?: boolean; job: { repository: string } }>([
    ...heads.map((h) => [h.id, { id: h.id, state: "capacity_wait", job: { repository: h.repository } }] as const),
    ["held-1", { id: "held-1", state: "claimed", job: { repository: "a/mono" } }],
    ["held-2", { id: "held-2", state: "claimed", job: { repository: "a/mono" } }],
  ]);
  const tried: string[] = [];
  const turns: string[] = [];
  const deps = {
    backend: "pod" as Backend,
    trustDomain: TRUST,
    pools: new Map(),
    sink: { event: (e: { event: string; assignment?: string }) => void (e.event === "turn_given" && turns.push(e.assignment!)), summary: () => undefined, error: () => undefined },
    records: {
      get: async (id: string) => records.get(id) ?? null,
      update: async (id: string, fn: (r: unknown) => unknown) => {
        const next = fn(records.get(id));
        if (next) records.set(id, next as never);
        return records.get(id) ?? null;
      },
      getMany: async (ids: string[]) => new Map(ids.map((id) => [id, { value: records.get(id) }])),
    },
    admission: {
      holders: async () => ["held-1", "held-2"],
      placeMany: async (candidates: { id: string; places: { backend: Backend }[] }[]) => {
        const c = candidates[0]!;
        tried.push(c.id);
        const refusal = refusals.shift();
        if (refusal) return { admitted: new Map(), reserved: new Set(), fullBackends: new Set(refusal === "backend" ? ["pod"] : []) };
        return { admitted: new Map([[c.id, c.places[0]]]), reserved: new Set(), fullBackends: new Set() };
      },
    },
    waiting: {
      rules: { weight: () => 1, limits: () => ({}) },
      set: {
        heads: async () => heads,
        next: async () => undefined,
        republish: async () => true,
        remove: async () => undefined,
      },
    },
  };
  return { deps: deps as unknown as ProcessDeps, tried, turns };
}

describe("admitWaiting", () => {
  it("stops at a backend's refusal: the slot freed after it is not given to the next repository", async () => {
    // Refused for c/app; the next placeMany (a/mono's, were it asked) would get a freed slot.
    const { deps, tried, turns } = world(["backend"]);
    expect(await admitWaiting(deps)).toBe(0);
    expect(tried).toEqual(["c-1"]);
    expect(turns).toEqual([]);
  });

  it("passes over a repository whose pool is at its cap, and gives the turn to the next one", async () => {
    const { deps, tried, turns } = world(["pool"]);
    expect(await admitWaiting(deps)).toBe(1);
    expect(tried).toEqual(["c-1", "a-1"]);
    expect(turns).toEqual(["a-1"]);
  });

  it("gives turns while there is room: the fewest held first", async () => {
    const { deps, turns } = world([]);
    expect(await admitWaiting(deps)).toBe(2);
    expect(turns).toEqual(["c-1", "a-1"]);
  });
});
