// What we send, checked against the upstream API descriptions (test/fixtures/upstream-schemas,
// copied from shared/reference): the Pod, Secret and VMI the drivers create validate against
// Kubernetes' and KubeVirt's own OpenAPI schemas, with unknown fields refused (as the API
// server's strict field validation does), and every Gitea REST call the client makes is an
// operation of Gitea 1.25 and of Gitea main.
import { readFileSync } from "node:fs";
import { Ajv, type ValidateFunction } from "ajv";
import { describe, expect, it } from "vitest";
import { cloudInit, vmiManifest } from "../../src/backends/kubevirt.ts";
import { objectNames } from "../../src/backends/kubernetes/names.ts";
import { DEFAULT_RUNNER_IMAGE, podManifest, runnerSecret } from "../../src/backends/kubernetes/pod.ts";
import type { RunnerRequest } from "../../src/backends/types.ts";
import { loadConfig } from "../../src/config.ts";
import { createGiteaClient } from "../../src/gitea/client.ts";
import { assignment, giteaTestEnv } from "../harness/env.ts";

const dir = new URL("../fixtures/upstream-schemas/", import.meta.url);
const load = (file: string) => JSON.parse(readFileSync(new URL(file, dir), "utf8"));

/** Every object schema that lists its properties refuses others, as kubectl-validate's strict mode. */
function strict(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(strict);
  if (!node || typeof node !== "object") return node;
  const out = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, k === "properties" ? Object.fromEntries(Object.entries(v as object).map(([p, s]) => [p, strict(s)])) : strict(v)]));
  if ("properties" in out && !("additionalProperties" in out)) out.additionalProperties = false;
  return out;
}

function validator(file: string, ref: string): ValidateFunction {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema(strict(load(file)) as object, file);
  const validate = ajv.getSchema(`${file}${ref}`);
  if (!validate) throw new Error(`${ref} is not in ${file}`);
  return validate;
}

const pod = validator("k8s-core-v1.json", "#/components/schemas/io.k8s.api.core.v1.Pod");
const secret = validator("k8s-core-v1.json", "#/components/schemas/io.k8s.api.core.v1.Secret");
const vmi = validator("kubevirt-v1.json", "#/definitions/v1.VirtualMachineInstance");

const errorsOf = (validate: ValidateFunction, value: unknown) => (validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`));

const request = (id: string): RunnerRequest => ({
  assignment: assignment(id),
  claimToken: "claim-token",
  claimUrl: `https://d.example.org/v1/assignments/${id}/claim`,
  completeUrl: `https://d.example.org/v1/assignments/${id}/complete`,
  runner: { WARNING: "w", id: 7, uuid: "uuid-7", name: `gdr-${id}`, token: "runner-token", address: "https://g", labels: ["ubuntu-latest:docker://node:20"], ephemeral: true },
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
    it(`Pod, Secret and VMI of ${id} validate, with and without the README's templates`, async () => {
      const names = await objectNames("gdr", id);
      const r = request(id);
      expect(errorsOf(pod, podManifest(names, r, { image: DEFAULT_RUNNER_IMAGE, template: undefined }))).toEqual([]);
      expect(errorsOf(pod, podManifest(names, r, { image: DEFAULT_RUNNER_IMAGE, template: dind }))).toEqual([]);
      expect(errorsOf(secret, runnerSecret(names, r))).toEqual([]);
      expect(errorsOf(secret, runnerSecret(names, r, { userdata: cloudInit(r) }))).toEqual([]);
      const template = { spec: { domain: { resources: { requests: { memory: "8Gi" } } } } };
      expect(errorsOf(vmi, vmiManifest(names, r, { image: "registry.example.org/runner-vm:1", template }))).toEqual([]);
    });
  }
});

describe("Gitea REST calls against Gitea's own API description", () => {
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
      return Response.json({ total_count: 0, runners: [] });
    }) as typeof fetch;
    for (const scope of ["admin", "org:acme", "repo:acme/widgets"]) {
      const cfg = loadConfig({ ...giteaTestEnv("ws://x:1", "http://b", "https://git.example.com"), GITEA_URL: "https://git.example.com", GITEA_SCOPE: scope }).gitea!;
      const client = createGiteaClient(cfg, 1_000, fakeFetch);
      await client.registrationToken();
      await client.listQueuedJobs(1, 50);
      await client.listRunners(1, 50);
      await client.deleteRunner(12);
      await client.getJob("acme/widgets", 1187);
    }
    expect(calls).toHaveLength(15);
    const rest = calls.map((c) => c.replace(" /api/v1/", " /"));
    for (const [version, doc] of Object.entries(gitea)) {
      for (const call of rest) {
        const [method, path] = call.split(" ") as [string, string];
        expect(operation(doc, method, path), `${call} in Gitea ${version}`).toBe(true);
      }
    }
  });
});
