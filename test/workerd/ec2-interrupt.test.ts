// Spot interruptions on the ec2 driver, inside workerd, against the fake EC2 (its IMDS shows the
// notice) and the fake Gitea: before the claim the job gets a replacement (the old instance ends
// first, the old claim token is refused, on-demand as the pool falls back); after the claim the
// job is rerun once, after its run finished (Gitea main), or left to a person (Gitea 1.25); an
// interruption nobody reported is found by the sweep.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS, uniqueName } from "../harness/env.ts";
import { bearer, captureLogs, giteaControl, request, tick, tickUntil, type Captured } from "../harness/worker.ts";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";

const LABELS = ["ubuntu-latest:docker://node:20-bookworm"];
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Instance = { id: string; state: string; userData: string; market: string; stateReason?: string };
type Request = { action?: string; input?: Record<string, unknown>; error?: string };

async function scene(giteaVersion = "1.26.0", capacity = 4) {
  const account = `${inject("ec2Url")}/${uniqueName("ec2")}`;
  const { RUNS_ON_ROUTES: _routes, ...env } = giteaTestEnv(inject("natsWsUrl"), inject("backendUrl"), inject("giteaUrl"), {
    CAPACITY_POD: 0,
    CAPACITY_VM: capacity,
    VM_DRIVER: "ec2",
    EC2_API_URL: `${account}/`,
    EC2_REGION: FAKE_REGION,
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
    VM_TEMPLATE: JSON.stringify({ ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large" }),
    RUNNER_POOLS: JSON.stringify([
      {
        name: "spot",
        backend: "vm",
        labels: LABELS,
        candidates: [
          { InstanceType: "m7i.large", SubnetId: "subnet-0a0a0a0a" },
          { InstanceType: "m6i.large", SubnetId: "subnet-0b0b0b0b" },
        ],
        market: "spot",
        spotFallback: "on-demand",
      },
    ]),
    RETRY_DELAY_MS: 100,
    GITEA_JOB_PAGES: 0,
  });
  await provisionEnv(env);
  const gitea = giteaControl(env);
  await gitea.version(giteaVersion);
  await gitea.webhook({ secret: TEST_SECRETS.WEBHOOK_SECRET });
  const ec2 = async () => (await (await fetch(`${account}/_control/state`)).json()) as { instances: Instance[]; requests: Request[] };
  const interrupt = async (id: string) =>
    expect((await fetch(`${account}/_control/interrupt`, { method: "POST", body: JSON.stringify({ id }) })).status).toBe(200);
  /** What the launch script's watcher does: IMDSv2's notice, POSTed with the claim token. */
  const watcher = async (instanceId: string, token: string, assignment: string) => {
    const imds = `${account}/_imds/${instanceId}`;
    const session = await (await fetch(`${imds}/latest/api/token`, { method: "PUT", headers: { "x-aws-ec2-metadata-token-ttl-seconds": "300" } })).text();
    const notice = await fetch(`${imds}/latest/meta-data/spot/instance-action`, { headers: { "x-aws-ec2-metadata-token": session } });
    expect(notice.status).toBe(200);
    return report(token, assignment, await notice.text());
  };
  const report = (token: string, assignment: string, body: string) =>
    request(env, `/v1/assignments/${assignment}/interrupt`, { method: "POST", headers: bearer(token, true), body });
  /** The launch an instance fetches once: its claim token, and whether it watches for notices. */
  const launchOf = async (i: Instance, assignment: string) => {
    const token = /^token='([A-Za-z0-9_-]{43})'$/m.exec(i.userData)![1]!;
    const res = await request(env, `/v1/assignments/${assignment}/bootstrap`, { method: "POST", headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const script = await res.text();
    const files = Object.fromEntries(
      [...script.matchAll(/printf '%s' '([A-Za-z0-9+/=]+)' \| base64 -d > '([^']+)'/g)].map((m) => [m[2]!.split("/").pop(), atob(m[1]!)]),
    );
    return { claimToken: files["claim-token"]!, script };
  };
  const view = async (id: string) =>
    (await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
      state: string;
      replaced: number;
      interrupted: unknown;
    };
  const running = async () => {
    await tickUntil(env, async () => (await ec2()).instances.some((i) => i.state === "running"), { timeoutMs: 10_000 });
  };
  return { env, gitea, ec2, interrupt, watcher, report, launchOf, view, running };
}

describe("spot interruptions on the ec2 driver", () => {
  it("before the claim: the old instance ends first, its token is refused, and the job starts on an on-demand replacement", { timeout: 90_000 }, async () => {
    const s = await scene();
    const { jobs } = await s.gitea.queue([{ labels: ["ubuntu-latest"] }]);
    const id = `gitea-${jobs[0]}-1`;
    await s.gitea.deliver();
    await s.running();
    const [first] = (await s.ec2()).instances;
    expect(first!.market).toBe("spot");
    const old = await s.launchOf(first!, id);
    expect(old.script).toContain("spot/instance-action");
    expect(old.script).toContain(`/v1/assignments/${id}/interrupt`);
    await s.interrupt(first!.id);

    const told = await s.watcher(first!.id, old.claimToken, id);
    expect(told.status).toBe(200);
    expect(((await told.json()) as { outcome: string }).outcome).toBe("replaced");
    // The same report again changes nothing; the replaced runner's claim is refused; a notice without its time is a 400 naming the field.
    const notice = JSON.stringify({ action: "terminate", time: "2026-12-06T01:19:48Z" });
    expect(((await (await s.report(old.claimToken, id, notice)).json()) as { outcome: string }).outcome).toBe("over");
    const bad = await s.report(old.claimToken, id, JSON.stringify({ action: "terminate" }));
    expect([bad.status, JSON.stringify(await bad.json())]).toEqual([400, expect.stringContaining('"field":"time"')]);

    expect((await request(s.env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(old.claimToken) })).status).toBe(403);

    await tickUntil(s.env, async () => (await s.ec2()).instances.length === 2, { timeoutMs: 40_000 });
    const { instances, requests } = await s.ec2();
    expect(instances.map((i) => [i.id === first!.id ? "old" : "new", i.market, i.state === "terminated"])).toEqual([
      ["old", "spot", true],
      ["new", "on-demand", false],
    ]);
    // One runner at a time: the old instance was ended before the new one was asked for.
    const order = requests.filter((r) => r.action === "TerminateInstances" || (r.action === "RunInstances" && !r.error)).map((r) => r.action);
    expect(order).toEqual(["RunInstances", "TerminateInstances", "RunInstances"]);
    expect(requests.filter((r) => r.error)).toEqual([]);
    const fresh = await s.launchOf(instances[1]!, id);
    expect((await request(s.env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(fresh.claimToken) })).status).toBe(200);
    expect((await s.view(id)).replaced).toBe(1);
    // The job ran once, on the replacement; nothing is left running.
    expect((await request(s.env, `/v1/assignments/${id}/complete`, { method: "POST", headers: bearer(fresh.claimToken) })).status).toBe(200);
    await tickUntil(s.env, async () => (await s.ec2()).instances.every((i) => i.state === "terminated"), { timeoutMs: 10_000 });
    expect((await s.ec2()).instances.map((i) => i.state)).toEqual(["terminated", "terminated"]);
    expect(logs.events().filter((e) => e.event === "interrupted_before_claim")).toHaveLength(1);
    for (const line of logs.lines) expect(line).not.toContain(old.claimToken);
  });

  it.each(["1.26.2", "1.27.0"])(
    "after the claim on Gitea %s: the job is rerun once, after its run finished, on on-demand; at CAPACITY_VM 1 its slot is back at once",
    async (version) => {
      // One slot: the rerun's runner is asked for only if the report gave the lost job's slot back (its lease is hours).
      const s = await scene(version, 1);
      const { jobs } = await s.gitea.queue([{ labels: ["ubuntu-latest"] }]);
      const job = jobs[0]!;
      const id = `gitea-${job}-1`;
      await s.gitea.deliver();
      await s.running();
      const [first] = (await s.ec2()).instances;
      const { claimToken } = await s.launchOf(first!, id);
      // The runner takes its job in Gitea (1.26 numbers the row's attempt then) and claims it.
      expect(await s.gitea.pickup(`gdr-${id}`)).toEqual({ job });
      expect((await request(s.env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(claimToken) })).status).toBe(200);
      await s.interrupt(first!.id);
      const told = await s.watcher(first!.id, claimToken, id);
      expect(((await told.json()) as { outcome: string }).outcome).toBe("lost");
      expect((await s.view(id)).state).toBe("terminated");
      expect((await s.ec2()).instances[0]!.state).toBe("terminated");

      // Not before the run finished: Gitea refuses a rerun then.
      await tick(s.env);
      await tick(s.env);
      const actions = async () =>
        (await (await fetch(`${s.env.GITEA_URL}/_control/actions`)).json()) as { reruns: number; jobs: { id: number; status: string; run_attempt: number }[] };
      expect((await actions()).reruns).toBe(0);
      // Gitea gives up on the lost task (its zombie timeout): the run fails, and the job is rerun once.
      await fetch(`${s.env.GITEA_URL}/_control/fail-lost`, { method: "POST", body: JSON.stringify({ id: job }) });
      for (let i = 0; i < 3; i++) await tick(s.env);
      expect((await actions()).reruns).toBe(1);
      expect(logs.events().filter((e) => e.event === "rerun_asked")).toHaveLength(1);

      // The rerun is a new assignment (1.26: the same job's second execution; 1.27: the job's copy in attempt 2), on on-demand.
      const queued = (await actions()).jobs.find((j) => j.status === "queued")!;
      const rerun = `gitea-${queued.id}-2`;
      expect(queued.id === job).toBe(version.startsWith("1.26"));
      await s.gitea.deliver();
      await tickUntil(s.env, async () => (await s.ec2()).instances.length === 2, { timeoutMs: 20_000 });
      const second = (await s.ec2()).instances[1]!;
      expect(second.market).toBe("on-demand");
      // The rerun runs and completes; no tick asks again, and nothing is left running.
      await tickUntil(s.env, async () => (await s.ec2()).instances[1]!.state === "running", { timeoutMs: 10_000 });
      const again = await s.launchOf((await s.ec2()).instances[1]!, rerun);
      for (const step of ["claim", "complete"])
        expect((await request(s.env, `/v1/assignments/${rerun}/${step}`, { method: "POST", headers: bearer(again.claimToken) })).status).toBe(200);
      for (let i = 0; i < 3; i++) await tick(s.env);
      expect((await actions()).reruns).toBe(1);
      expect((await s.ec2()).instances.map((i) => i.state)).toEqual(["terminated", "terminated"]);
    },
  );

  it("after the claim on Gitea 1.25 (no rerun endpoint): the job is left to a person, said by an event, the status and a metric", async () => {
    const s = await scene("1.25.0");
    const env: Record<string, string> = { ...s.env, METRICS_TOKEN: "metrics-token-0000000", STATUS_TOKEN: "status-token-0123456789abcdef" };
    const { jobs } = await s.gitea.queue([{ labels: ["ubuntu-latest"] }]);
    const id = `gitea-${jobs[0]}-1`;
    await s.gitea.deliver();
    await s.running();
    const [first] = (await s.ec2()).instances;
    const { claimToken } = await s.launchOf(first!, id);
    expect((await request(env, `/v1/assignments/${id}/claim`, { method: "POST", headers: bearer(claimToken) })).status).toBe(200);
    await s.interrupt(first!.id);
    expect(((await (await s.watcher(first!.id, claimToken, id)).json()) as { outcome: string }).outcome).toBe("lost");
    await fetch(`${env.GITEA_URL}/_control/fail-lost`, { method: "POST", body: JSON.stringify({ id: jobs[0] }) });
    await tick(env);
    expect(
      logs
        .events()
        .filter((e) => e.event === "rerun_by_hand")
        .map((e) => e.assignment),
    ).toEqual([id]);
    const metrics = await (await request(env, "/metrics", { headers: bearer("metrics-token-0000000") })).text();
    expect(metrics).toContain('gdr_interruptions_total{pool="spot",when="after_claim"} 1');
    expect(metrics).toContain('gdr_reruns{state="by_hand"} 1');
    const page = await (await request(env, "/status", { headers: { authorization: `Basic ${btoa("ops:status-token-0123456789abcdef")}` } })).text();
    expect(page).toContain("Interrupted after it started; rerun it by hand:");
    expect(page).toContain(`<a href="${env.GITEA_URL}/acme/widgets/actions/runs/${jobs[0]}">acme/widgets run ${jobs[0]}</a> (${id})`);
  });

  it("an interruption nobody reported (no watcher) is found by the sweep from EC2's StateReason; another end is none", { timeout: 60_000 }, async () => {
    const s = await scene();
    const { jobs } = await s.gitea.queue([{ labels: ["ubuntu-latest"] }, { labels: ["ubuntu-latest"] }]);
    const [spot, other] = jobs.map((j) => `gitea-${j}-1`);
    await s.gitea.deliver();
    await tickUntil(s.env, async () => (await s.ec2()).instances.filter((i) => i.state === "running").length === 2, { timeoutMs: 10_000 });
    const tagged = (await s.ec2()).instances as (Instance & { tags: Record<string, string> })[];
    const of = (id: string) => tagged.find((i) => i.tags["gdr-assignment"] === id)!;
    // EC2 took one back, and the watcher never told; the other ended as an instance can for other reasons.
    const account = s.env.EC2_API_URL!.replace(/\/$/, "");
    const end = (id: string, stateReason: string) => fetch(`${account}/_control/end`, { method: "POST", body: JSON.stringify({ id, stateReason }) });
    await end(of(spot!).id, "Server.SpotInstanceTermination");
    await end(of(other!).id, "Client.UserInitiatedShutdown");
    await tickUntil(s.env, async () => (await s.view(spot!)).interrupted !== null, { timeoutMs: 20_000 });
    expect((await s.view(spot!)).interrupted).toMatchObject({ by: "sweep", claimed: false });
    expect((await s.view(other!)).interrupted).toBeNull();
    await tickUntil(s.env, async () => (await s.ec2()).instances.length === 3, { timeoutMs: 20_000 });
    expect((await s.ec2()).instances[2]!.market).toBe("on-demand");
    for (let i = 0; i < 3; i++) await tick(s.env);
    expect(
      logs
        .events()
        .filter((e) => e.event === "interrupted_before_claim")
        .map((e) => e.assignment),
    ).toEqual([spot]);
  });
});
