// Usage per owner and repository (observe/usage.ts): what counts to whom, and the window.
import { describe, expect, it } from "vitest";
import { summarizeUsage, usageWindow } from "../../src/observe/usage.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";

const T0 = Date.parse("2026-12-01T10:00:00Z");
const at = (s: number) => new Date(T0 + s * 1_000).toISOString();
const rec = (id: string, over: Partial<AssignmentRecord>) =>
  ({ id, backend: "pod", state: "completed", createdAt: at(0), receivedAt: at(0), updatedAt: at(0), contentHash: "", ...over }) as AssignmentRecord;

describe("usage", () => {
  it("counts runner seconds from asked to end, queued to running from the job's queued; a runner that ran another's job counts to that job", () => {
    const records = [
      rec("a1", { job: { repository: "Acme/web" }, createdAt: at(0), askedAt: at(1), claimedAt: at(5), completedAt: at(65) }),
      // w's runner (warm, no job) ran b1's job; b1's own runner ran nothing and was ended.
      rec("w", { warm: true, createdAt: at(-100), askedAt: at(-100), claimedAt: at(12), took: "b1", completedAt: at(42) }),
      rec("b1", { job: { repository: "beta/x" }, createdAt: at(10), askedAt: at(10), terminatedAt: at(14), state: "terminated" }),
      // A tombstone is no job; one queued at `until` is outside.
      rec("t", { job: { repository: "acme/web" }, tombstone: true, state: "terminated" }),
      rec("late", { job: { repository: "acme/web" }, createdAt: at(3600), askedAt: at(3600) }),
    ];
    const u = summarizeUsage(records, T0, T0 + 3_600_000, T0 + 7_200_000);
    expect(u.owners.map((o) => [o.owner, o.jobs, o.runnerSeconds, o.queuedToRunning.count, o.queuedToRunning.p50Seconds])).toEqual([
      ["beta", 1, 142 + 4, 1, 2],
      ["acme", 1, 64, 1, 5],
    ]);
    expect(u.owners[1]!.repositories.map((r) => r.repository)).toEqual(["acme/web"]);
  });

  it("a Forgejo warm runner given a job counts that job, and its runner time, to the job's repository; one given none counts to -", () => {
    const records = [
      rec("w1", {
        warm: true,
        createdAt: at(-300),
        askedAt: at(-300),
        claimedAt: at(20),
        completedAt: at(80),
        bound: { job: 7, attempt: 1, handle: "h", repository: "id-2/id-7", at: at(20) },
      }),
      rec("w2", { warm: true, createdAt: at(0), askedAt: at(0), terminatedAt: at(30), state: "terminated" }),
      // The own assignment of job 7, ended when its job moved to w1: not a second job.
      rec("forgejo-7-1", { createdAt: at(10), terminatedAt: at(20), state: "terminated", job: { repository: "id-2/id-7" }, movedTo: "w1" }),
    ];
    const u = summarizeUsage(records, T0, T0 + 3_600_000, T0 + 7_200_000);
    expect(u.owners.map((o) => [o.owner, o.jobs, o.runnerSeconds, o.queuedToRunning.count])).toEqual([
      ["id-2", 1, 380, 0],
      ["-", 0, 30, 0],
    ]);
    expect(u.owners[0]!.repositories.map((r) => r.repository)).toEqual(["id-2/id-7"]);
  });

  it("a live runner counts until now; jobs with no repository count to -", () => {
    const u = summarizeUsage([rec("x", { state: "claimed", askedAt: at(0), claimedAt: at(1), job: { repository: "nope" } })], T0, T0 + 60_000, T0 + 30_000);
    expect(u.owners).toEqual([
      expect.objectContaining({ owner: "-", jobs: 1, runnerSeconds: 30, repositories: [expect.objectContaining({ repository: "-/-" })] }),
    ]);
  });

  it("windows: defaults, RFC 3339 only, since before until, within the records kept", () => {
    const now = T0;
    const kept = 7 * 86_400_000;
    expect(usageWindow({}, now, kept)).toEqual({ since: now - 86_400_000, until: now });
    expect(usageWindow({ since: "2026-12-01T09:00:00+01:00" }, now, kept)).toEqual({ since: T0 - 7_200_000, until: now });
    expect(usageWindow({ since: "2026-12-01" }, now, kept)).toEqual([{ field: "since", message: expect.stringContaining("RFC 3339") }]);
    expect(usageWindow({ since: at(0), until: at(0) }, now, kept)).toEqual([{ field: "since", message: "must be before until" }]);
    expect(usageWindow({ since: new Date(now - kept - 1).toISOString() }, now, kept)).toEqual([
      { field: "since", message: expect.stringContaining("records are kept") },
    ]);
    expect(usageWindow({ since: new Date(now - kept).toISOString() }, now, kept)).toEqual({ since: now - kept, until: now });
  });
});
