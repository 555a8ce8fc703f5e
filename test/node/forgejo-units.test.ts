// The pure parts of the Forgejo forge: what a poll's list means (planPoll), how a job becomes an
// assignment and whose it is, which versions are supported, and FORGE=forgejo's configuration.
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/app/config.ts";
import type { ForgejoJob } from "../../src/forge/forgejo/client.ts";
import { forgejoAssignment, forgejoMsgId, jobKey, MAX_PER_POLL, planPoll, repositoryOfJob, type KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { versionProblem } from "../../src/forge/forgejo/version.ts";
import { parsePools } from "../../src/pools/config.ts";
import { forgejoTestEnv, TEST_ROUTES } from "../harness/env.ts";
import { createForgejoForge } from "../../src/forge/forgejo/forge.ts";
import type { ForgejoClient } from "../../src/forge/forgejo/client.ts";

const H1 = "3f0c7a2e-5d2b-4a51-9a77-0d1f6b1c2d3e";
const H2 = "9b2f7a8e-0c1d-4e2f-8a3b-4c5d6e7f8a9b";
const job = (over: Partial<ForgejoJob> = {}): ForgejoJob => ({
  id: 41,
  attempt: 1,
  handle: H1,
  name: "build",
  owner_id: 2,
  repo_id: 7,
  runs_on: ["ubuntu-latest"],
  status: "waiting",
  task_id: 0,
  ...over,
});
const known = (over: Partial<KnownJob> = {}): KnownJob => ({ id: "forgejo-41-1", job: 41, attempt: 1, handle: H1, ...over });
const knownMap = (...ks: KnownJob[]) => new Map(ks.map((k) => [jobKey(k.job, k.attempt), k]));

describe("planPoll", () => {
  it("publishes a waiting job with a handle once: not when known, not when running, not without a handle", () => {
    expect(planPoll(new Map(), [job()]).publish).toEqual([job()]);
    expect(planPoll(knownMap(known()), [job()]).publish).toEqual([]);
    expect(planPoll(new Map(), [job({ status: "running", task_id: 9 })]).publish).toEqual([]);
    // Listed but neither waiting nor running (blocked behind a needs:, say): not yet.
    expect(planPoll(new Map(), [job({ status: "blocked" })])).toMatchObject({ publish: [], unbindable: [], gone: [] });
    expect(planPoll(new Map(), [job({ status: "blocked", handle: "" })]).unbindable).toEqual([]);
    expect(planPoll(new Map(), [job({ handle: "" })])).toMatchObject({ publish: [], unbindable: [job({ handle: "" })] });
    // The next attempt of a known job is a new one.
    expect(planPoll(knownMap(known()), [job({ attempt: 2, handle: H2 })]).publish).toEqual([job({ attempt: 2, handle: H2 })]);
  });

  it("leaves a skipped attempt alone when it runs on the operator's own runners: no claim, so no request and no error at each poll", () => {
    for (const skipped of ["no_route", "unbindable", "conflict"] as const) {
      const plan = planPoll(knownMap(known({ skipped })), [job({ status: "running", task_id: 9 })]);
      expect(plan).toMatchObject({ claim: [], unbind: [], boundWaiting: [], gone: [], publish: [] });
    }
    // Near miss: one of ours is claimed.
    expect(planPoll(knownMap(known()), [job({ status: "running", task_id: 9 })]).claim).toEqual([known()]);
  });

  it("bounds the work of one poll: at most MAX_PER_POLL of each kind, oldest first; the rest come at the next poll", () => {
    const many = Array.from({ length: MAX_PER_POLL + 150 }, (_, i) => known({ id: `forgejo-${1000 + i}-1`, job: 1000 + i, handle: `h${i}` }));
    const gone = planPoll(knownMap(...many), []).gone;
    expect(gone).toHaveLength(MAX_PER_POLL);
    expect(gone[0]!.job).toBe(1000);
    const waitingJobs = Array.from({ length: MAX_PER_POLL + 5 }, (_, i) => job({ id: 5000 - i, handle: `w${i}` }));
    const publish = planPoll(new Map(), waitingJobs).publish;
    expect(publish).toHaveLength(MAX_PER_POLL);
    expect(publish[0]!.id).toBe(5000 - MAX_PER_POLL - 4);
  });

  it("publishes oldest first, as they came (Forgejo lists newest first)", () => {
    const listed = [job({ id: 44, handle: "h44" }), job({ id: 42, handle: "h42" }), job({ id: 43, handle: "h43" })];
    expect(planPoll(new Map(), listed).publish.map((j) => j.id)).toEqual([42, 43, 44]);
  });

  it("claims a known job once it runs with a task, once", () => {
    expect(planPoll(knownMap(known()), [job({ status: "running", task_id: 9 })]).claim).toEqual([known()]);
    expect(planPoll(knownMap(known({ claimed: true })), [job({ status: "running", task_id: 9 })]).claim).toEqual([]);
    expect(planPoll(knownMap(known()), [job({ status: "running", task_id: 0 })]).claim).toEqual([]);
  });

  it("a known job no longer listed is gone; a listed one under another handle conflicts and is not gone", () => {
    expect(planPoll(knownMap(known()), []).gone).toEqual([known()]);
    expect(planPoll(knownMap(known()), [job({ id: 42 })]).gone).toEqual([known()]);
    const other = planPoll(knownMap(known()), [job({ handle: H2 })]);
    expect(other).toMatchObject({ conflicting: [job({ handle: H2 })], gone: [], publish: [] });
    // Said once: the same other handle again is not; a third one is.
    expect(planPoll(knownMap(known({ conflictHandle: H2 })), [job({ handle: H2 })])).toMatchObject({ conflicting: [], gone: [], publish: [] });
    expect(planPoll(knownMap(known({ conflictHandle: H2 })), [job({ handle: "h3" })]).conflicting).toEqual([job({ handle: "h3" })]);
  });

  it("takes back a job given to a warm runner that has not taken it within the claim timeout, not one second earlier", () => {
    const bound = known({ id: "warm-small-0-x", boundAt: 1_000 });
    expect(planPoll(knownMap(bound), [job()], 1_000 + 240_000, 240_000).unbind).toEqual([]);
    expect(planPoll(knownMap(bound), [job()], 1_000 + 240_001, 240_000).unbind).toEqual([bound]);
    expect(planPoll(knownMap({ ...bound, claimed: true }), [job()], 1_000 + 240_001, 240_000).unbind).toEqual([]);
    expect(planPoll(knownMap(bound), [job({ status: "running", task_id: 3 })], 1_000 + 240_001, 240_000)).toMatchObject({ unbind: [], claim: [bound] });
  });

  it("lists a published job still waiting for its own runner as one an idle warm runner may take: not one given a warm runner, being moved, claimed, running or blocked", () => {
    const w = { known: known(), job: job() };
    expect(planPoll(knownMap(known()), [job()]).waiting).toEqual([w]);
    expect(planPoll(knownMap(known({ id: "warm-small-0-x", boundAt: 1 })), [job()]).waiting).toEqual([]);
    expect(planPoll(knownMap(known({ moving: { to: "warm-small-0-x", at: 1 } })), [job()]).waiting).toEqual([]);
    expect(planPoll(knownMap(known({ claimed: true })), [job()]).waiting).toEqual([]);
    expect(planPoll(knownMap(known({ skipped: "no_route" })), [job()]).waiting).toEqual([]);
    expect(planPoll(knownMap(known()), [job({ status: "running", task_id: 9 })]).waiting).toEqual([]);
    expect(planPoll(knownMap(known()), [job({ status: "blocked" })]).waiting).toEqual([]);
    // Oldest first.
    const two = planPoll(knownMap(known({ id: "forgejo-45-1", job: 45, handle: "h45" }), known()), [job({ id: 45, handle: "h45" }), job()]);
    expect(two.waiting.map((x) => x.job.id)).toEqual([41, 45]);
  });
});

describe("a Forgejo job as an assignment", () => {
  const pools = parsePools(undefined, JSON.stringify(TEST_ROUTES), [])!;

  it("is named by job and attempt, deduplicated by job, attempt and handle, routed by runs_on", () => {
    const a = forgejoAssignment(pools, { kind: "repo", owner: "acme", repo: "widgets" }, job({ attempt: 3 }))!;
    expect(a).toMatchObject({
      id: "forgejo-41-3",
      backend: "pod",
      pools: [pools[0]!.name],
      job: { id: 41, runId: 0, attempt: 3, repository: "acme/widgets", handle: H1 },
    });
    expect(forgejoMsgId(job({ attempt: 3 }))).toBe(`forgejo-41-3.${H1}`);
    expect(forgejoMsgId(job({ attempt: 3, handle: H2 }))).not.toBe(forgejoMsgId(job({ attempt: 3 })));
    expect(forgejoAssignment(pools, { kind: "admin" }, job({ runs_on: ["windows"] }))).toBeUndefined();
    expect(forgejoAssignment(pools, { kind: "admin" }, job({ runs_on: [] }))).toBeUndefined();
  });

  it("keeps the run id Forgejo 16 lists (run_id, #12480); 15 lists none, and 0 says so", () => {
    expect(forgejoAssignment(pools, { kind: "admin" }, job({ run_id: 311 }))!.job).toMatchObject({ runId: 311 });
    expect(forgejoAssignment(pools, { kind: "admin" }, job())!.job).toMatchObject({ runId: 0 });
  });

  it("belongs to the names the scope gives, else to ids, in characters a NATS key keeps", () => {
    expect(repositoryOfJob({ kind: "repo", owner: "Acme", repo: "widgets" }, job())).toBe("Acme/widgets");
    expect(repositoryOfJob({ kind: "org", org: "acme" }, job())).toBe("acme/id-7");
    expect(repositoryOfJob({ kind: "admin" }, job())).toBe("id-2/id-7");
    expect(repositoryOfJob({ kind: "user" }, job({ owner_id: 5, repo_id: 9 }))).toBe("id-5/id-9");
    for (const r of ["acme/id-7", "id-2/id-7"]) expect(r).toMatch(/^[-\w/=.]+$/);
  });
});

describe("a Forgejo job past its claim timeout (claimHeld)", () => {
  const cfg = loadConfig(forgejoTestEnv("ws://x:1", "http://b", "https://forgejo.example.com")).forgejo!;
  const held = (status: string | undefined, listed: ForgejoJob[] | "unasked") => {
    const asked: string[] = [];
    const client = {
      getRunner: async () => (asked.push("runner"), status === "gone" ? null : { id: 5, ...(status ? { status } : {}) }),
      jobs: async () => (asked.push("jobs"), listed === "unasked" ? [] : listed),
    } as unknown as ForgejoClient;
    const forge = createForgejoForge(cfg, client, Date.now);
    return forge.claimHeld!({ id: 41, handle: H1 }, { id: 5 }).then((reason) => ({ reason, asked }));
  };
  it("keeps the runner while Forgejo lists its job waiting under its handle and the runner polls", async () => {
    expect(await held("idle", [job()])).toEqual({ reason: expect.stringContaining("job 41 waiting"), asked: ["runner", "jobs"] });
    expect((await held("active", [job()])).reason).toBeDefined();
  });
  it.each([
    ["an offline runner", "offline", "unasked"],
    ["a runner Forgejo no longer has", "gone", "unasked"],
    ["a runner without a status", undefined, "unasked"],
  ] as const)("near miss, %s: not held, and the jobs are not asked for", async (_, status, listed) => {
    expect(await held(status, listed)).toEqual({ reason: undefined, asked: ["runner"] });
  });
  it.each([
    ["taken (a task)", [job({ task_id: 9, status: "running" })]],
    ["given a task while still said waiting", [job({ task_id: 9 })]],
    ["under another handle (a rerun)", [job({ handle: H2 })]],
    ["not listed (ended)", []],
    ["another job waiting", [job({ id: 42 })]],
  ])("near miss, its job %s: not held", async (_, listed) => {
    expect((await held("idle", listed)).reason).toBeUndefined();
  });
});

describe("Forgejo versions", () => {
  it.each([
    ["15.0.3+gitea-1.22.0", false],
    ["15.0.0", false],
    ["16.1.0", false],
    ["v15.0.1", false],
    ["14.0.9+gitea-1.22.0", true],
    ["1.25.0", true],
    ["development", true],
  ])("%s is unsupported: %s", (version, unsupported) => {
    expect(versionProblem(version) !== undefined).toBe(unsupported);
  });
  it("says the fix, and names Gitea when it looks like Gitea", () => {
    expect(versionProblem("14.0.2")).toContain("Forgejo 15 or newer");
    expect(versionProblem("1.25.0")).toContain("FORGE=gitea");
    expect(versionProblem("14.0.2")).not.toContain("FORGE=gitea");
  });
});

describe("FORGE=forgejo configuration", () => {
  const base = () => forgejoTestEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", "https://forgejo.example.org");
  const problems = (env: Record<string, unknown>) => {
    try {
      loadConfig(env);
      return [];
    } catch (err) {
      return (err as { problems: string[] }).problems;
    }
  };

  it("reads GITEA_URL, GITEA_API_TOKEN, GITEA_SCOPE (user too) and FORGEJO_POLL_MS; Gitea's integration stays off", () => {
    const c = loadConfig({ ...base(), GITEA_SCOPE: "user", FORGEJO_POLL_MS: "2500" });
    expect(c.forge).toBe("forgejo");
    expect(c.gitea).toBeUndefined();
    expect(c.forgejo).toMatchObject({ scope: { kind: "user" }, pollMs: 2500, apiToken: "forgejo-api-token-0000" });
    expect(loadConfig({ ...base(), GITEA_SCOPE: "repo:acme/widgets" }).forgejo?.scope).toEqual({ kind: "repo", owner: "acme", repo: "widgets" });
    expect(loadConfig(base()).forgejo?.pollMs).toBe(60_000); // the test environment's own period
    const { FORGEJO_POLL_MS: _p, ...defaults } = base();
    expect(loadConfig(defaults).forgejo?.pollMs).toBe(3000);
  });

  it("names every problem at once, each with its variable", () => {
    const { GITEA_API_TOKEN: _t, ...env } = base();
    const said = problems({ ...env, GITEA_RUNNER_REGISTRATION_TOKEN: "reg", RUNNER_SCOPE: "repository" });
    expect(said).toEqual(
      expect.arrayContaining([
        expect.stringContaining("GITEA_API_TOKEN is required with FORGE=forgejo"),
        expect.stringContaining("GITEA_RUNNER_REGISTRATION_TOKEN does not apply with FORGE=forgejo"),
        expect.stringContaining("RUNNER_SCOPE does not apply with FORGE=forgejo"),
      ]),
    );
    expect(said).toHaveLength(3);
    expect(problems({ ...base(), FORGEJO_POLL_MS: "999" })).toEqual([expect.stringContaining("FORGEJO_POLL_MS must be at least 1000")]);
    expect(problems({ ...base(), FORGEJO_POLL_MS: "60001" })).toEqual([expect.stringContaining("FORGEJO_POLL_MS must be at most 60000")]);
    expect(problems({ ...base(), FORGE: "gitlab" })).toEqual([expect.stringContaining("FORGE must be one of gitea, forgejo")]);
    expect(said.join(" ")).not.toContain("forgejo-api-token");
  });

  it("refuses a pool scope and GITEA_SCOPE=user with Gitea; asks for RUNNER_IMAGE with the kubernetes driver", () => {
    const pools = JSON.stringify([{ name: "small", backend: "pod", labels: ["ubuntu-latest"], scope: "org:acme" }]);
    expect(problems({ ...base(), RUNS_ON_ROUTES: "", RUNNER_POOLS: pools })).toEqual([
      expect.stringContaining('pool "small" has a scope, which does not apply with FORGE=forgejo'),
    ]);
    const { FORGE: _f, GITEA_API_TOKEN: _t, ...gitea } = base();
    expect(problems({ ...gitea, GITEA_RUNNER_REGISTRATION_TOKEN: "reg", GITEA_SCOPE: "user" })).toEqual([
      expect.stringContaining("GITEA_SCOPE=user is Forgejo's"),
    ]);
    expect(problems({ ...base(), POD_DRIVER: "kubernetes", K8S_API_URL: "https://k8s.example.org", K8S_TOKEN: "t" })).toEqual([
      expect.stringContaining("RUNNER_IMAGE is required with FORGE=forgejo"),
    ]);
  });
});
