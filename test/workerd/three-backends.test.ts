// Three backends at once inside workerd, each with its own driver: a pool on Kubernetes (pod), one
// on Hetzner (vm) and one on a named `http` backend (gpu). Jobs fill the first pool and spill to
// the next, across all three; each runner is made by its own pool's driver, /v1/status names every
// backend, and completing the jobs leaves no Pod, server or runner behind.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { poolsTestEnv, provisionEnv, TEST_SECRETS, uniqueName } from "../harness/env.ts";
import { bearer, captureLogs, giteaControl, request, tickUntil, type Captured, type FakeBackendState } from "../harness/worker.ts";
import { completedFixture, queuedFixture } from "../harness/fixtures.ts";
import { deliverJob, withJob } from "../harness/jobs.ts";
import { FAKE_HCLOUD_TOKEN } from "../../scripts/fake-hetzner.mjs";

const nats = inject("natsWsUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

type Env = Record<string, string>;

const deliver = deliverJob;
const queued = (id: number) => withJob(queuedFixture, id, { labels: ["ubuntu-latest"] });

describe("three backends, three drivers", () => {
  it("spill from Kubernetes to Hetzner to http, each runner by its pool's driver, and nothing is left after the jobs", async () => {
    const cluster = `${inject("kubernetesUrl")}/${uniqueName("c").toLowerCase().replaceAll("_", "-")}`;
    const project = `${inject("hetznerUrl")}/${uniqueName("hz")}`;
    const pools = [
      { name: "cluster", backend: "pod", labels: ["ubuntu-latest"], maxRunners: 1 },
      { name: "cloud", backend: "vm", labels: ["ubuntu-latest"], maxRunners: 1, priority: 200 },
      { name: "gpu", backend: "gpu", labels: ["ubuntu-latest"], priority: 300 },
    ];
    const base = poolsTestEnv(nats, inject("backendUrl"), inject("giteaUrl"), pools, {});
    const env: Env = {
      ...base,
      RETRY_DELAY_MS: "30",
      CAPACITY_POD: "3",
      CAPACITY_VM: "3",
      POD_DRIVER: "kubernetes",
      K8S_API_URL: cluster,
      K8S_TOKEN: "k8s-token-0000",
      K8S_NAMESPACE: "runners",
      VM_DRIVER: "hetzner",
      HCLOUD_API_URL: project,
      HCLOUD_TOKEN: FAKE_HCLOUD_TOKEN,
      VM_TEMPLATE: JSON.stringify({ image: "ubuntu-24.04", server_type: "cx22", location: "fsn1" }),
      BACKENDS: JSON.stringify([{ name: "gpu", driver: "http", capacity: 3, url: `${base.POD_BACKEND_URL}-gpu` }]),
      GPU_BACKEND_TOKEN: TEST_SECRETS.BACKEND_TOKEN,
    };
    await provisionEnv(env);
    const pods = async () => ((await (await fetch(`${cluster}/_control/state`)).json()) as { objects: { kind: string; metadata: { name: string } }[] }).objects;
    const servers = async () =>
      ((await (await fetch(`${project}/_control/state`)).json()) as { servers: { name: string; labels: Record<string, string> }[] }).servers;
    const gpu = async () => (await (await fetch(`${base.POD_BACKEND_URL}-gpu/_control/state`)).json()) as FakeBackendState;

    for (const id of [601, 602, 603]) expect((await deliver(env, queued(id))).status).toBe(202);
    await tickUntil(env, async () => (await pods()).length + (await servers()).length + (await gpu()).runners.length >= 4);
    const pod = (await pods()).filter((o) => o.kind === "Pod");
    const server = await servers();
    const http = (await gpu()).runners;
    expect([pod.length, server.length, http.length]).toEqual([1, 1, 1]);
    // A server's name carries its deployment's hash (gdr-<hash>-<assignment>); its label, the assignment's.
    const ran = [pod[0]!.metadata.name, `gdr-${server[0]!.labels["gdr-assignment"]}`, `gdr-${http[0]!.id}`].sort();
    expect(ran).toEqual(["gdr-gitea-601-1", "gdr-gitea-602-1", "gdr-gitea-603-1"]);
    expect(server[0]!.name).toMatch(/^gdr-[0-9a-f]{6}-gitea-60\d-1$/);

    // Every backend by name in the status; the cloud one with what its driver counts.
    const status = (await (await request(env, "/v1/status", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as {
      backends: { backend: string; slotsInUse: number }[];
      cloud: { backend: string; full: boolean }[];
    };
    expect(status.backends.map((b) => b.backend)).toEqual(["pod", "vm", "gpu"]);
    // A spilled job holds a slot in the backend that runs it.
    expect(status.backends.map((b) => b.slotsInUse)).toEqual([1, 1, 1]);
    expect(status.cloud).toEqual([{ backend: "vm", driver: "hetzner", full: false, fullTotal: 0, swept: 0 }]);

    const registered = (await giteaControl(env).state()).runners;
    for (const id of [601, 602, 603]) {
      const runner = registered.find((r) => r.name === `gdr-gitea-${id}-1`)!;
      expect((await deliver(env, withJob(completedFixture, id, { runner_id: runner.id, runner_name: runner.name }))).status).toBe(200);
    }
    await tickUntil(env, async () => (await servers()).length + (await pods()).length + (await gpu()).runners.length === 0);
    expect(await pods()).toEqual([]);
    expect(await servers()).toEqual([]);
    expect((await gpu()).runners).toEqual([]);
  });
});
