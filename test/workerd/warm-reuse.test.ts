// Warm by reuse, in workerd against the fake Hetzner and the fake Gitea: a pool with reuse:
// "rebuild" rebuilds a finished job's server at once, as a warm runner of the pool (a fresh disk,
// a new one-time bootstrap). The next job starts on it with no create and no rebuild in its path:
// its own runner is never made. A server that ran a job is rebuilt before any other job runs on
// it (one rebuild per job after the first). Unused, the warm runner is given up warmUntil before
// its paid hour ends, and its server deleted before the next hour is billed.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS, uniqueName } from "../harness/env.ts";
import { bearer, captureLogs, giteaControl, request, tick, tickUntil, type Captured } from "../harness/worker.ts";
import { completedFixture, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";
import { deliverJob, withJob } from "../harness/jobs.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";

const nats = inject("natsWsUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());
const named = (event: string) => logs.events().filter((e) => e.event === event);

type Server = { id: number; name: string; userData: string; rebuilds: number; labels: Record<string, string> };
type View = { state: string; warm: boolean; giteaRunnerId: number | null; reason: string | null };

const LABELS = ["ubuntu-latest:docker://node:20-bookworm"];
const WARM_UNTIL_MS = 9 * 60_000;
const METRICS_TOKEN = "metrics-token-0123456789abcdef";
const STATUS_TOKEN = "status-token-0123456789abcdef";

async function scene(pool: Record<string, unknown> = {}) {
  const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
  const { RUNS_ON_ROUTES: _routes, ...env } = giteaTestEnv(nats, inject("backendUrl"), inject("giteaUrl"), {
    CAPACITY_POD: 0,
    CAPACITY_VM: 2,
    RETRY_DELAY_MS: 50,
    METRICS_TOKEN,
    STATUS_TOKEN,
    VM_DRIVER: "hetzner",
    HCLOUD_API_URL: project,
    HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
    VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" }),
  });
  const pools = [{ name: "vms", backend: "vm", labels: LABELS, reuse: "rebuild", warmUntil: WARM_UNTIL_MS, ...pool }];
  const vars = { ...env, RUNNER_POOLS: JSON.stringify(pools) };
  await provisionEnv(vars);
  const hz = async () => (await (await fetch(`${project}/_control/state`)).json()) as { servers: Server[]; deleted: Server[] };
  const view = async (id: string) => (await (await request(vars, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as View;
  // The servers' paid hours begin 50 minutes 20 seconds ago: 9 min 40 s are left of the first, and
  // a warm runner made now is given up about 40 s on (warmUntil before the hour's end).
  await fetch(`${project}/_control/clock`, { method: "POST", body: JSON.stringify({ advanceMs: -(50 * 60_000 + 20_000) }) });
  return { env: vars, hz, view, gitea: giteaControl(vars) };
}

describe("warm by reuse (hetzner, reuse: rebuild)", () => {
  it("a finished job's server is rebuilt at once as a warm runner; the next job runs on it with no create or rebuild in its path; unused, it is deleted before its next hour", async () => {
    const { env, hz, view, gitea } = await scene();
    // Job 1: a server is created for it.
    expect((await deliverJob(env, withJob(queuedFixture, 2101))).status).toBe(202);
    const [server] = (await hz()).servers;
    expect(server).toMatchObject({ rebuilds: 0 });
    const runnerOf = async (id: string) => (await view(id)).giteaRunnerId!;
    const first = { runner_id: await runnerOf("gitea-2101-1"), runner_name: "gdr-gitea-2101-1" };
    expect((await deliverJob(env, withJob(inProgressFixture, 2101, first))).body).toEqual({ claimed: "gitea-2101-1" });
    expect((await deliverJob(env, withJob(completedFixture, 2101, first))).body).toEqual({ completed: "gitea-2101-1" });

    // Its server was parked, and rebuilt straight away for a warm runner of the pool (no tick needed).
    const rebuiltOnce = await hz();
    expect(rebuiltOnce.servers.map((s) => [s.id, s.rebuilds])).toEqual([[server!.id, 1]]);
    expect(rebuiltOnce.deleted).toEqual([]);
    const warm = named("warm_reuse_filled")[0]!.assignment!;
    expect(await view(warm)).toMatchObject({ warm: true, state: "backend_pending" });
    // The server boots from the rebuild and fetches its launch, once, with the rebuild's token: its runner is up.
    const token = /^token='([A-Za-z0-9_-]{43})'$/m.exec(rebuiltOnce.servers[0]!.userData)![1]!;
    const launch = await request(env, `/v1/assignments/${warm}/bootstrap`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
    expect(launch.status).toBe(200);
    await launch.body?.cancel();
    // Seen as such: on /v1/status and /metrics, warm and by reuse.
    const status = (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { pools: { pool: string }[] };
    expect(status.pools.find((p) => p.pool === "vms")).toMatchObject({ warm: 1, warmByReuse: 1, idle: 1, booting: 0 });
    const metrics = await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text();
    expect(metrics.split("\n")).toContain('gdr_pool_warm_by_reuse_runners{pool="vms"} 1');

    // Job 2: it waits its grace for the warm runner, which takes it.
    expect((await deliverJob(env, withJob(queuedFixture, 2102))).status).toBe(202);
    expect(named("warm_grace").map((e) => e.assignment)).toContain("gitea-2102-1");
    const onWarm = { runner_id: await runnerOf(warm), runner_name: `gdr-${warm}` };
    expect((await deliverJob(env, withJob(inProgressFixture, 2102, onWarm))).body).toEqual({ claimed: warm });
    await tickUntil(env, async () => (await view("gitea-2102-1")).state === "terminated", { timeoutMs: 10_000 });
    // Its own runner was never made: no server created, none rebuilt for it.
    expect(await view("gitea-2102-1")).toMatchObject({ state: "terminated", giteaRunnerId: null });
    const during = await hz();
    expect(during.servers.map((s) => [s.id, s.rebuilds])).toEqual([[server!.id, 1]]);

    // Job 2 done: the server is rebuilt again at once (one rebuild per job since its create).
    expect((await deliverJob(env, withJob(completedFixture, 2102, onWarm))).body).toEqual({ completed: warm });
    expect((await hz()).servers.map((s) => [s.id, s.rebuilds])).toEqual([[server!.id, 2]]);
    const next = named("warm_reuse_filled")[1]!.assignment!;
    expect(next).not.toBe(warm);

    // Nobody takes it: at warmUntil before the hour's end it is given up and its server deleted.
    await tickUntil(env, async () => (await hz()).servers.length === 0, { timeoutMs: 90_000, pauseMs: 1_000 });
    const after = await hz();
    expect(after.servers).toEqual([]);
    expect(after.deleted.map((s) => [s.id, s.rebuilds])).toEqual([[server!.id, 2]]);
    expect(named("warm_hour_end").map((e) => e.assignment)).toEqual([next]);
    expect(await view(next)).toMatchObject({ state: "terminated" });
    // And not parked again for another warm runner.
    await tick(env);
    expect(named("warm_reuse_filled")).toHaveLength(2);
    expect(JSON.stringify(await gitea.state())).not.toContain(`"name":"gdr-${next}"`);

    // Counted: job 1 started on a new server, job 2 on a warm one by reuse; the server's paid hour, used and given up at its delete.
    type Figures = {
      pools: { pool: string; startup: { count: number; via?: Record<string, { count: number }> } | null }[];
      cloud: { paid?: { pool: string; servers: number; used: number; givenUp: number }[] }[];
    };
    const figures = (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as Figures;
    const vms = figures.pools.find((p) => p.pool === "vms")!;
    expect(vms.startup).toMatchObject({ count: 2, via: { new: { count: 1 }, reuse: { count: 1 } } });
    expect(Object.keys(vms.startup!.via!).sort()).toEqual(["new", "reuse"]);
    const [paid] = figures.cloud[0]!.paid!;
    expect(paid).toMatchObject({ pool: "vms", servers: 1 });
    // Deleted in its first hour, warmUntil (9 min) or a little less before its end.
    expect(paid!.used + paid!.givenUp).toBeCloseTo(3_600, 0);
    expect(paid!.givenUp).toBeGreaterThan(WARM_UNTIL_MS / 1_000 - 60);
    expect(paid!.givenUp).toBeLessThanOrEqual(WARM_UNTIL_MS / 1_000);
    const lines = (await (await request(env, "/metrics", { headers: bearer(METRICS_TOKEN) })).text()).split("\n");
    expect(lines).toContain('gdr_job_startup_by_via_duration_seconds_count{pool="vms",via="reuse"} 1');
    expect(lines).toContain('gdr_backend_servers_deleted_total{backend="vm",pool="vms"} 1');
    const page = await (await request(env, "/status", { headers: { authorization: `Basic ${btoa(`ops:${STATUS_TOKEN}`)}` } })).text();
    expect(page).toMatch(/<td>warm by reuse<\/td><td class="n">1<\/td>/);
  }, 150_000);

  it.each([
    [60_000, "waits for it: no server of its own"],
    [0, "(near miss, waitForReuseMs 0) asks for a server of its own: a create"],
  ])("a job queued while its pool's server is being rebuilt, waitForReuseMs %i, %s", async (waitForReuseMs) => {
    const { env, hz, view } = await scene({ waitForReuseMs });
    expect((await deliverJob(env, withJob(queuedFixture, 2201))).status).toBe(202);
    const first = { runner_id: (await view("gitea-2201-1")).giteaRunnerId!, runner_name: "gdr-gitea-2201-1" };
    await deliverJob(env, withJob(inProgressFixture, 2201, first));
    await deliverJob(env, withJob(completedFixture, 2201, first));
    const warm = named("warm_reuse_filled")[0]!.assignment!;
    // Its server is being rebuilt: the warm runner has not fetched its launch.
    expect(await view(warm)).toMatchObject({ state: "backend_pending" });
    expect((await deliverJob(env, withJob(queuedFixture, 2202))).status).toBe(202);
    const servers = (await hz()).servers;
    if (waitForReuseMs > 0) {
      expect(named("warm_grace").map((e) => e.assignment)).toContain("gitea-2202-1");
      expect(servers).toHaveLength(1);
      expect(await view("gitea-2202-1")).toMatchObject({ state: "received", giteaRunnerId: null });
    } else {
      expect(named("warm_grace")).toEqual([]);
      expect(servers).toHaveLength(2);
    }
  });
});
