// The ec2 driver inside workerd (its SigV4 signer and XML parser run there), from webhook to
// termination: an instance per job whose UserData holds only the bootstrap URL and a one-time
// token; the instance fetches its launch once; in_progress claims it, completed terminates it, and
// nothing is left running or written in a log. The account's limit is a full backend.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaTestEnv, provisionEnv, TEST_SECRETS, uniqueName } from "../harness/env.ts";
import { bearer, captureLogs, giteaControl, request, type Captured } from "../harness/worker.ts";
import { completedFixture, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";
import { deliverJob, withJob } from "../harness/jobs.ts";
import { FAKE_AWS, FAKE_REGION } from "../../scripts/fake-ec2.mjs";

const nats = inject("natsWsUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

/** A vm backend on the ec2 driver, on a fake account of its own. */
function ec2Env(account: string, extra: Record<string, unknown> = {}) {
  return giteaTestEnv(nats, inject("backendUrl"), inject("giteaUrl"), {
    CAPACITY_POD: 0,
    CAPACITY_VM: 2,
    VM_DRIVER: "ec2",
    EC2_API_URL: `${account}/`,
    EC2_REGION: FAKE_REGION,
    AWS_ACCESS_KEY_ID: FAKE_AWS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: FAKE_AWS.secretAccessKey,
    VM_TEMPLATE: JSON.stringify({ ImageId: "ami-0123456789abcdef0", InstanceType: "m7i.large", Tags: { team: "ci" } }),
    RUNS_ON_ROUTES: JSON.stringify([{ backend: "vm", labels: ["ubuntu-latest:docker://node:20-bookworm"] }]),
    ...extra,
  });
}

type Instance = { id: string; state: string; userData: string; tags: Record<string, string>; market: string };

describe("ec2 driver in workerd", () => {
  it("runs a Gitea job from webhook to termination; the identity only through a one-time bootstrap", async () => {
    const account = `${inject("ec2Url")}/${uniqueName("ec2")}`;
    const env = ec2Env(account);
    await provisionEnv(env);
    const state = async () => (await (await fetch(`${account}/_control/state`)).json()) as { instances: Instance[]; requests: { error?: string }[] };

    expect((await deliverJob(env, queuedFixture)).status).toBe(202);
    const [instance, ...others] = (await state()).instances;
    expect(others).toEqual([]);
    expect(instance!.tags).toMatchObject({ team: "ci", "managed-by": "gitea-edge-dispatcher", "gdr-assignment": "gitea-1187-1", "gdr-backend": "vm" });
    const registered = (await giteaControl(env).state()).runners[0]!;
    expect(instance!.userData).not.toContain(registered.token);
    expect(instance!.userData).toContain("https://dispatch.example.org/v1/assignments/gitea-1187-1/bootstrap");
    const token = /^token='([A-Za-z0-9_-]{43})'$/m.exec(instance!.userData)![1]!;
    const fetchLaunch = (t: string) => request(env, "/v1/assignments/gitea-1187-1/bootstrap", { method: "POST", headers: { authorization: `Bearer ${t}` } });
    const launch = await fetchLaunch(token);
    expect(launch.status).toBe(200);
    const script = await launch.text();
    const files = Object.fromEntries([...script.matchAll(/printf '%s' '([A-Za-z0-9+/=]+)' \| base64 -d > '([^']+)'/g)].map((m) => [m[2], atob(m[1]!)]));
    expect(files["/etc/gitea-runner/.runner"]).toContain(registered.token);
    expect((await fetchLaunch(token)).status).toBe(404);

    const ours = { runner_id: registered.id, runner_name: "gdr-gitea-1187-1" };
    expect((await deliverJob(env, withJob(inProgressFixture, 1187, ours))).body).toEqual({ claimed: "gitea-1187-1" });
    expect((await deliverJob(env, withJob(completedFixture, 1187, ours))).body).toEqual({ completed: "gitea-1187-1" });
    const after = await state();
    expect(after.instances.map((i) => i.state)).toEqual(["terminated"]);
    // Every request was signed as EC2 checks it, and read back through the model.
    expect(after.requests.filter((r) => r.error)).toEqual([]);
    const view = (await (await request(env, "/v1/assignments/gitea-1187-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string };
    expect(view.state).toBe("completed");
    for (const line of logs.lines) {
      expect(line).not.toContain(registered.token);
      expect(line).not.toContain(token);
      expect(line).not.toContain(FAKE_AWS.secretAccessKey);
    }
  });

  it("the account's instance limit is a full backend: backend_full, no instance, gdr_backend_full 1", async () => {
    const account = `${inject("ec2Url")}/${uniqueName("ec2")}`;
    await fetch(`${account}/_control/mode`, { method: "POST", body: JSON.stringify({ instanceLimit: 0 }) });
    const env = ec2Env(account, { METRICS_TOKEN: "metrics-token-0000000" });
    await provisionEnv(env);
    expect((await deliverJob(env, queuedFixture)).status).toBe(202);
    expect(
      logs
        .events()
        .filter((e) => e.event === "backend_full")
        .map((e) => [e.assignment, e.backend]),
    ).toEqual([["gitea-1187-1", "vm"]]);
    expect(logs.events().filter((e) => e.event === "backend_auth")).toEqual([]);
    const metrics = await (await request(env, "/metrics", { headers: bearer("metrics-token-0000000") })).text();
    expect(metrics).toContain('gdr_backend_full{backend="vm"} 1');
  });
});
