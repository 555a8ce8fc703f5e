// GET /v1/usage: who used the runners over a window, per owner and repository, from the durable
// records: jobs, runner seconds and queued → running, against what the fake Gitea saw happen.
import { describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, giteaControl, logsOfEachTest, request, runUntil } from "../harness/worker.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
logsOfEachTest();

type Figures = {
  jobs: number;
  runnerSeconds: number;
  queuedToRunning: { count: number; meanSeconds: number | null; p50Seconds: number | null; p95Seconds: number | null };
};
type Usage = {
  since: string;
  until: string;
  scanned: number;
  truncated: boolean;
  owners: (Figures & { owner: string; repositories: (Figures & { repository: string })[] })[];
};

describe("usage per owner", () => {
  it("counts each owner's and repository's jobs, runner seconds and time to running, from the records; owners differing in case are one", async () => {
    const env = giteaTestEnv(nats, backendUrl, giteaUrl, { RETRY_DELAY_MS: 50, CAPACITY_POD: 4, RUNNER_SCOPE: "repository", GITEA_JOB_PAGES: 0 });
    await provisionEnv(env);
    const gitea = giteaControl(env);
    await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
    await backendControl(env).mode({ runner: true, bootMs: 100, fetchIntervalMs: 100, jobMs: 800 });
    const before = new Date(Date.now() - 1_000).toISOString();
    const repos = ["acme/web", "acme/web", "Acme/api", "beta/x"];
    const ids = (await gitea.queue(repos.map((repository) => ({ labels: ["ubuntu-latest"], repository, runMs: 800 })))).jobs;
    await runUntil(env, gitea, async () => (await gitea.actions()).jobs.filter((j) => ids.includes(j.id)).every((j) => j.status === "completed"), 40_000);
    const ask = async (query: string, token = TEST_SECRETS.DISPATCH_TOKEN) => request(env, `/v1/usage${query}`, { headers: bearer(token) });
    const res = await ask(`?since=${before}`);
    expect(res.status).toBe(200);
    const usage = (await res.json()) as Usage;
    expect(usage.truncated).toBe(false);
    // Each test provisions its own stream and buckets: only these jobs are there.
    expect(usage.owners.map((o) => [o.owner, o.jobs, o.repositories.map((r) => [r.repository, r.jobs])])).toEqual([
      [
        "acme",
        3,
        [
          ["acme/api", 1],
          ["acme/web", 2],
        ],
      ],
      ["beta", 1, [["beta/x", 1]]],
    ]);
    // Runner seconds: at least each job's run (a runner lives through its job), and not more than
    // the whole test's time per runner.
    const { jobs } = (await gitea.actions()) as unknown as { jobs: { id: number; repository: string; startedMs: number; completedMs: number }[] };
    const ran = (repo: string) =>
      jobs.filter((j) => ids.includes(j.id) && j.repository.toLowerCase() === repo).reduce((s, j) => s + (j.completedMs - j.startedMs) / 1_000, 0);
    const web = usage.owners[0]!.repositories[1]!;
    expect(web.runnerSeconds).toBeGreaterThanOrEqual(ran("acme/web"));
    expect(web.runnerSeconds).toBeLessThan(2 * 40);
    expect(usage.owners[0]!.runnerSeconds).toBeCloseTo(web.runnerSeconds + usage.owners[0]!.repositories[0]!.runnerSeconds, 2);
    // Every job went from queued to running; none took less than its runner's boot.
    expect(usage.owners[0]!.queuedToRunning.count).toBe(3);
    expect(usage.owners[0]!.queuedToRunning.p50Seconds).toBeGreaterThanOrEqual(0.1);
    expect(usage.owners[1]!.queuedToRunning.count).toBe(1);
    // A window after them is empty; one that ends before them too.
    expect(((await (await ask(`?since=${new Date().toISOString()}&until=${new Date(Date.now() + 60_000).toISOString()}`)).json()) as Usage).owners).toEqual([]);
    expect(((await (await ask(`?since=${new Date(Date.parse(before) - 60_000).toISOString()}&until=${before}`)).json()) as Usage).owners).toEqual([]);
  }, 60_000);

  it("refuses a bad window naming the field, a window older than the records kept, and a token one character off", async () => {
    const env = giteaTestEnv(nats, backendUrl, giteaUrl, {});
    await provisionEnv(env);
    const ask = async (query: string, token: string = TEST_SECRETS.DISPATCH_TOKEN) => request(env, `/v1/usage${query}`, { headers: bearer(token) });
    const fieldsOf = async (query: string) => {
      const res = await ask(query);
      expect(res.status, query).toBe(400);
      return ((await res.json()) as { fields: { field: string; message: string }[] }).fields;
    };
    expect(await fieldsOf("?since=yesterday")).toEqual([{ field: "since", message: expect.stringContaining("RFC 3339") }]);
    expect(await fieldsOf("?until=2026-13-01T00:00:00Z")).toEqual([{ field: "until", message: expect.stringContaining("RFC 3339") }]);
    expect(await fieldsOf("?since=2026-12-01T10:00:00Z&until=2026-12-01T10:00:00Z")).toEqual([{ field: "since", message: "must be before until" }]);
    expect(await fieldsOf(`?since=${new Date(Date.now() - 8 * 86_400_000).toISOString()}`)).toEqual([
      { field: "since", message: expect.stringContaining("7 days records are kept") },
    ]);
    // Just inside the records kept: answered.
    expect((await ask(`?since=${new Date(Date.now() - 7 * 86_400_000 + 60_000).toISOString()}`)).status).toBe(200);
    expect((await ask("", `${TEST_SECRETS.DISPATCH_TOKEN.slice(0, -1)}x`)).status).toBe(401);
    expect((await ask("")).status).toBe(200);
  }, 30_000);
});
