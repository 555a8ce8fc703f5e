// Runner pools inside workerd, against the real nats-server, the fake Gitea and the fake backend:
// a job goes to its first pool while that has room and spills to the next (here on the other
// backend) when it is full; each runner is registered with its pool's labels and asked of its
// pool's backend with its pool's template.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { poolsTestEnv, provisionEnv, TEST_SECRETS } from "../harness/env.ts";
import { backendControl, bearer, captureLogs, giteaControl, request, tickUntil, type Captured, type FakeBackendState } from "../harness/worker.ts";
import { fixturesFor, GITEA_RELEASES } from "../harness/fixtures.ts";

const nats = inject("natsWsUrl");
const backendUrl = inject("backendUrl");
const giteaUrl = inject("giteaUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Env = Record<string, string>;

async function deliverQueued(env: Env, id: number, labels: string[], release = "1.27.0") {
  const payload = structuredClone(fixturesFor(release).queued);
  Object.assign(payload.workflow_job, { id, labels });
  const raw = JSON.stringify(payload);
  const signature = await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw));
  const headers = { "content-type": "application/json", "x-gitea-event": "workflow_job", "x-gitea-event-type": "workflow_job", "x-gitea-signature": signature };
  return request(env, "/v1/gitea/webhook", { method: "POST", headers, body: raw });
}

const vmState = async (env: Env): Promise<FakeBackendState> => (await fetch(`${env.VM_BACKEND_URL}/_control/state`)).json();
const view = async (env: Env, id: string) =>
  (await (await request(env, `/v1/assignments/${id}`, { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string; backend: string };

describe("runner pools", () => {
  it.each(GITEA_RELEASES)(
    "on Gitea %s: fill the first pool up to its cap and spill to the next, each runner with its own pool's labels, backend and template",
    async (release) => {
      const pods = { name: "pods", backend: "pod", labels: ["ubuntu-latest", "pods"], maxRunners: 1, template: { size: "small" } };
      const vms = { name: "vms", backend: "vm", labels: ["ubuntu-latest", "vms"], priority: 200, template: { size: "large" } };
      const env = poolsTestEnv(nats, backendUrl, giteaUrl, [pods, vms], { RETRY_DELAY_MS: 30, CAPACITY_POD: 5, CAPACITY_VM: 5 });
      await provisionEnv(env);
      await giteaControl(env).version(release);
      for (const id of [501, 502, 503]) expect((await deliverQueued(env, id, ["ubuntu-latest"], release)).status).toBe(202);
      // A job only the second pool can run goes there straight away, though the first has no room either way.
      expect((await deliverQueued(env, 504, ["vms"], release)).status).toBe(202);
      await tickUntil(env, async () => (await backendControl(env).state()).runners.length + (await vmState(env)).runners.length >= 4);

      const pod = await backendControl(env).state();
      const vm = await vmState(env);
      // The pod pool holds one runner (its cap) though CAPACITY_POD is 5; the rest spilled to the vm pool.
      expect(pod.runners).toHaveLength(1);
      expect(vm.runners.map((r) => r.id).sort()).toEqual(expect.arrayContaining(["gitea-504-1"]));
      expect(vm.runners).toHaveLength(3);
      const body = (state: FakeBackendState, id: string) => JSON.parse(state.requests.find((r) => r.method === "PUT" && r.path.endsWith(`/${id}`))!.body);
      expect(body(pod, pod.runners[0]!.id).pool).toEqual({ name: "pods", template: { size: "small" } });
      for (const r of vm.runners) expect(body(vm, r.id).pool).toEqual({ name: "vms", template: { size: "large" } });

      // Registered in Gitea with the labels of the pool that runs it, not the first pool's.
      const gitea = await giteaControl(env).state();
      const labelsOf = (id: string) => gitea.runners.find((r) => r.name === `gdr-${id}`)?.labels;
      expect(labelsOf(pod.runners[0]!.id)).toEqual(pods.labels);
      for (const r of vm.runners) expect(labelsOf(r.id)).toEqual(vms.labels);
      expect(gitea.registrations).toBe(4);

      // Every one of them still waits in the queue of its first pool's backend.
      for (const id of ["gitea-501-1", "gitea-502-1", "gitea-503-1"]) expect((await view(env, id)).backend).toBe("pod");
      expect((await view(env, "gitea-504-1")).backend).toBe("vm");
    },
  );
});

describe("a pool's schedule in workerd", () => {
  it("sets the warm target the status reports: a window that holds now, read in its time zone by croner in the Worker; near miss: one that does not hold", async () => {
    const weekday = new Date().getUTCDay();
    const today = { cron: `* * * * ${weekday}`, timeZone: "UTC", minIdle: 0 };
    const notToday = { cron: `* * * * ${(weekday + 3) % 7}`, timeZone: "UTC", minIdle: 0 };
    for (const [window, target] of [
      [today, 0],
      [notToday, 2],
    ] as const) {
      const pool = { name: "small", backend: "pod", labels: ["ubuntu-latest"], minIdle: 2, schedule: [window] };
      const env = poolsTestEnv(nats, backendUrl, giteaUrl, [pool], { CAPACITY_POD: 5 });
      await provisionEnv(env);
      const status = (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
        pools: { pool: string; target: number }[];
      };
      expect(status.pools.find((p) => p.pool === "small")?.target, window.cron).toBe(target);
    }
  });
});
