import { InvalidInput } from "../../src/model/errors.ts";
import { describe, expect, inject, it, vi } from "vitest";
import { written } from "../harness/memory.ts";
import { ConfigError, loadConfig } from "../../src/app/config.ts";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { createGiteaClient, TOKEN_TTL_MS, type TokenCache } from "../../src/forge/gitea/client.ts";
import { scopePath } from "../../src/forge/gitea/scope.ts";
import { obtainRunnerIdentity } from "../../src/forge/gitea/identity.ts";
import { assignmentOfRunner, openIdentity, sealIdentity, type RunnerFile } from "../../src/domain/runner-identity.ts";
import { labelName, type Route } from "../../src/pools/routes.ts";
import { poolsFor } from "../../src/pools/route.ts";
import { repositoryOf } from "../../src/forge/gitea/sweep.ts";
import { cleanupVerdict } from "../../src/forge/runner-cleanup.ts";
import { parseWorkflowJob } from "../../src/forge/gitea/webhook.ts";
import type { AssignmentRecord } from "../../src/state/records.ts";
import completed from "../fixtures/gitea/workflow_job.completed.json";
import inProgress from "../fixtures/gitea/workflow_job.in_progress.json";
import queued from "../fixtures/gitea/workflow_job.queued.json";
import { assignment, giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { stubGitea } from "../harness/gitea-stub.ts";

describe("routing", () => {
  // Gitea's rule: every runs-on label among the runner's label names; the first route wins.
  const matchRoute = (routes: Route[], runsOn: readonly string[]) =>
    poolsFor(
      routes.map((r) => ({ ...r, priority: 100 })),
      runsOn,
    )[0];
  const routes: Route[] = [
    { backend: "vm", labels: ["windows:host", "windows-2022:host"] },
    { backend: "pod", labels: ["ubuntu-latest:docker://node:20", "ubuntu-22.04:docker://node:20", "self-hosted"] },
    { backend: "vm", labels: ["ubuntu-latest:host", "gpu:host"] },
  ];
  it.each([
    [["ubuntu-latest"], "pod", 1],
    [["ubuntu-latest", "self-hosted"], "pod", 1],
    [["ubuntu-latest", "gpu"], "vm", 2],
    [["windows-2022"], "vm", 0],
    [["macos"], undefined, -1],
    [[], undefined, -1],
  ] as const)("%o → %s", (runsOn, backend, index) => {
    const route = matchRoute(routes, runsOn);
    expect(route?.backend).toBe(backend);
    if (index >= 0) expect(route).toEqual({ ...routes[index], priority: 100 });
  });
  it("compares names only: the part before the first colon", () => {
    expect(labelName("ubuntu-latest:docker://node:20")).toBe("ubuntu-latest");
    expect(labelName("self-hosted")).toBe("self-hosted");
    expect(matchRoute(routes, ["ubuntu-latest:docker://node:20"])).toBeUndefined();
  });
});

describe("webhook payloads", () => {
  it("accepts Gitea's real deliveries, Go zero times and extra fields included", () => {
    expect(parseWorkflowJob(queued).workflow_job).toMatchObject({ id: 1187, run_attempt: 1, labels: ["ubuntu-latest"] });
    expect(parseWorkflowJob(inProgress).workflow_job.runner_name).toBe("gdr-gitea-1187-1");
    expect(parseWorkflowJob(completed).workflow_job.conclusion).toBe("success");
    const { organization: _o, ...userRepo } = queued;
    expect(parseWorkflowJob({ ...userRepo, pull_request: { id: 1 } }).action).toBe("queued");
  });
  it("names the failing fields", () => {
    expect(() => parseWorkflowJob({ action: "queued", workflow_job: { id: "x" } })).toThrow(InvalidInput);
  });
  it("maps runner names to assignments and job URLs to repositories", () => {
    expect(assignmentOfRunner("gdr", "gdr-gitea-1187-1")).toBe("gitea-1187-1");
    expect(assignmentOfRunner("gdr", "other-1")).toBeUndefined();
    expect(assignmentOfRunner("gdr", "gdr-")).toBeUndefined();
    expect(repositoryOf("https://git.example.com/api/v1/repos/acme/widgets/actions/jobs/1")).toBe("acme/widgets");
    expect(repositoryOf("https://git.example.com/sub/acme/widgets/actions/runs/3/jobs/0")).toBe("acme/widgets");
  });
});

describe("cleanup verdict", () => {
  const now = Date.parse("2026-11-30T12:00:00Z");
  const limits = { claimTimeoutMs: 240_000, graceMs: 300_000 };
  const rec = (state: AssignmentRecord["state"], runnerId: number | undefined, registeredMsAgo = 0): AssignmentRecord =>
    written({
      id: "gitea-1-1",
      backend: "pod",
      contentHash: "h",
      state,
      createdAt: "",
      receivedAt: "",
      updatedAt: "",
      ...(runnerId === undefined
        ? {}
        : { runner: { id: runnerId, name: "gdr-gitea-1-1", sealed: "", registeredAt: new Date(now - registeredMsAgo).toISOString() } }),
    });
  it.each([
    ["no record", null, "delete"],
    ["completed", rec("completed", 7), "delete"],
    ["terminated", rec("terminated", 7), "delete"],
    ["another registration of the same assignment", rec("backend_ready", 8), "delete"],
    ["a registration the record never stored", rec("backend_pending", undefined), "delete"],
    ["claimed long ago: still running", rec("claimed", 7, 3_600_000), "keep"],
    ["ready, within claim timeout + grace", rec("backend_ready", 7, 540_000), "keep"],
    ["ready, past claim timeout + grace", rec("backend_ready", 7, 540_001), "delete_and_forget"],
    ["registered long ago, provisioned afresh just now", { ...rec("backend_ready", 7, 3_600_000), readyAt: new Date(now - 1_000).toISOString() }, "keep"],
  ] as const)("%s → %s", (_n, record, verdict) => {
    expect(cleanupVerdict(record, 7, now, limits)).toBe(verdict);
  });
  it("keeps a registration a live pass may be about to store, and only that one", () => {
    expect(cleanupVerdict(rec("backend_pending", undefined), 7, now, limits, true)).toBe("keep");
    expect(cleanupVerdict(rec("backend_ready", 8), 7, now, limits, true)).toBe("delete");
    expect(cleanupVerdict(rec("completed", undefined), 7, now, limits, true)).toBe("delete");
    expect(cleanupVerdict(null, 7, now, limits, true)).toBe("delete");
  });
});

describe("runner identity", () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
  const file: RunnerFile = {
    WARNING: "w",
    id: 3,
    uuid: "u",
    name: "gdr-a",
    token: "runner-secret-token",
    address: "https://g",
    labels: ["x"],
    ephemeral: true,
  };
  it("is sealed with AES-256-GCM, bound to its assignment", async () => {
    const sealed = await sealIdentity(key, "a", file);
    expect(sealed).not.toContain("runner-secret-token");
    expect(atob(sealed)).not.toContain("runner-secret-token");
    expect(await openIdentity(key, "a", sealed)).toEqual(file);
    await expect(openIdentity(key, "b", sealed)).rejects.toThrow();
    await expect(
      openIdentity(
        key.map((b) => b ^ 1),
        "a",
        sealed,
      ),
    ).rejects.toThrow();
    // A fresh IV each time: the same file sealed twice never gives the same ciphertext (GCM with a
    // repeated IV under one key leaks the XOR of plaintexts and the authentication key).
    const again = await sealIdentity(key, "a", file);
    expect(again).not.toBe(sealed);
    expect(atob(again).slice(0, 12)).not.toBe(atob(sealed).slice(0, 12));
  });

  it("is registered once, even by concurrent deliveries on separate connections", async () => {
    const env = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), "http://127.0.0.1:9");
    const config = await provisionEnv(env);
    const fake = stubGitea({ registerMs: 50 });
    const a = assignment("gitea-5-1");
    const { record } = await createDispatcher({ config }).withState(({ records }) => records.offer(a));
    // Eight invocations take the same message at once; each asks admission for a reservation.
    const results = await Promise.all(
      Array.from({ length: 8 }, () =>
        createDispatcher({ config }).withState(async ({ admission }) => {
          const { reserved } = await admission.acquireMany("pod", [a.id], new Set([a.id]));
          return obtainRunnerIdentity(config.gitea!, fake, a, record, reserved.has(a.id), Date.now);
        }),
      ),
    );
    expect(fake.registrations).toBe(1);
    expect(results.filter((r) => r.kind === "ready")).toHaveLength(1);
    expect(results.filter((r) => r.kind === "busy")).toHaveLength(7);
    const ref = results.find((r) => r.kind === "ready" && r.ref)!;
    // Once stored, every later delivery opens the same identity without registering.
    const stored = { ...record, runner: (ref as { ref: NonNullable<unknown> }).ref as never };
    const again = await obtainRunnerIdentity(config.gitea!, fake, a, stored, false, Date.now);
    expect(again).toMatchObject({ kind: "ready", file: { id: 1, token: "t1", name: "gdr-gitea-5-1" } });
    expect(fake.registrations).toBe(1);
  });
});

describe("Gitea configuration", () => {
  const base = giteaTestEnv("ws://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3");
  const problems = (env: Record<string, unknown>) => {
    try {
      loadConfig(env);
      return [];
    } catch (err) {
      return (err as ConfigError).problems;
    }
  };
  it("parses a complete setup, scopes included", () => {
    expect(loadConfig(base).gitea).toMatchObject({ scope: { kind: "admin" }, runnerNamePrefix: "gdr", webhookMaxBytes: 1_048_576 });
    expect(loadConfig(base).pools).toMatchObject([{ name: "route-0", backend: "pod", minIdle: 0 }]);
    expect(loadConfig({ ...base, GITEA_SCOPE: "org:acme" }).gitea?.scope).toEqual({ kind: "org", org: "acme" });
    expect(loadConfig({ ...base, GITEA_SCOPE: "repo:acme/widgets" }).gitea?.scope).toEqual({ kind: "repo", owner: "acme", repo: "widgets" });
  });
  it("RUNNER_SCOPE: instance by default; owner or repository need the API token, and a warm pool a scope of its own", () => {
    expect(loadConfig(base).gitea?.runnerScope).toBe("instance");
    expect(loadConfig({ ...base, RUNNER_SCOPE: "repository" }).gitea?.runnerScope).toBe("repository");
    expect(problems({ ...base, RUNNER_SCOPE: "repo" })).toEqual(["RUNNER_SCOPE must be one of instance, owner, repository"]);
    const staticToken = { ...base, GITEA_API_TOKEN: "", GITEA_RUNNER_REGISTRATION_TOKEN: "reg" };
    expect(loadConfig(staticToken).gitea?.runnerScope).toBe("instance");
    expect(problems({ ...staticToken, RUNNER_SCOPE: "owner" })).toEqual([
      "RUNNER_SCOPE=owner needs GITEA_API_TOKEN: each owner's registration token is fetched with it",
    ]);
    const pool = (p: Record<string, unknown>) => ({
      ...base,
      RUNS_ON_ROUTES: "",
      RUNNER_POOLS: JSON.stringify([{ name: "small", backend: "pod", labels: ["x"], ...p }]),
    });
    // Warm runners have no repository: under repository scope, their pool must say where they go.
    expect(problems({ ...pool({ minIdle: 1 }), RUNNER_SCOPE: "repository" })).toEqual([
      'RUNNER_POOLS: pool "small" keeps warm runners, which have no repository yet: set its scope (admin, org:<name>, user:<name> or repo:<owner>/<name>) with RUNNER_SCOPE=repository',
    ]);
    expect(problems({ ...pool({ schedule: [{ cron: "* 8-17 * * *", minIdle: 2 }] }), RUNNER_SCOPE: "owner" })).toHaveLength(1);
    expect(problems({ ...pool({ minIdle: 1 }), RUNNER_SCOPE: "instance" })).toEqual([]);
    expect(problems({ ...pool({ minIdle: 1, scope: "org:acme" }), RUNNER_SCOPE: "repository" })).toEqual([]);
    expect(problems({ ...pool({ minIdle: 0 }), RUNNER_SCOPE: "repository" })).toEqual([]);
    expect(problems(pool({ scope: "team:acme" }))).toEqual([
      'RUNNER_POOLS[0]["scope"] must be admin, org:<name>, user:<name> or repo:<owner>/<name> (pool "small")',
    ]);
    expect(problems({ ...pool({ scope: "org:acme" }), GITEA_API_TOKEN: "", GITEA_RUNNER_REGISTRATION_TOKEN: "reg" })).toEqual([
      'RUNNER_POOLS: pool "small" has scope org:acme, whose registration token is fetched with GITEA_API_TOKEN, which is not set',
    ]);
    expect(problems({ ...pool({ scope: "admin" }), GITEA_API_TOKEN: "", GITEA_RUNNER_REGISTRATION_TOKEN: "reg" })).toEqual([]);
  });

  it("QUOTAS: read with fair share on (the default) only; a bad one is a problem naming its field", () => {
    const quotas = JSON.stringify({ default: { owner: 4 }, owners: { Acme: { weight: 2 } } });
    expect(loadConfig({ ...base, FAIR_SHARE: "on", QUOTAS: quotas }).quotas.owners.get("acme")).toEqual({ weight: 2 });
    expect(loadConfig({ ...base, QUOTAS: quotas }).quotas.owners.get("acme")).toEqual({ weight: 2 });
    expect(loadConfig(base).fairShare).toBe(true);
    expect(loadConfig({ ...base, FAIR_SHARE: "off" }).fairShare).toBe(false);
    expect(problems({ ...base, FAIR_SHARE: "off", QUOTAS: quotas })).toEqual([
      "QUOTAS needs FAIR_SHARE=on (the default): a job at its limit waits its turn in the wait set",
    ]);
    expect(problems({ ...base, FAIR_SHARE: "on", QUOTAS: JSON.stringify({ owners: { acme: { weight: 0 } } }) })).toEqual([
      'QUOTAS["owners"]["acme"]["weight"] must be above 0',
    ]);
    expect(problems({ ...base, FAIR_SHARE: "yes" })).toEqual(["FAIR_SHARE must be on or off"]);
  });

  it("reports every Gitea problem at once without echoing secrets", () => {
    const found = problems({
      ...base,
      GITEA_WEBHOOK_SECRET: "",
      GITEA_API_TOKEN: "",
      RUNNER_IDENTITY_KEY: "c2hvcnQ=",
      RUNS_ON_ROUTES: JSON.stringify([
        { backend: "Lambda", labels: [] },
        { backend: "vm", labels: ["x"] },
      ]),
      GITEA_SCOPE: "team:x",
    });
    const text = found.join("\n");
    for (const s of [
      "GITEA_WEBHOOK_SECRET",
      "GITEA_RUNNER_REGISTRATION_TOKEN or GITEA_API_TOKEN",
      "RUNNER_IDENTITY_KEY",
      'RUNS_ON_ROUTES[0]["backend"]',
      'RUNS_ON_ROUTES[0]["labels"]',
      "GITEA_SCOPE",
    ]) {
      expect(text).toContain(s);
    }
    expect(text).not.toContain("c2hvcnQ=");
    expect(problems({ ...base, RUNS_ON_ROUTES: "[{" })).toEqual(["RUNS_ON_ROUTES must be JSON"]);
    expect(problems({ ...base, RUNS_ON_ROUTES: JSON.stringify([{ backend: "vm", labels: ["x"] }]) })).toEqual([
      'RUNS_ON_ROUTES[0]["backend"] is vm, which is disabled (CAPACITY_VM=0) (pool "route-0")',
    ]);
    expect(TEST_SECRETS.RUNNER_IDENTITY_KEY).toBeTruthy();
  });
});

describe("Gitea client", () => {
  it("scopes the REST paths per GITEA_SCOPE", () => {
    expect(scopePath({ kind: "admin" })).toEqual({ path: "/api/v1/admin/actions" });
    expect(scopePath({ kind: "org", org: "acme" })).toEqual({ path: "/api/v1/orgs/acme/actions" });
    expect(scopePath({ kind: "repo", owner: "acme", repo: "widgets" })).toEqual({ path: "/api/v1/repos/acme/widgets/actions" });
    expect(scopePath({ kind: "user", user: "alice" })).toEqual({ path: "/api/v1/user/actions", sudo: "alice" });
  });

  it("fetches the registration token once per client, with the API token, from the scoped path", async () => {
    const seen: { url: string; auth: string | null; method: string | undefined }[] = [];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      seen.push({ url, auth: new Headers(init.headers).get("authorization"), method: init.method });
      if (url.endsWith("/registration-token")) return Response.json({ token: "reg-1" });
      return Response.json({ runner: { id: "12", uuid: "u", token: "rt", name: "gdr-x", labels: ["a"] } });
    }) as typeof fetch;
    const cfg = loadConfig({ ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"), GITEA_SCOPE: "org:acme" }).gitea!;
    const client = createGiteaClient(cfg, 1_000, fakeFetch);
    const a = await client.register({ name: "gdr-x", labels: ["a"], version: "v" });
    await client.register({ name: "gdr-y", labels: ["a"], version: "v" });
    expect(a).toMatchObject({ id: 12, token: "rt" });
    expect(seen.map((s) => `${s.method} ${new URL(s.url).pathname} ${s.auth}`)).toEqual([
      `POST /${cfg.url.split("/").pop()}/api/v1/orgs/acme/actions/runners/registration-token token gitea-api-token-0000`,
      `POST /${cfg.url.split("/").pop()}/api/actions/runner.v1.RunnerService/Register null`,
      `POST /${cfg.url.split("/").pop()}/api/actions/runner.v1.RunnerService/Register null`,
    ]);
  });

  it("a kept registration token serves later clients until it is a minute old, and one Gitea no longer knows is fetched anew once", async () => {
    let issued = "reg-1";
    let known = "reg-1";
    const calls: string[] = [];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      if (url.endsWith("/registration-token")) {
        calls.push(`token ${issued}`);
        return Response.json({ token: issued });
      }
      const { token } = JSON.parse(init.body as string) as { token: string };
      calls.push(`register ${token}`);
      if (token !== known) return Response.json({ code: "not_found", message: "runner registration token not found" }, { status: 404 });
      return Response.json({ runner: { id: "12", uuid: "u", token: "rt", name: "gdr-x", labels: ["a"] } });
    }) as typeof fetch;
    const cfg = loadConfig(giteaTestEnv("ws://x:1", "http://b", "https://git.example.com")).gitea!;
    const kept: TokenCache = new Map();
    const req = { name: "gdr-x", labels: ["a"], version: "v" };
    await createGiteaClient(cfg, 1_000, fakeFetch, kept).register(req);
    await createGiteaClient(cfg, 1_000, fakeFetch, kept).register(req);
    expect(calls).toEqual(["token reg-1", "register reg-1", "register reg-1"]);
    // The operator resets the token: the kept one gets 404, a new one is fetched, one retry.
    issued = known = "reg-2";
    calls.length = 0;
    await expect(createGiteaClient(cfg, 1_000, fakeFetch, kept).register(req)).resolves.toMatchObject({ id: 12 });
    expect(calls).toEqual(["register reg-1", "token reg-2", "register reg-2"]);
    // Past the minute, a new fetch, even though the kept one still works.
    vi.useFakeTimers({ now: Date.now() + TOKEN_TTL_MS + 1, toFake: ["Date"] });
    try {
      calls.length = 0;
      await createGiteaClient(cfg, 1_000, fakeFetch, kept).register(req);
      expect(calls).toEqual(["token reg-2", "register reg-2"]);
    } finally {
      vi.useRealTimers();
    }
    // A token Gitea never knows: one retry, then the refusal (not a loop).
    known = "none";
    calls.length = 0;
    await expect(createGiteaClient(cfg, 1_000, fakeFetch, kept).register(req)).rejects.toMatchObject({ name: "GiteaError", status: 404 });
    expect(calls).toEqual(["register reg-2", "token reg-2", "register reg-2"]);
  });

  it("reports Gitea's refusals as errors with the status, never with a token", async () => {
    const cfg = loadConfig(giteaTestEnv("ws://x:1", "http://b", "https://git.example.com")).gitea!;
    const client = createGiteaClient(cfg, 1_000, async () =>
      Response.json({ code: "not_found", message: "runner registration token not found" }, { status: 404 }),
    );
    const err = await client.register({ name: "n", labels: [], version: "v" }).catch((e: Error) => e);
    expect(err).toMatchObject({ name: "GiteaError", status: 404 });
    expect(String((err as Error).message)).not.toContain("gitea-api-token");
  });
});
