// The whole flow once per Kubernetes driver, inside workerd: webhook → assignment → Secret and Pod
// (or VMI) → in_progress → acked → completed → everything deleted.
import { afterEach, beforeEach, describe, expect, inject, it } from "vitest";
import { giteaSignature } from "../../src/forge/gitea/signature.ts";
import { giteaTestEnv, provisionEnv, TEST_SECRETS, uniqueName } from "../harness/env.ts";
import { streamState } from "../harness/nats.ts";
import { bearer, captureLogs, giteaControl, request, sleep, tick, type Captured } from "../harness/worker.ts";
import { completedFixture, inProgressFixture, queuedFixture } from "../harness/fixtures.ts";
import { withJob } from "../harness/jobs.ts";

const nats = inject("natsWsUrl");
let logs: Captured;
beforeEach(() => {
  logs = captureLogs();
});
afterEach(() => logs.restore());

async function deliver(env: Record<string, string>, payload: unknown) {
  const raw = JSON.stringify(payload);
  const res = await request(env, "/v1/gitea/webhook", {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-gitea-event-type": "workflow_job",
      "x-gitea-signature": await giteaSignature(TEST_SECRETS.WEBHOOK_SECRET, new TextEncoder().encode(raw)),
    },
    body: raw,
  });
  return { status: res.status, body: await res.json() };
}

type Obj = { kind: string; metadata: { name: string; labels: Record<string, string>; annotations: Record<string, string> }; status?: { phase: string } };

describe.each([
  ["kubernetes", "pod", "pods", "Pod"],
  ["kubevirt", "vm", "virtualmachineinstances", "VirtualMachineInstance"],
] as const)("%s driver in workerd", (driver, backend, resource, kind) => {
  it("runs a Gitea job from webhook to deletion", async () => {
    const cluster = `${inject("kubernetesUrl")}/${uniqueName("c").toLowerCase().replaceAll("_", "-")}`;
    const env = giteaTestEnv(nats, inject("backendUrl"), inject("giteaUrl"), {
      RETRY_DELAY_MS: 30,
      CAPACITY_POD: backend === "pod" ? 2 : 0,
      CAPACITY_VM: backend === "vm" ? 2 : 0,
      [`${backend.toUpperCase()}_DRIVER`]: driver,
      K8S_API_URL: cluster,
      K8S_TOKEN: "k8s-token-0000",
      K8S_NAMESPACE: "gitea-runners",
      RUNNER_VM_IMAGE: "registry.example.org/act-runner-vm:1",
      RUNS_ON_ROUTES: JSON.stringify([{ backend, labels: ["ubuntu-latest:docker://node:20-bookworm"] }]),
    });
    await provisionEnv(env);
    const k8s = (what: string, body?: unknown) =>
      fetch(`${cluster}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {}).then((r) => r.json());
    const objects = async () => ((await k8s("state")) as { objects: Obj[] }).objects;

    expect(await deliver(env, queuedFixture)).toEqual({ status: 202, body: { assignment: "gitea-1187-1", duplicate: false } });
    const created = await objects();
    expect(created.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual([`${kind}/gdr-gitea-1187-1`, "Secret/gdr-gitea-1187-1"].sort());
    for (const o of created) expect(o.metadata.labels["gitea-edge-dispatcher/assignment"]).toBe("gitea-1187-1");
    const registered = (await giteaControl(env).state()).runners[0]!;
    const runnerToken = registered.token;
    const workload = created.find((o) => o.kind === kind)!;
    expect(JSON.stringify(workload)).not.toContain(runnerToken);
    expect(JSON.stringify(created.find((o) => o.kind === "Secret"))).toContain(runnerToken);
    const state = async () =>
      ((await (await request(env, "/v1/assignments/gitea-1187-1", { headers: bearer(TEST_SECRETS.DISPATCH_TOKEN) })).json()) as { state: string }).state;
    expect(await state()).toBe("backend_pending");

    await k8s("phase", { resource, name: "gdr-gitea-1187-1", phase: "Running" });
    await sleep(40);
    await tick(env);
    expect(await state()).toBe("backend_ready");

    const ours = { runner_id: registered.id, runner_name: "gdr-gitea-1187-1" };
    expect((await deliver(env, withJob(inProgressFixture, 1187, ours))).body).toEqual({ claimed: "gitea-1187-1" });
    expect(
      logs
        .events()
        .filter((e) => e.event === "acked")
        .map((e) => e.assignment),
    ).toEqual(["gitea-1187-1"]);
    expect(await streamState({ ...env })).toMatchObject({ messages: 0 });

    expect((await deliver(env, withJob(completedFixture, 1187, ours))).body).toEqual({ completed: "gitea-1187-1" });
    expect(await objects()).toEqual([]);
    expect((await giteaControl(env).state()).runners).toEqual([]);
    for (const line of logs.lines) expect(line).not.toContain(runnerToken);
  });
});
