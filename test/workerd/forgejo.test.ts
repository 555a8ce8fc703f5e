// FORGE=forgejo end to end in workerd, against the fake Forgejo (every request checked against
// forgejo-v15.json at the end of each test) and the real nats-server: jobs found by the poller
// object, each published once, its runner registered over REST and bound to its job's handle;
// claims, completions and cancels read from the waiting list; the poller's faults.
import { afterEach, describe, expect, inject, it } from "vitest";
import { createDispatcher } from "../../src/app/dispatcher.ts";
import { loadConfig } from "../../src/app/config.ts";
import { createForgejoClient } from "../../src/forge/forgejo/client.ts";
import { pollForgejo, type KnownStore } from "../../src/forge/forgejo/poller.ts";
import { MAX_PER_POLL, type KnownJob } from "../../src/forge/forgejo/jobs.ts";
import { forgejoTestEnv, provisionEnv, TEST_SECRETS, testClaimToken } from "../harness/env.ts";
import { deliverRuns, finishTask, fireAlarm, forgejoControl, knownOf, poll, pollerStub, runAsRunner } from "../harness/forgejo.ts";
import { checkForgejoRequests } from "../harness/forgejo-contract.ts";
import { backendControl, bearer, logsOfEachTest, request, sleep, tick } from "../harness/worker.ts";
import { runInDurableObject } from "cloudflare:test";
import { hexHmacSha256 } from "../../src/forge/signature.ts";
import { base64 } from "../../src/model/crypto.ts";

const logs = logsOfEachTest();
let checked: Record<string, string> | undefined;
afterEach(async () => {
  // Whatever the test did, every request the Worker sent Forgejo is an operation of Forgejo 15.
  if (checked) expect(checkForgejoRequests((await forgejoControl(checked).state()).requests)).toEqual([]);
  checked = undefined;
});

async function setup(overrides: Record<string, unknown> = {}) {
  const env = forgejoTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("forgejoUrl"), { RETRY_DELAY_MS: 50, ...overrides });
  await provisionEnv(env);
  checked = env;
  return { env, forgejo: forgejoControl(env), backend: backendControl(env) };
}

const view = async (env: Record<string, string>, id: string) => {
  const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  return res.status === 200 ? ((await res.json()) as { state: string; giteaRunnerId: number | null; reason: string | null }) : null;
};

async function until(done: () => Promise<boolean>, timeoutMs = 10_000, pauseMs = 50) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error("timed out");
    await sleep(pauseMs);
  }
}

/** A second poller with its own memory, as in another isolate (not the object). */
function otherPoller(env: Record<string, string>) {
  const config = loadConfig(env);
  const known = new Map<string, KnownJob>();
  const store: KnownStore = { all: async () => new Map(known), put: async (k, v) => void known.set(k, v), delete: async (k) => void known.delete(k) };
  const client = createForgejoClient({ url: config.forgejo!.url, apiToken: config.forgejo!.apiToken, timeoutMs: 5_000 });
  return async () => {
    const d = createDispatcher({ config, shareConnection: true });
    try {
      return await pollForgejo(d, client, config.forgejo!, store);
    } finally {
      await d.close();
    }
  };
}

describe("FORGE=forgejo", () => {
  it("a waiting job polled twice, and by two pollers at once, is one assignment with one runner registered over REST and bound to its handle", async () => {
    const { env, forgejo, backend } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    const [a, b] = await Promise.all([poll(env), otherPoller(env)()]);
    expect(a.ok && b.ok).toBe(true);
    expect(a.published + b.published).toBe(1);
    expect((await poll(env)).published).toBe(0);
    await until(async () => (await backend.state()).runners.length === 1 && (await view(env, id))?.state === "backend_ready");
    await poll(env);
    const state = await forgejo.state();
    expect(state.registrations).toBe(1);
    expect(state.runners).toMatchObject([{ name: `gdr-${id}`, ephemeral: true }]);
    const put = (await backend.state()).requests.find((r) => r.method === "PUT")!;
    const body = JSON.parse(put.body) as { forgejo: { handle: string; uuid: string; token: string; url: string; labels: string[] }; runner?: unknown };
    expect(body.forgejo).toMatchObject({
      handle: job!.handle,
      uuid: state.runners[0]!.uuid,
      token: state.runners[0]!.token,
      url: env.GITEA_URL,
      labels: JSON.parse(env.RUNS_ON_ROUTES!)[0].labels,
    });
    expect(body.runner).toBeUndefined();
    expect((await view(env, id))?.giteaRunnerId).toBe(state.runners[0]!.id);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "published"),
    ).toHaveLength(1);
    // No token of Forgejo's in any log line.
    expect(logs().lines.join("\n")).not.toContain(state.runners[0]!.token);
    expect(logs().lines.join("\n")).not.toContain(env.GITEA_API_TOKEN);
  });

  it("an idle Forgejo costs one request per poll, and its null list is no jobs", async () => {
    const { env, forgejo } = await setup();
    for (let i = 0; i < 3; i++) expect(await poll(env)).toMatchObject({ ok: true, listed: 0, published: 0 });
    const requests = (await forgejo.state()).requests;
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual(Array(3).fill("GET /api/v1/admin/actions/runners/jobs"));
  });

  it(
    "a runner bound by handle takes its own job, not one of the 200 older jobs with the same labels waiting before it (fair share gives it the next slot)",
    { timeout: 60_000 },
    async () => {
      const { env, forgejo, backend } = await setup({ CAPACITY_POD: 2 });
      await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, runner: true, fetchIntervalMs: 100, jobMs: 50 });
      // The first two hold both slots while the rest are queued and wait their turn; the first ends first.
      const older = await forgejo.queue(
        Array.from({ length: 200 }, (_, i) => ({ runs_on: ["ubuntu-latest"], repository: "a/mono", runMs: [4_000, 12_000][i] ?? 50 })),
      );
      // One poll's work is bounded: the 200 take two polls.
      expect((await poll(env)).published).toBe(MAX_PER_POLL);
      expect((await poll(env)).published).toBe(200 - MAX_PER_POLL);
      const [newest] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], repository: "b/fix" }]);
      await poll(env);
      await until(
        async () => {
          await poll(env);
          return (await view(env, `forgejo-${newest!.id}-1`))?.state === "capacity_wait";
        },
        10_000,
        500,
      );
      expect((await forgejo.state()).taken.map((t) => t.job).sort()).toEqual([older[0]!.id, older[1]!.id]);
      // Polls, as the alarm makes them (every half second here): a finished job's runner is gone, its slot given to the next.
      await until(
        async () => {
          await poll(env);
          return (await forgejo.state()).taken.length >= 3;
        },
        30_000,
        500,
      );
      const { taken } = await forgejo.state();
      // The first slot freed went by turn to b/fix (its owner holds none, a/mono's one). Its runner
      // took its own job; Forgejo's own pick, without the handle, would have been a/mono's oldest waiting: older[2].
      expect(taken[2]!.job).toBe(newest!.id);
      for (const t of taken) expect(t.runner).toBe(`gdr-forgejo-${t.job}-${t.attempt}`);
      expect(
        logs()
          .events()
          .filter((e) => e.event === "turn_given")
          .map((e) => e.assignment),
      ).toContain(`forgejo-${newest!.id}-1`);
    },
  );

  it("a runner that runs its job claims it when the poll sees it running, and completes when Forgejo deletes it, even if it never reports", async () => {
    const { env, forgejo, backend } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, id))?.state === "backend_ready");
    const runner = (await forgejo.state()).runners[0]!;
    // It takes the job; the next poll sees it running with a task: the claim.
    expect(await runAsRunner(env, runner, ["ubuntu-latest"], job!.handle, null)).toBeGreaterThan(0);
    expect((await poll(env)).claimed).toBe(1);
    expect((await view(env, id))?.state).toBe("claimed");
    // Its job ends without the runner calling complete (a pod killed after its job): Forgejo deleted the ephemeral runner.
    const task = (await forgejo.state()).jobs.find((j) => j.id === job!.id)!.task_id;
    await finishTask(env, runner, task);
    expect((await forgejo.state()).runners).toEqual([]);
    expect((await poll(env)).ended).toBe(1);
    expect((await view(env, id))?.state).toBe("completed");
    expect((await backend.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([expect.stringContaining(id)]);
    expect(await knownOf(env)).toEqual([]);
  });

  it("a job queued behind its concurrency group keeps its one runner past the claim timeout while that runner polls, and runs once the group frees; near miss: a runner that never polled is made again", async () => {
    const { env, forgejo, backend } = await setup({ CLAIM_TIMEOUT_MS: 1_000 });
    const said = (event: string) =>
      logs()
        .events()
        .filter((e) => e.event === event)
        .map((e) => e.assignment);
    // Two runs of one group (cancel-in-progress false): b waits for a, listed `waiting` all along.
    const [a] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], concurrency: "deploy" }]);
    const [b] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], concurrency: "deploy" }]);
    const [ida, idb] = [`forgejo-${a!.id}-1`, `forgejo-${b!.id}-1`];
    await poll(env);
    await until(async () => (await view(env, ida))?.state === "backend_ready" && (await view(env, idb))?.state === "backend_ready");
    const runnerOf = async (id: string) => (await forgejo.state()).runners.find((r) => r.name === `gdr-${id}`)!;
    expect(await runAsRunner(env, await runnerOf(ida), ["ubuntu-latest"], a!.handle, null)).toBeGreaterThan(0);
    expect((await poll(env)).claimed).toBe(1);
    // b's runner polls for its handle and is given nothing: the group holds b.
    const rb = await runnerOf(idb);
    expect(await runAsRunner(env, rb, ["ubuntu-latest"], b!.handle, null)).toBeUndefined();
    await sleep(1_100);
    await tick(env);
    expect(said("claim_held")).toEqual([idb]);
    expect(said("claim_timeout")).toEqual([]);
    expect((await forgejo.state()).registrations).toBe(2);
    expect((await backend.state()).requests.filter((r) => r.method === "DELETE")).toEqual([]);
    // a ends; b's runner, polling on, takes b: its claim, with the one runner it had.
    const task = (await forgejo.state()).jobs.find((j) => j.id === a!.id)!.task_id;
    const ra = await runnerOf(ida);
    await finishTask(env, ra, task);
    expect(await runAsRunner(env, rb, ["ubuntu-latest"], b!.handle, null)).toBeGreaterThan(0);
    await poll(env);
    expect((await view(env, idb))?.state).toBe("claimed");
    expect((await forgejo.state()).registrations).toBe(2);

    // Near miss: a third run of the group whose runner never polls (offline) is made again at its claim timeout.
    const [c] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], concurrency: "deploy" }]);
    const idc = `forgejo-${c!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, idc))?.state === "backend_ready");
    await sleep(1_100);
    await tick(env);
    expect(said("claim_timeout")).toEqual([idc]);
    expect(said("claim_held")).toEqual([idb]);
  });

  it("a fast job that ran between two polls completes: never seen running, its runner gone", async () => {
    const { env, forgejo } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, id))?.state === "backend_ready");
    const runner = (await forgejo.state()).runners[0]!;
    await runAsRunner(env, runner, ["ubuntu-latest"], job!.handle);
    expect((await poll(env)).ended).toBe(1);
    expect((await view(env, id))?.state).toBe("completed");
  });

  it.each([
    ["before any runner boots", { runner: false }],
    ["while its runner boots", { runner: true, bootMs: 5_000 }],
  ])("a job cancelled %s ends its assignment and deletes its runner at the backend and in Forgejo", async (_when, mode) => {
    const { env, forgejo, backend } = await setup();
    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, ...mode });
    const [job, other] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }, { runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await forgejo.state()).runners.length === 2 && (await backend.state()).runners.length === 2);
    await forgejo.cancel(job!.id);
    expect((await poll(env)).ended).toBe(1);
    const v = await view(env, id);
    expect(v).toMatchObject({ state: "terminated", reason: expect.stringContaining("left Forgejo's waiting list") });
    expect((await forgejo.state()).runners.map((r) => r.name)).toEqual([`gdr-forgejo-${other!.id}-1`]);
    expect((await backend.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([expect.stringContaining(id)]);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "cancelled")
        .map((e) => e.assignment),
    ).toEqual([id]);
    // The other job's assignment is untouched.
    expect((await view(env, `forgejo-${other!.id}-1`))?.state).not.toBe("terminated");
  });

  it("Forgejo answering 500, or not at all, during a poll loses nothing and ends nothing: counted, told once, and told when it recovers", async () => {
    const { env, forgejo } = await setup({ METRICS_TOKEN: "metrics-token-for-tests-01" });
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, id))?.state === "backend_ready");
    await forgejo.fault({ jobs: 500 });
    expect(await poll(env)).toMatchObject({ ok: false, reason: expect.stringContaining("500") });
    await forgejo.fault({ jobs: "down" });
    expect((await poll(env)).ok).toBe(false);
    expect((await view(env, id))?.state).toBe("backend_ready");
    expect((await knownOf(env)).map((k) => k.id)).toEqual([id]);
    const metrics = async () => (await request(env, "/metrics", { headers: bearer("metrics-token-for-tests-01") })).text();
    expect(await metrics()).toMatch(/^gdr_forgejo_poll_failures_total 2$/m);
    expect(await metrics()).toMatch(/^gdr_forgejo_poll_failing 1$/m);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "forgejo_poll_failed"),
    ).toHaveLength(1);
    await forgejo.fault({ jobs: 0 });
    expect((await poll(env)).ok).toBe(true);
    expect(await metrics()).toMatch(/^gdr_forgejo_poll_failing 0$/m);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "forgejo_poll_recovered"),
    ).toHaveLength(1);
    expect((await view(env, id))?.state).toBe("backend_ready");
    expect(logs().lines.join("\n")).not.toContain(env.GITEA_API_TOKEN);
  });

  it.each([401, 422])("a registration Forgejo refuses (%i) leaves the assignment waiting, and it gets its runner once Forgejo accepts", async (status) => {
    const { env, forgejo, backend } = await setup();
    await forgejo.fault({ register: status });
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    expect((await poll(env)).published).toBe(1);
    // The pass after the poll runs on in the object: the refusal is told.
    await until(async () => logs().lines.join("\n").includes(`Forgejo answered ${status}`));
    expect((await backend.state()).runners).toEqual([]);
    expect((await view(env, id))?.state).not.toBe("terminated");
    const said = logs().lines.join("\n");
    expect(said).not.toContain(env.GITEA_API_TOKEN);
    await forgejo.fault({ register: 0 });
    await until(async () => {
      await tick(env);
      return (await backend.state()).runners.length === 1;
    });
    expect((await forgejo.state()).registrations).toBe(1);
  });

  it("a handle reused by another attempt is refused (one runner per handle); a rerun with its own handle is served", async () => {
    const { env, forgejo } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    await poll(env);
    await forgejo.rerun(job!.id, job!.handle);
    const second = await poll(env);
    expect(second.published).toBe(0);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "handle_conflict")
        .map((e) => e.assignment),
    ).toEqual([`forgejo-${job!.id}-2`]);
    expect(await view(env, `forgejo-${job!.id}-2`)).toBeNull();
    // The near miss: the next attempt with a fresh handle.
    await forgejo.rerun(job!.id);
    expect((await poll(env)).published).toBe(1);
    expect((await view(env, `forgejo-${job!.id}-3`))?.state).toBeDefined();
    // Its runner is registered by the pass the poll started (it runs on in the object).
    await until(async () => (await forgejo.state()).registrations === 2);
    await sleep(200);
    expect((await forgejo.state()).registrations).toBe(2);
  });

  it("an attempt listed again under another handle is said once, and serves neither handle twice", async () => {
    const { env, forgejo } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await forgejo.rerun(job!.id, undefined, true);
    for (let i = 0; i < 3; i++) expect((await poll(env)).published).toBe(0);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "handle_conflict")
        .map((e) => e.assignment),
    ).toEqual([id]);
    expect((await view(env, id))?.state).toBeDefined();
    // A third handle is news again.
    await forgejo.rerun(job!.id, undefined, true);
    await poll(env);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "handle_conflict"),
    ).toHaveLength(2);
  });

  it("names jobs by their repositories' names from Forgejo (one lookup per repository), so QUOTAS is written by name; a lookup Forgejo refuses costs no job its runner", async () => {
    const { env, forgejo, backend } = await setup({ QUOTAS: JSON.stringify({ repositories: { "acme/widgets": { limit: 1 } } }) });
    await forgejo.queue([
      { runs_on: ["ubuntu-latest"], repository: "acme/widgets" },
      { runs_on: ["ubuntu-latest"], repository: "acme/widgets" },
    ]);
    await poll(env);
    await tick(env);
    const status = async () =>
      (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
        recent: { id: string; repository: string | null; state: string }[];
      };
    await until(
      async () =>
        (await status()).recent
          .filter((r) => r.repository === "acme/widgets")
          .map((r) => r.state)
          .sort()
          .join() === "backend_ready,quota_wait",
    );
    expect((await forgejo.state()).requests.filter((r) => r.path.startsWith("/api/v1/repositories/"))).toHaveLength(1);
    // Forgejo refuses the lookup for a new repository: the job is named by ids, and gets its runner.
    await forgejo.fault({ repository: 403 });
    const [other] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], repository: "beta/app" }]);
    await poll(env);
    await until(async () => (await status()).recent.find((r) => r.id === `forgejo-${other!.id}-1`)?.state === "backend_ready");
    expect((await status()).recent.find((r) => r.id === `forgejo-${other!.id}-1`)?.repository).toMatch(/^id-\d+\/id-\d+$/);
    expect((await backend.state()).runners).toHaveLength(2);
  });

  it("registers each job's runner at the job's repository, which deletes it there after its job; where the token may not, at GITEA_SCOPE, said once", async () => {
    const { env, forgejo, backend } = await setup();
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"], repository: "acme/widgets" }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, id))?.state === "backend_ready");
    const posts = async () => (await forgejo.state()).requests.filter((r) => r.method === "POST" && r.path.endsWith("/actions/runners")).map((r) => r.path);
    expect(await posts()).toEqual(["/api/v1/repos/acme/widgets/actions/runners"]);
    // The runner takes its job there and finishes: the poll finds it gone from that repository.
    const put = JSON.parse((await backend.state()).requests.find((r) => r.method === "PUT")!.body) as { forgejo: { uuid: string; token: string } };
    expect(await runAsRunner(env, put.forgejo, ["ubuntu-latest"], job!.handle)).toBeGreaterThan(0);
    await until(async () => {
      await poll(env);
      return (await view(env, id))?.state === "completed";
    });
    expect((await forgejo.state()).requests.some((r) => r.method === "GET" && r.path.startsWith("/api/v1/repos/acme/widgets/actions/runners/"))).toBe(true);
    // Refused at the repository: GITEA_SCOPE, said once for two jobs of it.
    await forgejo.fault({ registerRepo: 403 });
    const two = await forgejo.queue([
      { runs_on: ["ubuntu-latest"], repository: "beta/app" },
      { runs_on: ["ubuntu-latest"], repository: "beta/app" },
    ]);
    await poll(env);
    await until(async () => (await Promise.all(two.map((j) => view(env, `forgejo-${j.id}-1`)))).every((v) => v?.state === "backend_ready"));
    // Both try the repository when their registrations run at once; both end at GITEA_SCOPE.
    const later = (await posts()).slice(1);
    expect(later.filter((p) => p === "/api/v1/admin/actions/runners")).toHaveLength(2);
    expect(later.filter((p) => p !== "/api/v1/admin/actions/runners")).toEqual(expect.arrayContaining(["/api/v1/repos/beta/app/actions/runners"]));
    expect(
      logs()
        .events()
        .filter((e) => e.event === "registered_at_scope"),
    ).toHaveLength(1);
  });

  it("the poller's alarm, lost to an eviction, is set again by the cron tick, and polls", async () => {
    const { env, forgejo } = await setup();
    const stub = pollerStub(env);
    await tick(env);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_armed"),
    ).toHaveLength(1);
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    expect(await fireAlarm(env)).toBe(true);
    expect((await view(env, `forgejo-${job!.id}-1`))?.state).toBeDefined();
    // Set for the next period: a tick now arms nothing.
    await tick(env);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_armed"),
    ).toHaveLength(1);
    await runInDurableObject(stub, async (_o, state) => state.storage.deleteAlarm());
    expect(await fireAlarm(env)).toBe(false);
    await tick(env);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_armed"),
    ).toHaveLength(2);
    const [next] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    expect(await fireAlarm(env)).toBe(true);
    expect((await view(env, `forgejo-${next!.id}-1`))?.state).toBeDefined();
  });

  it("a poller whose name no longer matches the configuration (GITEA_URL moved) stops its alarm and polls nothing; the new one polls", async () => {
    const { env, forgejo } = await setup();
    const old = pollerStub(env);
    await tick(env);
    expect(await runInDurableObject(old, (_o, state) => state.storage.getAlarm())).not.toBeNull();
    const moved = { ...env, GITEA_URL: `${env.GITEA_URL}-moved` };
    // The old object meets the configuration in force (after a deploy it reads it from its env): not its own.
    expect(await old.arm(loadConfig(moved))).toBe(false);
    expect(await runInDurableObject(old, (_o, state) => state.storage.getAlarm())).toBeNull();
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_retired"),
    ).toHaveLength(1);
    // An alarm that still fires there polls nothing and is not set again.
    const asked = (await forgejo.state()).requests.length;
    await runInDurableObject(old, (_o, state) => state.storage.setAlarm(Date.now() + 60_000));
    expect(await fireAlarm(env)).toBe(true);
    expect((await forgejo.state()).requests.length).toBe(asked);
    expect(await runInDurableObject(old, (_o, state) => state.storage.getAlarm())).toBeNull();
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_retired"),
    ).toHaveLength(2);
    // Near miss: the object the configuration names arms, and keeps its alarm.
    await tick(moved);
    expect(await runInDurableObject(pollerStub(moved), (_o, state) => state.storage.getAlarm())).not.toBeNull();
    expect(
      logs()
        .events()
        .filter((e) => e.event === "poller_retired"),
    ).toHaveLength(2);
  });

  it("a run's webhook makes the poller look now: its jobs end there; a signature one character off is refused", async () => {
    const { env, forgejo } = await setup();
    await forgejo.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => (await view(env, id))?.state === "backend_ready");
    await forgejo.cancel(job!.id);
    const [delivery] = await forgejo.deliveries();
    expect(delivery!.event).toBe("action_run_failure");
    const sig = delivery!.headers["x-forgejo-signature"]!;
    const off = { ...delivery!.headers, "x-forgejo-signature": sig.slice(0, -1) + (sig.endsWith("0") ? "1" : "0"), "x-hub-signature-256": "" };
    expect((await request(env, "/v1/forgejo/webhook", { method: "POST", headers: off, body: delivery!.body })).status).toBe(401);
    expect((await view(env, id))?.state).toBe("backend_ready");
    const res = await request(env, "/v1/forgejo/webhook", { method: "POST", headers: delivery!.headers, body: delivery!.body });
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ run: job!.id, polled: true });
    expect((await view(env, id))?.state).toBe("terminated");
    expect(await deliverRuns(env)).toEqual([]);
  });

  it.each([
    ["15.0.3+gitea-1.22.0", 200, undefined],
    ["14.0.2+gitea-1.22.0", 503, "Forgejo 15 or newer"],
    ["1.25.0", 503, "set FORGE=gitea"],
  ])("/healthz reads Forgejo's version: %s", async (version, status, problem) => {
    const { env, forgejo } = await setup();
    await forgejo.version(version);
    const res = await request(env, "/healthz");
    expect(res.status).toBe(status);
    const body = (await res.json()) as { problems: string[]; forge: { version: string; ok: boolean } };
    expect(body.forge).toEqual({ kind: "forgejo", version, ok: problem === undefined });
    if (problem) expect(body.problems.join(" ")).toContain(problem);
    else expect(body.problems).toEqual([]);
  });

  it("a warm runner boots before its job, asks for its handle with its own claim token, is given the next job, and is replaced at once", async () => {
    const labels = JSON.parse(forgejoTestEnv("ws://x:1", "http://b", "http://f").RUNS_ON_ROUTES!)[0].labels as string[];
    const { env, forgejo, backend } = await setup({
      RUNS_ON_ROUTES: "",
      RUNNER_POOLS: JSON.stringify([{ name: "small", backend: "pod", labels, minIdle: 1 }]),
    });
    await tick(env);
    const warmPut = async () =>
      (await backend.state()).requests
        .filter((r) => r.method === "PUT")
        .map(
          (r) =>
            JSON.parse(r.body) as {
              assignment: { id: string; warm?: boolean };
              claimToken: string;
              handleUrl?: string;
              forgejo: { uuid: string; token: string; handle?: string };
            },
        );
    await until(async () => {
      await tick(env);
      return (await warmPut()).length === 1 && (await view(env, (await warmPut())[0]!.assignment.id))?.state === "backend_ready";
    });
    const [w] = await warmPut();
    expect(w!.assignment.warm).toBe(true);
    expect(w!.forgejo.handle).toBeUndefined();
    const wid = w!.assignment.id;
    expect(w!.handleUrl).toBe(`${env.PUBLIC_URL}/v1/assignments/${wid}/handle`);
    const ask = (token: string) => request(env, `/v1/assignments/${wid}/handle`, { headers: bearer(token) });
    expect((await ask(w!.claimToken)).status).toBe(204);
    // Not with another assignment's token.
    expect((await ask(await testClaimToken("forgejo-1-1"))).status).toBe(403);

    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const polled = await poll(env);
    expect(polled).toMatchObject({ published: 0, bound: 1 });
    expect(await view(env, `forgejo-${job!.id}-1`)).toBeNull();
    const given = await ask(w!.claimToken);
    expect(given.status).toBe(200);
    expect(await given.text()).toBe(job!.handle);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "warm_took_job")
        .map((e) => e.assignment),
    ).toEqual([wid]);
    // Its position was filled again at once: a second warm runner is asked for.
    expect(
      logs()
        .events()
        .filter((e) => e.event === "warm_filled"),
    ).toHaveLength(2);

    const runner = (await forgejo.state()).runners.find((r) => r.uuid === w!.forgejo.uuid)!;
    expect(await runAsRunner(env, runner, ["ubuntu-latest"], job!.handle, null)).toBeGreaterThan(0);
    expect((await forgejo.state()).taken).toEqual([expect.objectContaining({ job: job!.id, runner: `gdr-${wid}` })]);
    await poll(env);
    const task = (await forgejo.state()).jobs.find((j) => j.id === job!.id)!.task_id;
    await finishTask(env, runner, task);
    expect((await poll(env)).ended).toBe(1);
    expect((await view(env, wid))?.state).toBe("completed");
    expect((await ask(w!.claimToken)).status).toBe(409);
  });

  /** A pool of one warm runner, up and idle: its assignment id. */
  async function warmReady(env: Record<string, string>, backend: ReturnType<typeof backendControl>) {
    await until(async () => {
      await tick(env);
      const put = (await backend.state()).requests.find((r) => r.method === "PUT");
      return put !== undefined && (await view(env, JSON.parse(put.body).assignment.id))?.state === "backend_ready";
    });
    return JSON.parse((await backend.state()).requests.find((r) => r.method === "PUT")!.body).assignment.id as string;
  }
  const warmPool = () => ({
    RUNS_ON_ROUTES: "",
    RUNNER_POOLS: JSON.stringify([
      { name: "small", backend: "pod", labels: JSON.parse(forgejoTestEnv("ws://x:1", "http://b", "http://f").RUNS_ON_ROUTES!)[0].labels, minIdle: 1 },
    ]),
  });

  it("a job one poller gave to a warm runner is followed, not doubled, by a second poller with its own memory (or one that lost its storage)", async () => {
    const { env, forgejo, backend } = await setup(warmPool());
    const wid = await warmReady(env, backend);
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    expect(await otherPoller(env)()).toMatchObject({ bound: 1, published: 0 });
    // The object has never seen the job: it finds the handle bound to that warm runner, and follows it.
    expect(await poll(env)).toMatchObject({ bound: 0, published: 0 });
    expect(await knownOf(env)).toEqual([expect.objectContaining({ id: wid, job: job!.id, boundAt: expect.any(Number) })]);
    expect(await view(env, `forgejo-${job!.id}-1`)).toBeNull();
    expect((await backend.state()).requests.filter((r) => r.method === "PUT" && r.body.includes(`forgejo-${job!.id}-1`))).toEqual([]);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "warm_took_job"),
    ).toHaveLength(1);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "handle_conflict"),
    ).toEqual([]);
    // Cancelled before the runner took it: the poller that follows it ends that runner.
    await forgejo.cancel(job!.id);
    expect((await poll(env)).ended).toBe(1);
    expect((await view(env, wid))?.state).toBe("completed");
  });

  it("a warm runner registered at another Forgejo URL or scope is never given a job; one registered here is", async () => {
    const { env, backend } = await setup(warmPool());
    const wid = await warmReady(env, backend);
    const moved = { ...env, GITEA_URL: `${env.GITEA_URL}-moved` };
    const [there] = await forgejoControl(moved).queue([{ runs_on: ["ubuntu-latest"] }]);
    expect(await otherPoller(moved)()).toMatchObject({ bound: 0, published: 1 });
    expect(await view(env, `forgejo-${there!.id}-1`)).not.toBeNull();
    expect((await view(env, wid))?.state).toBe("backend_ready");
    // Near miss: a job of the Forgejo it is registered at takes it.
    const [here] = await forgejoControl(env).queue([{ runs_on: ["ubuntu-latest"] }]);
    expect(await poll(env)).toMatchObject({ bound: 1, published: 0 });
    expect(await view(env, wid)).toMatchObject({ state: "claimed", handle: here!.handle });
  });

  it("a job waiting for a slot (the backend full) moves to a warm runner that comes up idle: it runs there, its own assignment ends, and no runner of its own is asked for", async () => {
    const { env, forgejo, backend } = await setup({ ...warmPool(), CAPACITY_POD: 1 });
    // The warm runner takes the one slot, and is up only after a while.
    await backend.mode({ token: TEST_SECRETS.BACKEND_TOKEN, readyAfterMs: 1_500 });
    await tick(env);
    const puts = async () =>
      (await backend.state()).requests
        .filter((r) => r.method === "PUT")
        .map((r) => JSON.parse(r.body) as { assignment: { id: string }; claimToken: string; forgejo: { uuid: string } });
    const [w] = await puts();
    expect(w).toBeDefined();
    const wid = w!.assignment.id;
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const own = `forgejo-${job!.id}-1`;
    expect(await poll(env)).toMatchObject({ published: 1, bound: 0, moved: 0 });
    await until(async () => {
      await tick(env);
      return (await view(env, own))?.state === "capacity_wait" && (await view(env, wid))?.state === "backend_ready";
    });
    expect(await poll(env)).toMatchObject({ moved: 1, published: 0 });
    expect(await view(env, own)).toMatchObject({ state: "terminated", reason: `its job went to warm runner ${wid}` });
    const given = await request(env, `/v1/assignments/${wid}/handle`, { headers: bearer(w!.claimToken) });
    expect(await given.text()).toBe(job!.handle);
    const runner = (await forgejo.state()).runners.find((r) => r.uuid === w!.forgejo.uuid)!;
    expect(await runAsRunner(env, runner, ["ubuntu-latest"], job!.handle, null)).toBeGreaterThan(0);
    expect((await forgejo.state()).taken).toEqual([expect.objectContaining({ job: job!.id, runner: `gdr-${wid}` })]);
    await poll(env);
    await tick(env);
    expect(await view(env, wid)).toMatchObject({ state: "claimed" });
    // Its own runner was never asked for, nor registered.
    expect((await puts()).filter((p) => p.assignment.id === own)).toEqual([]);
    expect((await forgejo.state()).runners.filter((r) => r.name === `gdr-${own}`)).toEqual([]);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "moved_to_warm")
        .map((e) => e.assignment),
    ).toEqual([own]);
  });

  it("a job given to a warm runner and cancelled before the runner took it ends that runner too", async () => {
    const labels = JSON.parse(forgejoTestEnv("ws://x:1", "http://b", "http://f").RUNS_ON_ROUTES!)[0].labels as string[];
    const { env, forgejo, backend } = await setup({
      RUNS_ON_ROUTES: "",
      RUNNER_POOLS: JSON.stringify([{ name: "small", backend: "pod", labels, minIdle: 1 }]),
    });
    await until(async () => {
      await tick(env);
      const put = (await backend.state()).requests.find((r) => r.method === "PUT");
      return put !== undefined && (await view(env, JSON.parse(put.body).assignment.id))?.state === "backend_ready";
    });
    const wid = JSON.parse((await backend.state()).requests.find((r) => r.method === "PUT")!.body).assignment.id as string;
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    expect((await poll(env)).bound).toBe(1);
    await forgejo.cancel(job!.id);
    expect((await poll(env)).ended).toBe(1);
    expect((await view(env, wid))?.state).toBe("completed");
    expect((await forgejo.state()).runners.map((r) => r.name)).not.toContain(`gdr-${wid}`);
    expect((await backend.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([expect.stringContaining(wid)]);
  });

  it("the cron tick deletes runners of ours no assignment needs from Forgejo, and tears down a workload whose Forgejo runner is gone; others' runners stay", async () => {
    const { env, forgejo, backend } = await setup({ CLEANUP_GRACE_MS: 0 });
    const rest = (method: string, path: string, body?: unknown) =>
      fetch(`${env.GITEA_URL}/api/v1/admin/actions/runners${path}`, {
        method,
        headers: { authorization: `token ${env.GITEA_API_TOKEN}`, "content-type": "application/json" },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
    // The token may not register at the jobs' repository: their runners are at GITEA_SCOPE, which the cleanup lists.
    await forgejo.fault({ registerRepo: 403 });
    const [job, other] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }, { runs_on: ["ubuntu-latest"] }]);
    await poll(env);
    await until(async () => (await forgejo.state()).runners.length === 2 && (await backend.state()).runners.length === 2);
    // A registration a dead pass never stored, and somebody else's runner.
    await rest("POST", "", { name: "gdr-forgejo-999-1", ephemeral: true });
    await rest("POST", "", { name: "my-own-runner" });
    // Forgejo loses the first job's runner (an administrator deleted it).
    const lost = (await forgejo.state()).runners.find((r) => r.name === `gdr-forgejo-${job!.id}-1`)!;
    expect((await rest("DELETE", `/${lost.id}`)).status).toBe(204);
    await tick(env);
    const names = (await forgejo.state()).runners.map((r) => r.name).sort();
    expect(names).not.toContain("gdr-forgejo-999-1");
    expect(names).toContain("my-own-runner");
    expect(names).toContain(`gdr-forgejo-${other!.id}-1`);
    expect((await backend.state()).requests.filter((r) => r.method === "DELETE").map((r) => r.path)).toEqual([expect.stringContaining(`forgejo-${job!.id}-1`)]);
    expect(
      logs()
        .events()
        .filter((e) => e.event === "runner_deleted")
        .map((e) => e.assignment)
        .sort(),
    ).toEqual([`forgejo-${job!.id}-1`, "forgejo-999-1"].sort());
    // The job still waits: its next delivery registers a runner afresh.
    await until(async () => {
      await tick(env);
      return (await forgejo.state()).runners.some((r) => r.name === `gdr-forgejo-${job!.id}-1`);
    });
    expect((await view(env, `forgejo-${job!.id}-1`))?.giteaRunnerId).not.toBe(lost.id);
  });

  it("rotation: a runner sealed under the previous identity key still launches, and a webhook signed with the previous secret is taken", async () => {
    const { env, forgejo, backend } = await setup();
    await backend.mode({ failRate: 1 });
    const [job] = await forgejo.queue([{ runs_on: ["ubuntu-latest"] }]);
    const id = `forgejo-${job!.id}-1`;
    await poll(env);
    await until(async () => {
      await tick(env);
      return (await backend.state()).requests.some((r) => r.method === "PUT" && r.path.includes(id));
    });
    expect((await view(env, id))?.state).not.toBe("backend_ready");
    await backend.mode({ failRate: 0 });
    const rotated = { ...env, RUNNER_IDENTITY_KEY: base64(new Uint8Array(32).fill(7)) };
    const rotating = {
      ...rotated,
      RUNNER_IDENTITY_KEY_PREVIOUS: env.RUNNER_IDENTITY_KEY!,
      GITEA_WEBHOOK_SECRET: "rotated-webhook-secret-0002",
      GITEA_WEBHOOK_SECRET_PREVIOUS: env.GITEA_WEBHOOK_SECRET!,
    };
    await until(async () => {
      await tick(rotating);
      return (await view(rotating, id))?.state === "backend_ready";
    });
    // Signed with the previous secret: past the signature (the body is what is refused); with neither: 401.
    const body = JSON.stringify({ action: "success", run: { id: "7", status: "success" } });
    const signed = async (secret: string) =>
      request(rotating, "/v1/forgejo/webhook", {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-forgejo-event": "action_run_success",
          "x-forgejo-signature": await hexHmacSha256(secret, new TextEncoder().encode(body)),
        },
        body,
      });
    expect((await signed(TEST_SECRETS.WEBHOOK_SECRET)).status).toBe(400);
    expect((await signed("rotated-webhook-secret-0002")).status).toBe(400);
    expect((await signed("rotated-webhook-secret-0003")).status).toBe(401);
  });

  it("a run webhook that is not Forgejo's payload is a 400 naming the field, and polls nothing", async () => {
    const { env, forgejo } = await setup();
    const body = JSON.stringify({ action: "success", run: { id: "7", status: "success" } });
    const sig = await hexHmacSha256(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(body));
    const res = await request(env, "/v1/forgejo/webhook", {
      method: "POST",
      headers: { "content-type": "application/json", "x-forgejo-event": "action_run_success", "x-forgejo-signature": sig },
      body,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { fields: { field: string }[] }).fields.map((f) => f.field)).toEqual(["run.id"]);
    expect((await forgejo.state()).requests).toEqual([]);
  });
});
