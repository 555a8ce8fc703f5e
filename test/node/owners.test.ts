// Who uses the runners, per owner, at a bounded size (observe/owners.ts): the rows /metrics,
// /status and /v1/status show.
import { describe, expect, it } from "vitest";
import { atQuotaLimit, ownerRows } from "../../src/observe/owners.ts";
import { NO_QUOTAS, parseQuotas, type Quotas } from "../../src/quotas/config.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";

const held = (...repos: (string | undefined)[]) =>
  repos.map((repository, i) => ({ id: `j${i}`, state: "claimed", ...(repository ? { job: { repository } } : {}) }) as AssignmentRecord);
const quotas = (json: unknown) => parseQuotas(JSON.stringify(json), [])!;
const rowsOf = (h: AssignmentRecord[], waiting: Map<string, number>, q: Quotas, top: number) => ownerRows(h, waiting, atQuotaLimit(h, q), top);

describe("owners", () => {
  it("the busiest by runners, then by waiting, then by name; the rest summed as other", () => {
    const rows = rowsOf(
      held("a/x", "a/y", "b/x", "c/x", "d/x", undefined),
      new Map([
        ["c/z", 4],
        ["e/x", 1],
      ]),
      NO_QUOTAS,
      3,
    );
    expect(rows).toEqual([
      { owner: "a", runners: 2, waitingForCapacity: 0, waitingForQuota: 0 },
      { owner: "c", runners: 1, waitingForCapacity: 4, waitingForQuota: 0 },
      { owner: "-", runners: 1, waitingForCapacity: 0, waitingForQuota: 0 },
      { owner: "other", runners: 2, waitingForCapacity: 1, waitingForQuota: 0 },
    ]);
    // Exactly N owners: no other row.
    expect(rowsOf(held("a/x", "b/x"), new Map(), NO_QUOTAS, 2).map((r) => r.owner)).toEqual(["a", "b"]);
    expect(rowsOf(held("a/x", "b/x"), new Map(), NO_QUOTAS, 0)).toEqual([{ owner: "other", runners: 2, waitingForCapacity: 0, waitingForQuota: 0 }]);
  });

  it("a Forgejo warm runner given a job counts to the job's owner, and to its QUOTAS limit", () => {
    const given = {
      id: "w",
      state: "claimed",
      warm: true,
      bound: { job: 7, attempt: 1, handle: "h", repository: "Acme/x", at: "2026-12-01T10:00:00Z" },
    } as AssignmentRecord;
    const h = [given, ...held("acme/y")];
    expect(rowsOf(h, new Map([["acme/z", 1]]), quotas({ owners: { acme: { limit: 2 } } }), 10)).toEqual([
      { owner: "acme", runners: 2, waitingForCapacity: 0, waitingForQuota: 1 },
    ]);
  });

  it("a warm runner without a job counts under its pool, not as -; one given a job counts to the job's owner", () => {
    const idle = { id: "w1", state: "backend_ready", warm: true, placement: { pool: "small", backend: "pod" } } as AssignmentRecord;
    const given = {
      ...idle,
      id: "w2",
      state: "claimed",
      bound: { job: 7, attempt: 1, handle: "h", repository: "acme/x", at: "2026-12-01T10:00:00Z" },
    } as AssignmentRecord;
    expect(rowsOf([idle, given, ...held(undefined)], new Map(), NO_QUOTAS, 10).map((r) => [r.owner, r.runners])).toEqual([
      ["-", 1],
      ["acme", 1],
      ["pool small", 1],
    ]);
  });

  it("owners differing only in case are one; one named constructor is an owner like any; one named other is counted in the rest", () => {
    const rows = rowsOf(held("Acme/x", "acme/y", "ACME/x", "constructor/x", "other/x", "other/y"), new Map([["constructor/z", 2]]), NO_QUOTAS, 10);
    expect(rows).toEqual([
      { owner: "acme", runners: 3, waitingForCapacity: 0, waitingForQuota: 0 },
      { owner: "constructor", runners: 1, waitingForCapacity: 2, waitingForQuota: 0 },
      { owner: "other", runners: 2, waitingForCapacity: 0, waitingForQuota: 0 },
    ]);
  });

  it("waiting jobs count as quota_wait while their owner or repository is at its limit, capacity_wait one below", () => {
    const q = quotas({ owners: { acme: { limit: 2 } }, repositories: { "beta/x": { limit: 1 } } });
    const waiting = new Map([
      ["acme/x", 3],
      ["beta/x", 1],
      ["beta/y", 2],
    ]);
    expect(rowsOf(held("acme/x", "acme/y", "beta/x"), waiting, q, 10)).toEqual([
      { owner: "acme", runners: 2, waitingForCapacity: 0, waitingForQuota: 3 },
      { owner: "beta", runners: 1, waitingForCapacity: 2, waitingForQuota: 1 },
    ]);
    // One under each limit: they wait for capacity.
    expect(rowsOf(held("acme/x"), waiting, q, 10)).toEqual([
      { owner: "acme", runners: 1, waitingForCapacity: 3, waitingForQuota: 0 },
      { owner: "beta", runners: 0, waitingForCapacity: 3, waitingForQuota: 0 },
    ]);
  });
});
