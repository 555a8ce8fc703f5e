// One contract, every driver: what the reconciliation relies on from a runner backend.
import { launched } from "../harness/launch.ts";
import { afterAll, describe, expect, inject, it } from "vitest";
import { createRunnerBackend } from "../../src/app/select-backend.ts";
import { BackendError, type RunnerBackend, type RunnerRequest } from "../../src/domain/backend.ts";
import { loadConfig } from "../../src/app/config.ts";
import type { RunnerFile } from "../../src/domain/runner-identity.ts";
import { assignment, giteaTestEnv, uniqueName } from "../harness/env.ts";
import { hetznerScene } from "../harness/hetzner.ts";
import { ec2Scene } from "../harness/ec2.ts";
import { STATUS_READ_AFTER_MS as EC2_STATUS_READ_AFTER_MS } from "../../src/backends/ec2/driver.ts";
import { STATUS_READ_AFTER_MS } from "../../src/backends/hetzner/driver.ts";

const backendUrl = inject("backendUrl");
const k8sUrl = inject("kubernetesUrl");
const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const close of closers.splice(0)) await close();
});
const REGISTRATION_TOKEN = "gitea-registration-token-0000";

interface Harness {
  driver: RunnerBackend;
  /** The backend's side: make a workload run, fail, or hang. */
  run(id: string): Promise<void>;
  fail(id: string): Promise<void>;
  hang(ms: number): Promise<void>;
  /** The backend stops accepting our token (401), or is unavailable (503). */
  revokeToken(): Promise<void>;
  unavailable(): Promise<void>;
  created(): Promise<number>;
  live(): Promise<number>;
  /** Everything the backend received, and, for Kubernetes, the non-Secret objects it holds. */
  received(): Promise<string>;
  workloadObjects(): Promise<string>;
  /** Kubernetes only: sets the workload's status.phase. */
  setPhase(phase: string): Promise<void>;
}

async function httpHarness(): Promise<Harness> {
  const ns = uniqueName("http");
  const base = `${backendUrl}/${ns}`;
  const ctl = (what: string, body?: unknown) =>
    fetch(`${base}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {}).then((r) => r.json());
  await ctl("mode", { token: "backend-token", readyAfter: 1 });
  const env = giteaTestEnv("ws://127.0.0.1:1", backendUrl, "http://127.0.0.1:2", { POD_BACKEND_URL: base });
  const config = loadConfig(env);
  const state = () => ctl("state") as Promise<{ runners: { id: string }[]; created: number; requests: unknown[] }>;
  return {
    driver: createRunnerBackend(config, config.backends[0]!),
    run: async () => undefined, // the http backend reports ready on its second PUT
    // A vanished runner: the next PUT recreates it (the driver contract is an idempotent PUT).
    fail: async (id) => void (await ctl("forget", { id })),
    hang: async (ms) => void (await ctl("mode", { token: "backend-token", readyAfter: 1, hangFirst: 1, hangMs: ms })),
    revokeToken: async () => void (await ctl("mode", { token: "rotated" })),
    unavailable: async () => void (await ctl("mode", { token: "backend-token", failFirst: 1 })),
    created: async () => (await state()).created,
    live: async () => (await state()).runners.length,
    received: async () => JSON.stringify((await state()).requests),
    workloadObjects: async () => "",
    setPhase: async () => {
      throw new Error("the http backend has no phases");
    },
  };
}

function kubeHarness(driverName: "kubernetes" | "kubevirt") {
  return async (): Promise<Harness> => {
    const prefix = uniqueName("k8s").toLowerCase().replaceAll("_", "-");
    const base = `${k8sUrl}/${prefix}`;
    const ctl = (what: string, body?: unknown) =>
      fetch(`${base}/_control/${what}`, body ? { method: "POST", body: JSON.stringify(body) } : {}).then((r) => r.json());
    const env = giteaTestEnv("ws://127.0.0.1:1", backendUrl, "http://127.0.0.1:2", {
      POD_DRIVER: driverName,
      K8S_API_URL: base,
      K8S_TOKEN: "k8s-token-0000",
      K8S_NAMESPACE: "runners",
      RUNNER_VM_IMAGE: "registry.example.org/act-runner-vm:1",
    });
    const config = loadConfig(env);
    const resource = driverName === "kubernetes" ? "pods" : "virtualmachineinstances";
    type Obj = { kind: string; metadata: { name: string }; status?: { phase: string } };
    const state = () => ctl("state") as Promise<{ objects: Obj[]; created: Record<string, number>; requests: unknown[] }>;
    const workloads = async () => (await state()).objects.filter((o) => o.kind !== "Secret");
    const setPhase = async (phase: string) => {
      for (const o of await workloads()) await ctl("phase", { resource, name: o.metadata.name, phase });
    };
    return {
      driver: createRunnerBackend(config, config.backends[0]!),
      run: () => setPhase("Running"),
      fail: () => setPhase("Failed"),
      hang: async (ms) => void (await ctl("mode", { hangFirst: 1, hangMs: ms })),
      revokeToken: async () => void (await ctl("mode", { token: "rotated" })),
      unavailable: async () => void (await ctl("mode", { failFirst: 1 })),
      created: async () => (await state()).created[resource]!,
      live: async () => (await state()).objects.length,
      received: async () => JSON.stringify((await state()).requests),
      workloadObjects: async () => JSON.stringify(await workloads()),
      setPhase,
    };
  };
}

/** The hetzner driver on the fake Hetzner API (test/harness/hetzner.ts). */
async function hetznerHarness(): Promise<Harness> {
  const scene = await hetznerScene();
  closers.push(() => scene.close());
  return {
    driver: scene.driver,
    // The server is up; the one status read it gets comes once it should be.
    run: async () => void (scene.clock.t += STATUS_READ_AFTER_MS + 1),
    fail: async () => {
      await scene.ctl("status", { status: "off" });
      scene.clock.t += STATUS_READ_AFTER_MS + 1;
    },
    hang: async (ms) => void (await scene.ctl("mode", { hangFirst: 1, hangMs: ms })),
    revokeToken: async () => void (await scene.ctl("mode", { token: "rotated" })),
    unavailable: async () => void (await scene.ctl("mode", { failFirst: 1, failStatus: 503 })),
    created: async () => {
      const s = await scene.state();
      return s.servers.length + s.deleted.length;
    },
    live: async () => (await scene.state()).servers.length,
    received: async () => JSON.stringify((await scene.state()).requests),
    workloadObjects: async () => JSON.stringify((await scene.state()).servers),
    setPhase: async () => {
      throw new Error("the hetzner driver reads no phase");
    },
  };
}

/** The ec2 driver on the fake EC2 API (test/harness/ec2.ts). */
async function ec2Harness(): Promise<Harness> {
  const scene = await ec2Scene();
  closers.push(() => scene.close());
  return {
    driver: scene.driver,
    run: async () => void (scene.clock.t += EC2_STATUS_READ_AFTER_MS + 1),
    fail: async () => {
      for (const i of await scene.live()) await scene.ctl("end", { id: i.id, state: "terminated", stateReason: "Server.InternalError" });
      scene.clock.t += EC2_STATUS_READ_AFTER_MS + 1;
    },
    hang: async (ms) => void (await scene.ctl("mode", { hangFirst: 1, hangMs: ms })),
    revokeToken: async () => void (await scene.ctl("mode", { credentials: { secretAccessKey: "rotated-secret" } })),
    unavailable: async () => void (await scene.ctl("mode", { failFirst: 1, failStatus: 503 })),
    created: async () => (await scene.state()).instances.length,
    live: async () => (await scene.live()).length,
    received: async () => JSON.stringify((await scene.state()).requests),
    workloadObjects: async () => JSON.stringify((await scene.state()).instances),
    setPhase: async () => {
      throw new Error("the ec2 driver reads no phase");
    },
  };
}

const identity: RunnerFile = {
  WARNING: "generated",
  id: 42,
  uuid: "6a1e2c7e-0000-4000-8000-000000000042",
  name: "gdr-contract-1",
  token: "runner-identity-token-secret-42",
  address: "https://gitea.example.org",
  labels: ["ubuntu-latest:docker://node:20"],
  ephemeral: true,
};
const request = (id: string): RunnerRequest =>
  launched({
    assignment: assignment(id),
    claimToken: `claim-token-of-${id}`,
    claimUrl: `https://dispatch.example.org/v1/assignments/${id}/claim`,
    completeUrl: `https://dispatch.example.org/v1/assignments/${id}/complete`,
    bootstrapUrl: `https://dispatch.example.org/v1/assignments/${id}/bootstrap`,
    runner: identity,
  });
const within = (ms: number) => AbortSignal.timeout(ms);

describe.each([
  ["http", httpHarness],
  ["kubernetes", kubeHarness("kubernetes")],
  ["kubevirt", kubeHarness("kubevirt")],
  ["hetzner", hetznerHarness],
  ["ec2", ec2Harness],
])("runner backend contract: %s driver", (name, makeHarness) => {
  it("accepting twice makes one runner, pending until it runs, then ready", async () => {
    const h = await makeHarness();
    expect(await h.driver.accept(request("c-1"), within(2_000))).toBe("pending");
    await h.run("c-1");
    expect(await h.driver.accept(request("c-1"), within(2_000))).toBe("ready");
    expect(await h.driver.accept(request("c-1"), within(2_000))).toBe("ready");
    expect(await h.created()).toBe(1);
  });

  it("recreates a workload that failed before its claim", async () => {
    const h = await makeHarness();
    await h.driver.accept(request("c-2"), within(2_000));
    await h.fail("c-2");
    const first = await h.driver.accept(request("c-2"), within(2_000)).catch((e: unknown) => e);
    if (first instanceof BackendError) expect(first.message).toContain("before the claim");
    await h.driver.accept(request("c-2"), within(2_000));
    expect(await h.created()).toBe(2);
  });

  it("takes every id the id rule admits, and keeps ids apart whose names once collided", async () => {
    const h = await makeHarness();
    // Trailing '-', '.', '_' and upper case are no valid Kubernetes names or label values as they are.
    for (const id of ["job-", "build.", "x_", "A"]) expect(await h.driver.accept(request(id), within(2_000))).toBe("pending");
    // "A" once became gdr-a-559aead0, the name of this id: tearing one down took the other with it.
    expect(await h.driver.accept(request("a-559aead0"), within(2_000))).toBe("pending");
    expect(await h.created()).toBe(5);
    await h.driver.teardown("A", within(2_000));
    await h.driver.accept(request("a-559aead0"), within(2_000));
    expect(await h.created()).toBe(5);
  });

  it("tears down idempotently, also what never existed", async () => {
    const h = await makeHarness();
    await h.driver.accept(request("c-3"), within(2_000));
    expect(await h.live()).toBeGreaterThan(0);
    await h.driver.teardown("c-3", within(2_000));
    await h.driver.teardown("c-3", within(2_000));
    await h.driver.teardown("never-existed", within(2_000));
    expect(await h.live()).toBe(0);
  });

  it("turns a hung backend into a BackendError within the timeout", async () => {
    const h = await makeHarness();
    await h.hang(2_000);
    const started = Date.now();
    const err = await h.driver.accept(request("c-4"), within(300)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendError);
    expect((err as Error).message).toMatch(/timed out/);
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  it("reports refused credentials and unavailability as BackendErrors with their status", async () => {
    const h = await makeHarness();
    await h.unavailable();
    expect(await h.driver.accept(request("c-6"), within(2_000)).catch((e: unknown) => e)).toMatchObject({ name: "BackendError", status: 503 });
    await h.revokeToken();
    // A BackendError (the cloud drivers' BackendRefused is one, naming the credential's variable).
    for (const refused of [
      await h.driver.accept(request("c-6"), within(2_000)).catch((e: unknown) => e),
      await h.driver.teardown("c-6", within(2_000)).catch((e: unknown) => e),
    ]) {
      expect(refused).toBeInstanceOf(BackendError);
      expect(refused).toMatchObject({ status: 401 });
    }
  });

  it("never hands over the registration token; the identity only through a Secret", async () => {
    const h = await makeHarness();
    await h.driver.accept(request("c-5"), within(2_000));
    await h.run("c-5");
    await h.driver.accept(request("c-5"), within(2_000));
    const received = await h.received();
    expect(received).not.toContain(REGISTRATION_TOKEN);
    if (name === "hetzner" || name === "ec2") {
      // The server's user_data holds a one-time token and URLs only: the identity is fetched at boot.
      const servers = await h.workloadObjects();
      expect(servers).toContain("/v1/assignments/c-5/bootstrap");
      for (const secret of [identity.token, identity.uuid, "claim-token-of-c-5"]) expect(received + servers).not.toContain(secret);
    } else if (name !== "http") {
      const objects = await h.workloadObjects();
      expect(objects.length).toBeGreaterThan(10);
      expect(objects).not.toContain(identity.token);
      expect(objects).not.toContain(identity.uuid);
      expect(objects).not.toContain("claim-token-of-c-5");
      expect(received).toContain(identity.token); // …which did arrive, in the Secret
    } else {
      // The service gets the identity as documented (`runner`), not the launch the other drivers render.
      expect(received).toContain(identity.token);
      expect(received).not.toContain('"launch"');
      expect(received).not.toContain("command -v gitea-runner");
    }
  });
});

describe.each([
  ["kubernetes", kubeHarness("kubernetes"), ["Pending", "Unknown", "", "NotAPhase", "constructor"]],
  ["kubevirt", kubeHarness("kubevirt"), ["Pending", "Scheduling", "Scheduled", "Unknown", "", "constructor"]],
] as const)("%s driver: a workload's phase", (_name, makeHarness, waiting) => {
  it("is pending, asked again and again, until it runs; then ready", async () => {
    const h = await makeHarness();
    expect(await h.driver.accept(request("p-1"), within(2_000))).toBe("pending");
    // Asked again before it runs (the fake creates it Pending): still pending, whatever it says.
    expect(await h.driver.accept(request("p-1"), within(2_000))).toBe("pending");
    for (const phase of waiting) {
      await h.setPhase(phase);
      expect(await h.driver.accept(request("p-1"), within(2_000)), phase).toBe("pending");
    }
    await h.setPhase("Running");
    expect(await h.driver.accept(request("p-1"), within(2_000))).toBe("ready");
    expect(await h.created()).toBe(1);
  });
});
