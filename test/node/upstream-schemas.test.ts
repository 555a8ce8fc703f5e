// What we send, checked against the upstream API descriptions (copied from shared/reference: the
// Kubernetes and KubeVirt ones to src/backends/kubernetes/upstream, where the Worker checks pool
// templates with them; the Gitea ones to test/fixtures/upstream-schemas): the Pod, Secret and VMI the drivers create validate against
// Kubernetes' and KubeVirt's own OpenAPI schemas, with unknown fields refused (as the API
// server's strict field validation does), and every Gitea REST call the client makes is an
// operation of Gitea 1.25 and of Gitea main.
import { launched } from "../harness/launch.ts";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { cloudInit, vmiManifest } from "../../src/backends/kubevirt.ts";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { DEFAULT_RUNNER_IMAGE, podManifest, runnerSecret } from "../../src/backends/kubernetes/pod.ts";
import type { RunnerRequest } from "../../src/domain/backend.ts";
import { loadConfig } from "../../src/app/config.ts";
import { createGiteaClient } from "../../src/forge/gitea/client.ts";
import { assignment, giteaTestEnv } from "../harness/env.ts";

import { errorsOf, load, pod, secret, vmi } from "../harness/upstream.ts";

const request = (id: string): RunnerRequest =>
  launched({
    assignment: assignment(id),
    claimToken: "claim-token",
    claimUrl: `https://d.example.org/v1/assignments/${id}/claim`,
    completeUrl: `https://d.example.org/v1/assignments/${id}/complete`,
    runner: {
      WARNING: "w",
      id: 7,
      uuid: "uuid-7",
      name: `gdr-${id}`,
      token: "runner-token",
      address: "https://g",
      labels: ["ubuntu-latest:docker://node:20"],
      ephemeral: true,
    },
  });
const dind = JSON.parse(readFileSync("examples/pod-template.dind.json", "utf8"));

describe("manifests against the upstream schemas", () => {
  it("the validators refuse what the real API would: a wrong type, an unknown field", () => {
    expect(errorsOf(pod, { apiVersion: "v1", kind: "Pod", metadata: { name: "x" }, spec: { containers: [{ name: "c", image: "i" }] } })).toEqual([]);
    expect(errorsOf(pod, { apiVersion: "v1", kind: "Pod", spec: { containers: [{ name: "c", image: "i", restartPolicy: 1 }] } })).not.toEqual([]);
    expect(errorsOf(pod, { apiVersion: "v1", kind: "Pod", spec: { containers: [{ name: "c", imagePullPolicyy: "Always" }] } })).not.toEqual([]);
    expect(errorsOf(vmi, { apiVersion: "kubevirt.io/v1", kind: "VirtualMachineInstance", metadata: { name: "x" } })).not.toEqual([]); // spec is required
  });

  for (const id of ["gitea-1187-1", "Job_With.Dots-", "A"]) {
    it(`Pod, Secret and VMI of ${id} validate, with and without the templates of docs/backends.md`, async () => {
      const names = await objectNames("gdr", id);
      const r = request(id);
      expect(errorsOf(pod, podManifest(names, r, { image: DEFAULT_RUNNER_IMAGE, template: undefined }))).toEqual([]);
      expect(errorsOf(pod, podManifest(names, r, { image: DEFAULT_RUNNER_IMAGE, template: dind }))).toEqual([]);
      expect(errorsOf(secret, runnerSecret(names, r))).toEqual([]);
      expect(errorsOf(secret, runnerSecret(names, r, { userdata: cloudInit(r) }))).toEqual([]);
      const template = { spec: { domain: { resources: { requests: { memory: "8Gi" } } } } };
      expect(errorsOf(vmi, vmiManifest(names, r, { image: "registry.example.org/runner-vm:1", template }))).toEqual([]);
      // A pool's template goes over the backend's own, and the workload carries the pool's label.
      const small = {
        ...r,
        pool: { name: "small", template: { spec: { nodeSelector: { size: "small" }, containers: [{ name: "runner", resources: { limits: { cpu: "1" } } }] } } },
      };
      const made = podManifest(names, small, { image: DEFAULT_RUNNER_IMAGE, template: dind }) as {
        metadata: { labels: Record<string, string> };
        spec: { nodeSelector: object; containers: { name: string; resources?: object; securityContext?: object }[] };
      };
      expect(errorsOf(pod, made)).toEqual([]);
      expect(made.metadata.labels["gitea-edge-dispatcher/pool"]).toBe("small");
      expect(made.spec.nodeSelector).toEqual({ "kubernetes.io/os": "linux", size: "small" });
      expect(made.spec.containers.find((c) => c.name === "runner")?.resources).toMatchObject({ limits: { cpu: "1" } });
      const big = vmiManifest(names, { ...r, pool: { name: "large", template: { spec: { domain: { cpu: { cores: 16 } } } } } }, { image: "i", template }) as {
        spec: { domain: { cpu: object; resources: object } };
      };
      expect(errorsOf(vmi, big)).toEqual([]);
      expect(big.spec.domain).toMatchObject({ cpu: { cores: 16 }, resources: { requests: { memory: "8Gi" } } });
    });
  }
});

describe("the Worker's own schema check (schema-check.ts) agrees with ajv", () => {
  const base = { apiVersion: "v1", kind: "Pod", metadata: { name: "x" }, spec: { containers: [{ name: "c", image: "i" }] } };
  const spec = (extra: object) => ({ ...base, spec: { ...base.spec, ...extra } });
  const pods: [string, unknown][] = [
    ["a minimal pod", base],
    ["the dind template", dind],
    ["a misspelt container field", spec({ containers: [{ name: "c", imagePullPolicyy: "Always" }] })],
    ["a string where an integer goes", spec({ activeDeadlineSeconds: "60" })],
    ["a fraction where an integer goes", spec({ activeDeadlineSeconds: 1.5 })],
    ["a quantity as a number", spec({ containers: [{ name: "c", resources: { limits: { cpu: 2 } } }] })],
    ["a quantity as a list", spec({ containers: [{ name: "c", resources: { limits: { cpu: [2] } } }] })],
    ["an int-or-string port as a name", spec({ containers: [{ name: "c", livenessProbe: { httpGet: { port: "http" } } }] })],
    ["an int-or-string port as true", spec({ containers: [{ name: "c", livenessProbe: { httpGet: { port: true } } }] })],
    ["a toleration without its key", spec({ tolerations: [{ operator: "Exists", effect: "NoSchedule" }] })],
    ["a node selector of numbers", spec({ nodeSelector: { disk: 1 } })],
    ["containers as an object", spec({ containers: { name: "c" } })],
    ["a volume mount without mountPath", spec({ containers: [{ name: "c", volumeMounts: [{ name: "v" }] }] })],
    ["a field named constructor", spec({ constructor: {} })],
    ["a label named __proto__", { ...base, metadata: JSON.parse('{"name":"x","labels":{"__proto__":"y"}}') }],
  ];
  it.each(pods)("Pod: %s", async (_what, manifest) => {
    const { checkPod } = await import("../../src/backends/kubernetes/schema-check.ts");
    expect(checkPod(manifest).length === 0).toBe(errorsOf(pod, manifest).length === 0);
  });
  it("the near misses are refused, naming the field", async () => {
    const { checkPod, checkVmi } = await import("../../src/backends/kubernetes/schema-check.ts");
    expect(checkPod(spec({ containers: [{ name: "c", imagePullPolicyy: "Always" }] }))).toEqual([
      "spec.containers[0].imagePullPolicyy is not a field of this object",
    ]);
    expect(checkPod(spec({ activeDeadlineSeconds: "60" }))).toEqual(["spec.activeDeadlineSeconds must be integer"]);
    expect(checkPod(spec({ constructor: {} }))).toEqual(["spec.constructor is not a field of this object"]);
    expect(checkVmi({ apiVersion: "kubevirt.io/v1", kind: "VirtualMachineInstance", metadata: { name: "x" } })).toEqual(["spec is required"]);
    const vm = { apiVersion: "kubevirt.io/v1", kind: "VirtualMachineInstance", metadata: { name: "x" }, spec: { domain: { devices: {} } } };
    expect(checkVmi(vm)).toEqual([]);
    expect(errorsOf(vmi, vm)).toEqual([]);
    const wrong = { ...vm, spec: { domain: { devices: {}, cpu: { cores: "2" } } } };
    expect(checkVmi(wrong)).toEqual(["spec.domain.cpu.cores must be integer"]);
    expect(errorsOf(vmi, wrong)).not.toEqual([]);
  });
});

describe("Gitea REST calls against Gitea's own API description", () => {
  it("disables a runner only where Gitea can (PATCH, newer than 1.25): 1.25 answers 405 or 404, and the client says it could not", async () => {
    const calls: string[] = [];
    const answers = [405, 404, 200];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      calls.push(`${init.method} ${new URL(url).pathname} ${init.body as string}`);
      return new Response(null, { status: answers.shift() });
    }) as typeof fetch;
    const cfg = loadConfig({ ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"), GITEA_URL: "https://git.example.com" }).gitea!;
    const client = createGiteaClient(cfg, 1_000, fakeFetch);
    expect([await client.disableRunner({ id: 12 }), await client.disableRunner({ id: 12 }), await client.disableRunner({ id: 12 })]).toEqual([
      false,
      false,
      true,
    ]);
    expect(calls[0]).toBe('PATCH /api/v1/admin/actions/runners/12 {"disabled":true}');
    const operation = (doc: { paths: Record<string, Record<string, unknown>> }, method: string, path: string) =>
      Object.entries(doc.paths).some(([template, ops]) => new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path) && method.toLowerCase() in ops);
    expect(operation(load("gitea-main.json"), "PATCH", "/admin/actions/runners/12")).toBe(true);
    expect(operation(load("gitea-v1.25.json"), "PATCH", "/admin/actions/runners/12")).toBe(false);
  });

  const gitea = { "1.25": load("gitea-v1.25.json"), main: load("gitea-main.json") };
  const operation = (doc: { paths: Record<string, Record<string, unknown>> }, method: string, path: string) =>
    Object.entries(doc.paths).some(([template, ops]) => new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`).test(path) && method.toLowerCase() in ops);

  it("calls only operations both versions have, in every scope", async () => {
    const calls: string[] = [];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      calls.push(`${init.method} ${new URL(url).pathname}`);
      if (url.endsWith("/registration-token")) return Response.json({ token: "reg" });
      if (url.includes("/jobs/")) return Response.json({ id: 1, run_id: 1, status: "queued" });
      if (url.includes("/jobs")) return Response.json({ total_count: 0, jobs: [] });
      if (init.method === "DELETE") return new Response(null, { status: 204 });
      if (/\/runners\/\d+$/.test(url)) return Response.json({ id: 12, name: "gdr-x", busy: false, disabled: false });
      return Response.json({ total_count: 0, runners: [] });
    }) as typeof fetch;
    for (const scope of ["admin", "org:acme", "repo:acme/widgets"]) {
      const cfg = loadConfig({
        ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"),
        GITEA_URL: "https://git.example.com",
        GITEA_SCOPE: scope,
      }).gitea!;
      const client = createGiteaClient(cfg, 1_000, fakeFetch);
      await client.registrationToken();
      await client.listQueuedJobs(1, 50);
      await client.listRunners(1, 50);
      await client.deleteRunner({ id: 12 });
      await client.getJob("acme/widgets", 1187);
      await client.getRunner({ id: 12 });
    }
    // Runners registered per owner or repository (RUNNER_SCOPE): tokens, lookups and deletions there.
    const cfg = loadConfig({ ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"), GITEA_URL: "https://git.example.com" }).gitea!;
    const client = createGiteaClient(cfg, 1_000, fakeFetch);
    for (const scope of ["user:alice", "org:acme", "repo:acme/widgets"]) {
      await client.getRunner({ id: 12, scope });
      await client.deleteRunner({ id: 12, scope });
      await client.listRunners(1, 50, scope);
    }
    await client.registrationToken({ kind: "user", user: "alice" });
    await client.registrationToken({ kind: "owner", owner: "acme" });
    expect(calls).toHaveLength(29);
    expect(calls.slice(18)).toContain("POST /api/v1/user/actions/runners/registration-token");
    const rest = calls.map((c) => c.replace(" /api/v1/", " /"));
    for (const [version, doc] of Object.entries(gitea)) {
      for (const call of rest) {
        const [method, path] = call.split(" ") as [string, string];
        expect(operation(doc, method, path), `${call} in Gitea ${version}`).toBe(true);
      }
    }
  });

  it("asks every release its version, and reruns through operations Gitea main has (1.25 has none: such a job is left to a person)", async () => {
    const calls: string[] = [];
    const fakeFetch = (async (url: string, init: RequestInit) => {
      calls.push(`${init.method} ${new URL(url).pathname}`);
      if (url.endsWith("/version")) return Response.json({ version: "1.27.0" });
      if (url.endsWith("/rerun")) return Response.json({ id: 2, run_id: 7, run_attempt: 2, status: "queued" }, { status: 201 });
      if (url.includes("/jobs")) return Response.json({ total_count: 0, jobs: [] });
      return Response.json({ id: 7, status: "completed", run_attempt: 1 });
    }) as typeof fetch;
    const cfg = loadConfig({ ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"), GITEA_URL: "https://git.example.com" }).gitea!;
    const client = createGiteaClient(cfg, 1_000, fakeFetch);
    expect(await client.version()).toBe("1.27.0");
    await client.getRun("acme/widgets", 7);
    await client.listRunJobs("acme/widgets", 7);
    expect(await client.rerunJob("acme/widgets", 7, 1187)).toEqual({ asked: expect.objectContaining({ id: 2, run_attempt: 2 }) });
    const rest = calls.map((c) => c.replace(" /api/v1/", " /"));
    expect(rest).toEqual([
      "GET /version",
      "GET /repos/acme/widgets/actions/runs/7",
      "GET /repos/acme/widgets/actions/runs/7/jobs",
      "POST /repos/acme/widgets/actions/runs/7/jobs/1187/rerun",
    ]);
    for (const call of rest) {
      const [method, path] = call.split(" ") as [string, string];
      expect(operation(gitea.main, method, path), `${call} in Gitea main`).toBe(true);
    }
    expect(operation(gitea["1.25"], "GET", "/version")).toBe(true);
    expect(operation(gitea["1.25"], "POST", "/repos/acme/widgets/actions/runs/7/jobs/1187/rerun")).toBe(false);
  });
});
