// The hetzner driver inside workerd, from webhook to deletion: a server per job whose user_data
// holds only the bootstrap URL and a one-time token; the server fetches its launch once (the
// runner's identity, 0600, and its command), a second fetch is refused; in_progress claims it,
// completed deletes it, and nothing is left running or written in a log.
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

const deliver = deliverJob;

/** A vm backend on the hetzner driver, on a fake project of its own. */
function hetznerEnv(project: string, template: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return giteaTestEnv(nats, inject("backendUrl"), inject("giteaUrl"), {
    CAPACITY_POD: 0,
    CAPACITY_VM: 2,
    VM_DRIVER: "hetzner",
    HCLOUD_API_URL: project,
    HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
    VM_TEMPLATE: JSON.stringify(template),
    RUNS_ON_ROUTES: JSON.stringify([{ backend: "vm", labels: ["ubuntu-latest:docker://node:20-bookworm"] }]),
    ...extra,
  });
}

type Server = { id: number; name: string; userData: string; labels: Record<string, string> };

describe("hetzner driver in workerd", () => {
  it("runs a Gitea job from webhook to deletion; the identity only through a one-time bootstrap", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    const env = hetznerEnv(project, { image: "ubuntu-24.04", server_type: "cx22", location: "fsn1", labels: { team: "ci" } });
    await provisionEnv(env);
    const hz = async (what: string) => (await (await fetch(`${project}/_control/${what}`)).json()) as { servers: Server[]; deleted: Server[] };

    expect(await deliver(env, queuedFixture)).toEqual({ status: 202, body: { assignment: "gitea-1187-1", duplicate: false } });
    const [server, ...others] = (await hz("state")).servers;
    expect(others).toEqual([]);
    expect(server!.name).toMatch(/^gdr-[0-9a-f]{6}-gitea-1187-1$/);
    expect(server!.labels).toMatchObject({ team: "ci", "managed-by": "gitea-edge-dispatcher", "gdr-assignment": "gitea-1187-1", "gdr-backend": "vm" });
    const registered = (await giteaControl(env).state()).runners[0]!;
    expect(server!.userData).not.toContain(registered.token);
    expect(server!.userData).toContain("https://dispatch.example.org/v1/assignments/gitea-1187-1/bootstrap");
    const token = /^token='([A-Za-z0-9_-]{43})'$/m.exec(server!.userData)![1]!;

    // The server boots and fetches its launch: once, with its token; a near miss gets nothing and spends nothing.
    const fetchLaunch = (t: string, id = "gitea-1187-1") =>
      request(env, `/v1/assignments/${id}/bootstrap`, { method: "POST", headers: { authorization: `Bearer ${t}` } });
    expect((await fetchLaunch(token.slice(0, -1) + (token.endsWith("A") ? "B" : "A"))).status).toBe(404);
    expect((await fetchLaunch(token, "gitea-1188-1")).status).toBe(404);
    expect((await request(env, "/v1/assignments/gitea-1187-1/bootstrap", { method: "POST" })).status).toBe(401);
    const launch = await fetchLaunch(token);
    expect(launch.status).toBe(200);
    expect(launch.headers.get("content-type")).toMatch(/^text\/x-shellscript/);
    const script = await launch.text();
    const files = [...script.matchAll(/printf '%s' '([A-Za-z0-9+/=]+)' \| base64 -d > '([^']+)'/g)].map((m) => [m[2], atob(m[1]!)]);
    expect(Object.fromEntries(files)["/etc/gitea-runner/.runner"]).toContain(registered.token);
    expect(script).toContain("umask 077");
    expect((await fetchLaunch(token)).status).toBe(404);

    const ours = { runner_id: registered.id, runner_name: "gdr-gitea-1187-1" };
    expect((await deliver(env, withJob(inProgressFixture, 1187, ours))).body).toEqual({ claimed: "gitea-1187-1" });
    expect((await deliver(env, withJob(completedFixture, 1187, ours))).body).toEqual({ completed: "gitea-1187-1" });
    const after = await hz("state");
    expect(after.servers).toEqual([]);
    expect(after.deleted.map((s) => s.labels["gdr-assignment"])).toEqual(["gitea-1187-1"]);
    const view = (await (await request(env, "/v1/assignments/gitea-1187-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string };
    expect(view.state).toBe("completed");
    for (const line of logs.lines) {
      expect(line).not.toContain(registered.token);
      expect(line).not.toContain(token);
    }
  });

  it("a full project is a full backend: backend_full, no server, gdr_backend_full 1; nothing in the log is an error", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    await fetch(`${project}/_control/mode`, { method: "POST", body: JSON.stringify({ serverLimit: 0 }) });
    const env = hetznerEnv(project, { image: "ubuntu-24.04", server_type: "cx22" }, { METRICS_TOKEN: "metrics-token-0000000" });
    await provisionEnv(env);
    expect((await deliver(env, queuedFixture)).status).toBe(202);
    const full = logs.events().filter((e) => e.event === "backend_full");
    expect(full.map((e) => [e.assignment, e.backend])).toEqual([["gitea-1187-1", "vm"]]);
    expect(logs.events().filter((e) => e.event === "backend_auth")).toEqual([]);
    expect(((await (await fetch(`${project}/_control/state`)).json()) as { servers: unknown[] }).servers).toEqual([]);
    const metrics = await (await request(env, "/metrics", { headers: bearer("metrics-token-0000000") })).text();
    expect(metrics).toContain('gdr_backend_full{backend="vm"} 1');
    expect(metrics).toContain('gdr_backend_full_total{backend="vm"} 1');
  });

  it("a server type Hetzner refuses (422 invalid_input) is named by pool and field in the event and /healthz, and asked again only once a minute", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    const {
      RUNS_ON_ROUTES: _r,
      RETRY_DELAY_MS: _d,
      ...env
    } = hetznerEnv(
      project,
      { image: "ubuntu-24.04", server_type: "cx22" },
      {
        RUNNER_POOLS: JSON.stringify([
          { name: "big", backend: "vm", labels: ["ubuntu-latest:docker://node:20-bookworm"], candidates: [{ server_type: "cx999", location: "fsn1" }] },
        ]),
      },
    );
    await provisionEnv(env);
    expect((await deliver(env, queuedFixture)).status).toBe(202);
    const variable = 'RUNNER_POOLS pool "big" candidates[0].server_type';
    const refused = logs.events().filter((e) => e.event === "backend_refused");
    expect(refused.map((e) => [e.assignment, e.reason])).toEqual([
      ["gitea-1187-1", `Hetzner refused ${variable} = "cx999" (422 invalid_input: server type cx999 not found)`],
    ]);
    // Not transient: the next look is a minute away, not the backend retry's 15 s.
    expect(logs.events().find((e) => e.event === "backend_retry" && e.assignment === "gitea-1187-1")?.retryDelayMs).toBe(60_000);
    const health = await request(env, "/healthz");
    expect(health.status).toBe(503);
    expect(((await health.json()) as { problems: string[] }).problems).toEqual([
      expect.stringMatching(new RegExp(`^backend vm: .*; fix ${variable.replace(/[[\]"]/g, "\\$&")}$`)),
    ]);
    expect(((await (await fetch(`${project}/_control/state`)).json()) as { servers: unknown[] }).servers).toEqual([]);
    expect(logs.events().filter((e) => e.event === "error")).toEqual([]);
  });

  it("a server that never fetches its launch is said (launch_not_fetched, with its cost) and counted well before its boot timeout; one that fetched it is not", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    // bootTimeoutMs at its floor: the launch is due at half of it, 5 s.
    const pool = { name: "small", backend: "vm", labels: ["ubuntu-latest:docker://node:20-bookworm"], bootTimeoutMs: 10_000 };
    const { RUNS_ON_ROUTES: _r, ...env } = hetznerEnv(
      project,
      { image: "ubuntu-24.04", server_type: "cx22" },
      { RUNNER_POOLS: JSON.stringify([pool]), METRICS_TOKEN: "metrics-token-0000000" },
    );
    await provisionEnv(env);
    expect((await deliver(env, queuedFixture)).status).toBe(202);
    expect((await deliver(env, withJob(queuedFixture, 1188))).status).toBe(202);
    const servers = ((await (await fetch(`${project}/_control/state`)).json()) as { servers: Server[] }).servers;
    // The second server boots and fetches its launch; the first never does.
    const fetched = servers.find((x) => x.labels["gdr-assignment"] === "gitea-1188-1")!;
    const token = /^token='([A-Za-z0-9_-]{43})'$/m.exec(fetched.userData)![1]!;
    expect((await request(env, "/v1/assignments/gitea-1188-1/bootstrap", { method: "POST", headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const late = () => logs.events().filter((e) => e.event === "launch_not_fetched");
    await tickUntil(env, async () => late().length > 0, { timeoutMs: 15_000, pauseMs: 500 });
    expect(late().map((e) => [e.assignment, e.pool])).toEqual([["gitea-1187-1", "small"]]);
    expect(String(late()[0]!.reason)).toContain("billed until its boot timeout (10 s), at least a started hour on Hetzner");
    for (let i = 0; i < 3; i++) await tick(env);
    expect(late()).toHaveLength(1);
    const metrics = await (await request(env, "/metrics", { headers: bearer("metrics-token-0000000") })).text();
    expect(metrics).toContain('gdr_pool_launches_missed_total{pool="small"} 1');
  });

  it("a server whose delete failed at completion goes at the next cron tick: the driver's sweep runs there", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    const env = hetznerEnv(project, { image: "ubuntu-24.04", server_type: "cx22" });
    await provisionEnv(env);
    const servers = async () => ((await (await fetch(`${project}/_control/state`)).json()) as { servers: Server[] }).servers;
    expect((await deliver(env, queuedFixture)).status).toBe(202);
    const registered = (await giteaControl(env).state()).runners[0]!;
    const ours = { runner_id: registered.id, runner_name: "gdr-gitea-1187-1" };
    expect((await deliver(env, withJob(inProgressFixture, 1187, ours))).body).toEqual({ claimed: "gitea-1187-1" });
    // The delete at completion fails, and so does the teardown retry of the tick: the sweep is what deletes it.
    await fetch(`${project}/_control/mode`, { method: "POST", body: JSON.stringify({ failFirst: 2 }) });
    expect((await deliver(env, withJob(completedFixture, 1187, ours))).body).toEqual({ completed: "gitea-1187-1" });
    expect(await servers()).toHaveLength(1);
    await tick(env);
    expect(await servers()).toEqual([]);
    expect(
      logs
        .events()
        .filter((e) => e.event === "orphan_deleted")
        .map((e) => [e.assignment, e.reason]),
    ).toEqual([["gitea-1187-1", "its assignment has ended"]]);
  });

  it("a server type this project cannot create is named in /healthz by pool and field after the first cron tick, before any job; the fixed configuration is well at once", async () => {
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    const pool = (server_type: string) => ({ name: "big", backend: "vm", labels: ["big"], candidates: [{ server_type, location: "fsn1" }] });
    const { RUNS_ON_ROUTES: _r, ...env } = hetznerEnv(
      project,
      { image: "ubuntu-24.04", server_type: "cx22" },
      { RUNNER_POOLS: JSON.stringify([pool("cx999")]) },
    );
    await provisionEnv(env);
    const before = await request(env, "/healthz");
    expect([before.status, await before.json()]).toMatchObject([200, {}]);
    await tick(env);
    const health = await request(env, "/healthz");
    expect(health.status).toBe(503);
    const variable = 'RUNNER_POOLS pool "big" candidates[0].server_type';
    expect(((await health.json()) as { problems: string[] }).problems).toEqual([
      `backend vm: ${variable} = "cx999" is no server type the project can create (cax11, cax21, ccx13, cpx21, cpx31, cx22, cx32, cx42); fix ${variable}`,
    ]);
    const state = (await (await fetch(`${project}/_control/state`)).json()) as { servers: unknown[]; requests: { method: string; path: string }[] };
    expect(state.servers).toEqual([]);
    expect(state.requests.filter((r) => r.method === "POST")).toEqual([]);
    // Redeployed with the name fixed: the offer the tick kept says so, with no tick between.
    const fixed = await request({ ...env, RUNNER_POOLS: JSON.stringify([pool("cx22")]) }, "/healthz");
    expect([fixed.status, ((await fixed.json()) as { problems: string[] }).problems]).toEqual([200, []]);
  });
});
