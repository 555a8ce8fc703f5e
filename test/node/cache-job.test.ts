// Whose cache a holder uses (app/cache-site.ts jobOf), from records in memory: the job its runner
// runs, which for Gitea is the one the claim names (a runner may take another job than its own,
// of another repository), its branch and default branch as the webhook told them; by near misses:
// another incarnation, an end past its grace, a Gitea runner not claimed yet, a warm one unbound.
import { describe, expect, it } from "vitest";
import { END_GRACE_MS, jobOf } from "../../src/app/cache-site.ts";
import { CacheRefusal } from "../../src/cache/service.ts";
import type { AssignmentRecord } from "../../src/state/record.ts";
import { incarnationOf } from "../../src/state/records.ts";
import { factsOf, workflowJobPayload } from "../../src/forge/gitea/webhook.ts";

const at = "2026-12-07T10:00:00.000Z";
const now = Date.parse("2026-12-07T10:30:00.000Z");
const record = (id: string, over: Partial<AssignmentRecord> = {}): AssignmentRecord =>
  ({ id, backend: "pod", contentHash: "h", createdAt: at, receivedAt: at, updatedAt: at, state: "claimed", claimedAt: at, ...over }) as AssignmentRecord;
const reader = (...records: AssignmentRecord[]) => {
  const byId = new Map(records.map((r) => [r.id, r]));
  return async (id: string) => byId.get(id) ?? null;
};
const holderOf = (r: AssignmentRecord) => ({ assignment: r.id, incarnation: incarnationOf(r) });
const refused = async (p: Promise<unknown>) => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CacheRefusal);
  return (err as CacheRefusal).status;
};

describe("jobOf", () => {
  const own = record("gitea-1-1", { job: { repository: "org/app", run: 4, branch: "feat", defaultBranch: "main" } });

  it("a claimed Gitea job: its repository, its branch then the default one", async () => {
    expect(await jobOf(reader(own), holderOf(own), now)).toEqual({
      repo: "org/app",
      scopes: { read: ["branch:feat", "branch:main"], write: "branch:feat" },
      holder: "gitea-1-1",
    });
  });

  it("a runner that took another job (of another repository) is that job's: its repository and branch, not its own", async () => {
    const taken = record("gitea-2-1", {
      state: "received",
      claimedAt: undefined,
      job: { repository: "org/other", run: 9, branch: "", defaultBranch: "trunk" },
    } as never);
    const swapped = record("gitea-1-1", { job: own.job!, took: "gitea-2-1" });
    expect(await jobOf(reader(swapped, taken), holderOf(swapped), now)).toMatchObject({
      repo: "org/other",
      scopes: { read: ["run:9", "branch:trunk"], write: "run:9" },
    });
  });

  it("near misses: another incarnation, an end past the grace (not within it), not claimed yet, a warm runner with no job", async () => {
    expect(await refused(jobOf(reader(own), { ...holderOf(own), incarnation: "x" }, now))).toBe(403);
    const ended = record("gitea-1-1", { state: "completed", completedAt: new Date(now - END_GRACE_MS - 1).toISOString(), job: own.job! } as never);
    expect(await refused(jobOf(reader(ended), holderOf(ended), now))).toBe(403);
    const lately = record("gitea-1-1", { state: "completed", completedAt: new Date(now - END_GRACE_MS).toISOString(), job: own.job! } as never);
    expect((await jobOf(reader(lately), holderOf(lately), now)).repo).toBe("org/app");
    const unclaimed = record("gitea-1-1", { state: "backend_ready", claimedAt: undefined, job: own.job! } as never);
    expect(await refused(jobOf(reader(unclaimed), holderOf(unclaimed), now))).toBe(503);
    expect(await refused(jobOf(reader(), holderOf(own), now))).toBe(403);
  });

  it("Forgejo: its bound job's repository, its scopes from the isolation key it signed; no claim needed", async () => {
    const warm = record("forgejo-w-1", {
      state: "backend_ready",
      claimedAt: undefined,
      warm: true,
      bound: { job: 5, attempt: 1, handle: "h", repository: "org/app", at },
    } as never);
    expect(await jobOf(reader(warm), holderOf(warm), now, "refs/pull/3/head")).toMatchObject({
      repo: "org/app",
      scopes: { read: ["isolated:refs/pull/3/head", "shared"], write: "isolated:refs/pull/3/head" },
    });
    const unbound = record("forgejo-w-2", { state: "backend_ready", claimedAt: undefined, warm: true } as never);
    expect(await refused(jobOf(reader(unbound), holderOf(unbound), now, ""))).toBe(503);
  });
});

describe("factsOf", () => {
  const payload = (job: Record<string, unknown>, repo: Record<string, unknown>) =>
    workflowJobPayload.parse({ action: "queued", workflow_job: { id: 1, run_id: 2, ...job }, repository: { full_name: "org/app", ...repo } });
  it("keeps the webhook's head_branch (\"\" for a pull request's run) and the repository's default branch", () => {
    expect(factsOf(payload({ head_branch: "feat" }, { default_branch: "main" }))).toEqual({ branch: "feat", defaultBranch: "main" });
    expect(factsOf(payload({ head_branch: "" }, { default_branch: "main" }))).toEqual({ branch: "", defaultBranch: "main" });
    expect(factsOf(payload({}, {}))).toEqual({});
  });
});
