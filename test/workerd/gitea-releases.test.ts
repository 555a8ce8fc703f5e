// Gitea 1.26 and 1.27 deliveries as each sends them (test/fixtures/gitea/releases, read from
// Gitea's source) against the Worker, with the fake Gitea playing the same release: every delivery
// of one execution reaches the assignment its queued made, our runner's and a foreign runner's; a
// rerun is another assignment; a cancel before pickup ends it; the sweep names it the same; a
// release this dispatcher does not know is served as the newest, and said.
import { describe, expect, it } from "vitest";
import { TEST_SECRETS } from "../harness/env.ts";
import { bearer, giteaScene, logsOfEachTest, request, sleep, tick, type giteaControl } from "../harness/worker.ts";
import { deliverJob } from "../harness/jobs.ts";
import { GITEA_RELEASES, releaseDeliveries, type ReleaseScenario } from "../harness/fixtures.ts";
import { streamState } from "../harness/nats.ts";

const logs = logsOfEachTest();
const events = (name: string) =>
  logs()
    .events()
    .filter((e) => e.event === name);

const setup = giteaScene;

const view = async (env: Record<string, string>, id: string) => {
  const res = await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) });
  return res.status === 200 ? ((await res.json()) as { state: string; giteaRunnerId: number | null }) : null;
};

describe.each(GITEA_RELEASES)("Gitea %s deliveries", (version) => {
  /** Delivers a scenario's steps in order, the runner fields made those of the runner Gitea registered for it. */
  async function play(env: Record<string, string>, scenario: ReleaseScenario, runner?: (d: { assignment: string }) => Promise<{ id: number; name: string }>) {
    const answers = [];
    for (const d of releaseDeliveries(version, scenario)) {
      if (d.workflow_job.runner_id !== undefined && runner)
        Object.assign(d.payload.workflow_job, await runner(d).then((r) => ({ runner_id: r.id, runner_name: r.name })));
      answers.push({ assignment: d.assignment, ...(await deliverJob(env, d.payload)) });
      await sleep(20);
    }
    return answers;
  }
  const ours = (gitea: ReturnType<typeof giteaControl>) => async (d: { assignment: string }) => {
    const runner = (await gitea.state()).runners.find((r) => r.name === `gdr-${d.assignment}`);
    expect(runner, `a runner registered for ${d.assignment}`).toBeDefined();
    return runner!;
  };

  it("a first run's queued, in_progress and completed reach one assignment; its rerun is another, run and completed the same way", async () => {
    const { env, gitea, backend } = await setup(version);
    const first = await play(env, "first-run", ours(gitea));
    expect(first.map((a) => [a.status, a.body])).toEqual([
      [202, { assignment: "gitea-1187-1", duplicate: false }],
      [200, { claimed: "gitea-1187-1" }],
      [200, { completed: "gitea-1187-1" }],
    ]);
    const rerun = await play(env, "rerun", ours(gitea));
    const id = rerun[0]!.assignment;
    expect(id).not.toBe("gitea-1187-1");
    expect(rerun.map((a) => [a.status, a.body])).toEqual([
      [202, { assignment: id, duplicate: false }],
      [200, { claimed: id }],
      [200, { completed: id }],
    ]);
    expect([(await view(env, "gitea-1187-1"))?.state, (await view(env, id))?.state]).toEqual(["completed", "completed"]);
    expect((await gitea.state()).registrations).toBe(2);
    await tick(env);
    expect((await backend.state()).runners).toHaveLength(0);
    expect(events("webhook_ignored")).toEqual([]);
  });

  it("a job cancelled before pickup ends its assignment and its runner, in the backend and in Gitea", async () => {
    const { env, gitea, backend } = await setup(version);
    const [queued, completed] = await play(env, "cancel-before-pickup");
    expect(queued!.body).toEqual({ assignment: "gitea-1188-1", duplicate: false });
    expect([completed!.status, completed!.body]).toEqual([200, { cancelled: "gitea-1188-1" }]);
    await sleep(100);
    expect((await view(env, "gitea-1188-1"))?.state).toBe("terminated");
    expect((await backend.state()).runners).toHaveLength(0);
    expect((await gitea.state()).runners).toHaveLength(0);
  });

  it("a foreign runner's in_progress is not ours; its completed reaches the assignment the queued made", async () => {
    const { env, gitea } = await setup(version);
    const foreign = async () => ({ id: 999, name: "someone-else" });
    await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
    const [queued, started, completed] = await play(env, "first-run", foreign);
    expect(queued!.body).toEqual({ assignment: "gitea-1187-1", duplicate: false });
    expect(started!.body).toEqual({ ignored: "runner is not ours" });
    expect(completed!.body).toEqual({ cancelled: "gitea-1187-1" });
  });

  it("the sweep names a job it finds as the webhook would, and a late queued delivery is a duplicate", async () => {
    const { env, gitea } = await setup(version, { GITEA_JOB_PAGES: 1 });
    const { jobs } = await gitea.queue([{ labels: ["ubuntu-latest"] }]);
    await tick(env);
    expect(events("recovered").map((e) => e.assignment)).toEqual([`gitea-${jobs[0]}-1`]);
    await gitea.deliver();
    expect(await streamState(env)).toMatchObject({ messages: 1 });
  });
});

describe("a Gitea release this dispatcher does not know", () => {
  it.each(["1.28.0", "development"])("%s: served as 1.27, said once, never refused", async (version) => {
    const { env } = await setup(version);
    const [queued] = releaseDeliveries("1.27.0", "first-run");
    expect(await deliverJob(env, queued!.payload)).toEqual({ status: 202, body: { assignment: "gitea-1187-1", duplicate: false } });
    const again = structuredClone(queued!.payload);
    again.workflow_job.id = 1189;
    expect((await deliverJob(env, again)).status).toBe(202);
    expect(events("gitea_version_unknown")).toEqual([expect.objectContaining({ reason: expect.stringContaining("served as 1.27") })]);
    // /healthz says which release answers and how it is served; healthy all the same.
    const health = await request(env, "/healthz");
    expect([health.status, ((await health.json()) as { forge: unknown }).forge]).toEqual([
      200,
      { kind: "gitea", version, servedAs: expect.stringContaining("served as 1.27"), ok: true },
    ]);
  });

  it("/healthz names a known release without more", async () => {
    const { env } = await setup("1.26.2");
    expect(((await (await request(env, "/healthz")).json()) as { forge: unknown }).forge).toEqual({ kind: "gitea", version: "1.26.2", ok: true });
  });

  it("GITEA_VERSION pins the release without asking Gitea", async () => {
    const { env, gitea } = await setup("1.27.0", { GITEA_VERSION: "1.26.2" });
    // 1.26's rerun of a row: queued with the count before its pickup, 1, is its second execution.
    const [queued] = releaseDeliveries("1.26.2", "rerun");
    expect(await deliverJob(env, queued!.payload)).toEqual({ status: 202, body: { assignment: "gitea-1187-2", duplicate: false } });
    expect((await gitea.state()).requests.filter((r) => r.path === "/api/v1/version")).toEqual([]);
  });
});

describe("a Gitea whose pages are shorter than asked ([api].MAX_RESPONSE_ITEMS 20)", () => {
  it("the sweep reads on past short pages: a runner of ours on the third page is deleted, a job on the second is found", async () => {
    const { env, gitea } = await setup("1.27.0", { GITEA_JOB_PAGES: 5, CLEANUP_GRACE_MS: 0 });
    await gitea.maxResponseItems(20);
    const theirs = Array.from({ length: 45 }, (_, i) => ({ id: 500 + i, name: `someone-${i}` }));
    await gitea.runners([...theirs, { id: 900, name: "gdr-gitea-9999-1" }]);
    const [queued] = releaseDeliveries("1.27.0", "first-run");
    const job = (id: number) => ({ ...queued!.payload.workflow_job, id, status: id === 3025 ? "queued" : "in_progress" });
    await gitea.jobs(Array.from({ length: 26 }, (_, i) => job(3000 + i)));
    await tick(env);
    expect(events("recovered").map((e) => e.assignment)).toEqual(["gitea-3025-1"]);
    const g = await gitea.state();
    expect(g.runners.map((r) => r.id)).not.toContain(900);
    expect(g.runners.filter((r) => r.name.startsWith("someone-"))).toHaveLength(45);
  });
});
