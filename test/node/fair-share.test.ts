// Who gets the next free slot (quotas/fair-share.ts), row by row: weighted max-min between owners,
// then the repository holding fewest, then first in first out; limits pass a job over without
// holding back anyone else. And QUOTAS as configuration, near misses included.
import { describe, expect, it } from "vitest";
import { pickNext, taken, turnOrder, type Shares, type ShareRules, type Waiting } from "../../src/quotas/fair-share.ts";
import { limitsOf, parseQuotas, weightOf, type Quotas } from "../../src/quotas/config.ts";

const w = (id: string, repository: string, seq: number): Waiting => ({ id, owner: repository.split("/")[0]!, repository, seq });
const shares = (heads: Waiting[], owners: Record<string, number> = {}, repos: Record<string, number> = {}): Shares => ({
  heads,
  heldByOwner: new Map(Object.entries(owners)),
  heldByRepository: new Map(Object.entries(repos)),
});
const rules = (q: Quotas = parseQuotas(undefined, [])!): ShareRules => ({ weight: (o) => weightOf(q, o), limits: (r) => limitsOf(q, r) });
const quotas = (v: unknown) => {
  const problems: string[] = [];
  const q = parseQuotas(JSON.stringify(v), problems);
  return { q, problems };
};

describe("the next free slot", () => {
  it("goes to the owner holding fewest runners, the longest waiting first among equals; a one-job fix jumps a 200-job backlog", () => {
    const heads = [w("a1", "a/mono", 11), w("b1", "b/fix", 201), w("c1", "c/app", 202)];
    let s = shares(heads, { a: 10 }, { "a/mono": 10 });
    expect(pickNext(s, rules())?.id).toBe("b1");
    s = taken({ ...s, heads: heads.filter((h) => h.id !== "b1") }, w("b1", "b/fix", 201));
    expect(pickNext(s, rules())?.id).toBe("c1");
    // Equal shares: the job that came first.
    expect(pickNext(shares([w("c1", "c/app", 202), w("a1", "a/mono", 11)], { a: 1, c: 1 }), rules())?.id).toBe("a1");
    expect(pickNext(shares([w("c1", "c/app", 202), w("a1", "a/mono", 11)], { a: 2, c: 1 }), rules())?.id).toBe("c1");
  });

  it("weighs owners: held runners over weight, so an owner of weight 2 gets twice the share", () => {
    const { q } = quotas({ owners: { a: { weight: 2 } } });
    const heads = [w("a1", "a/x", 1), w("b1", "b/y", 2)];
    expect(pickNext(shares(heads, { a: 3, b: 2 }), rules(q))?.id).toBe("a1"); // 1.5 < 2
    expect(pickNext(shares(heads, { a: 4, b: 2 }), rules(q))?.id).toBe("a1"); // 2 = 2: a waited longer
    expect(pickNext(shares(heads, { a: 5, b: 2 }), rules(q))?.id).toBe("b1"); // 2.5 > 2
    expect(pickNext(shares(heads, { a: 5, b: 2 }), rules())?.id).toBe("b1");
  });

  it("within an owner: the repository holding fewest, then first in first out", () => {
    const heads = [w("m1", "a/mono", 1), w("x1", "a/x", 5)];
    expect(pickNext(shares(heads, { a: 3 }, { "a/mono": 3 }), rules())?.id).toBe("x1");
    expect(pickNext(shares(heads, { a: 3 }, { "a/mono": 1, "a/x": 2 }), rules())?.id).toBe("m1");
    expect(pickNext(shares(heads, { a: 2 }, { "a/mono": 1, "a/x": 1 }), rules())?.id).toBe("m1");
  });

  it("passes over an owner or a repository at its limit, and only that one; one below its limit is not passed over", () => {
    const { q } = quotas({ default: { owner: 3 }, repositories: { "b/big": { limit: 1 } } });
    const heads = [w("a1", "a/x", 1), w("b1", "b/big", 2), w("b2", "b/small", 3)];
    expect(pickNext(shares(heads, { a: 3 }), rules(q))?.id).toBe("b1");
    expect(pickNext(shares(heads, { a: 2, b: 2 }), rules(q))?.id).toBe("a1");
    expect(pickNext(shares(heads, { a: 3, b: 1 }, { "b/big": 1 }), rules(q))?.id).toBe("b2");
    expect(pickNext(shares(heads, { a: 3, b: 3 }, { "b/big": 1 }), rules(q))).toBeUndefined();
    const { q: zero } = quotas({ default: { repository: 0 } });
    expect(pickNext(shares(heads), rules(zero))).toBeUndefined();
  });
});

describe("the order of a batch's jobs (turnOrder)", () => {
  const ids = (ws: Waiting[]) => ws.map((x) => x.id);
  it("interleaves owners by what each holds, counting each turn before the next; first in first out within a repository", () => {
    const jobs = [w("a2", "a/mono", 1), w("a3", "a/mono", 2), w("a4", "a/mono", 3), w("b1", "b/fix", 4), w("b2", "b/fix", 5)];
    expect(ids(turnOrder(shares([], { a: 1 }, { "a/mono": 1 }), rules(), jobs))).toEqual(["b1", "a2", "b2", "a3", "a4"]);
    // Nothing held: ties go to the oldest, then alternate.
    expect(ids(turnOrder(shares([]), rules(), jobs))).toEqual(["a2", "b1", "a3", "b2", "a4"]);
  });

  it("puts jobs at a QUOTAS limit last, oldest first; one owner's jobs keep their order", () => {
    const { q } = quotas({ repositories: { "a/mono": { limit: 1 } } });
    const jobs = [w("a2", "a/mono", 1), w("a3", "a/mono", 2), w("b1", "b/fix", 3)];
    expect(ids(turnOrder(shares([], {}, {}), rules(q), jobs))).toEqual(["a2", "b1", "a3"]);
    expect(ids(turnOrder(shares([], { a: 1 }, { "a/mono": 1 }), rules(q), jobs))).toEqual(["b1", "a2", "a3"]);
    expect(ids(turnOrder(shares([]), rules(), [w("x3", "a/x", 9), w("x1", "a/x", 2), w("x2", "a/x", 5)]))).toEqual(["x1", "x2", "x3"]);
  });
});

describe("QUOTAS", () => {
  it("unset: no limits, every weight 1", () => {
    const q = parseQuotas(undefined, [])!;
    expect(limitsOf(q, "a/b")).toEqual({});
    expect(weightOf(q, "a")).toBe(1);
  });

  it("overrides by owner and repository, case-insensitively; defaults for the rest", () => {
    const { q, problems } = quotas({
      default: { owner: 20, repository: 5 },
      owners: { Acme: { limit: 50, weight: 2 } },
      repositories: { "acme/Mono": { limit: 8 } },
    });
    expect(problems).toEqual([]);
    expect(limitsOf(q!, "ACME/mono")).toEqual({ owner: 50, repository: 8 });
    expect(limitsOf(q!, "acme/app")).toEqual({ owner: 50, repository: 5 });
    expect(limitsOf(q!, "bob/x")).toEqual({ owner: 20, repository: 5 });
    expect(weightOf(q!, "ACME")).toBe(2);
  });

  it("an owner named like an Object member is an owner like any other", () => {
    const { q } = quotas({ default: { owner: 4 }, owners: { toString: { limit: 1 } } });
    expect(limitsOf(q!, "constructor/app")).toEqual({ owner: 4 });
    expect(weightOf(q!, "constructor")).toBe(1);
    expect(weightOf(q!, "__proto__")).toBe(1);
    expect(limitsOf(q!, "tostring/app")).toEqual({ owner: 1 });
  });

  it("names each bad field: a weight of 0 or below, a negative limit, names that differ only in case, unknown fields", () => {
    expect(quotas({ owners: { a: { weight: 0 } } }).problems).toEqual(['QUOTAS["owners"]["a"]["weight"] must be above 0']);
    expect(quotas({ owners: { a: { weight: -1 } } }).problems).toEqual(['QUOTAS["owners"]["a"]["weight"] must be above 0']);
    expect(quotas({ owners: { a: { weight: 0.001 } } }).problems).toEqual([]);
    expect(quotas({ default: { owner: -1 } }).problems).toHaveLength(1);
    expect(quotas({ default: { owner: -1 } }).problems[0]).toMatch(/^QUOTAS\["default"\]\["owner"\] /);
    expect(quotas({ owners: { Acme: { limit: 1 }, acme: { limit: 2 } } }).problems).toEqual([
      'QUOTAS.owners: "Acme" and "acme" are the same (Gitea names are case-insensitive)',
    ]);
    expect(quotas({ repositories: { "acme/app": {}, "ACME/App": {} } }).problems).toHaveLength(1);
    expect(quotas({ repositories: { acme: { limit: 1 } } }).problems[0]).toMatch(/^QUOTAS\["repositories"\]\["acme"\]/);
    expect(quotas({ owner: { a: {} } }).problems[0]).toMatch(/^QUOTAS/);
  });
});
