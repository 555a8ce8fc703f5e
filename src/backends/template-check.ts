// The workload a driver would make, built the way it builds it, and checked against Kubernetes' and
// KubeVirt's own API descriptions at load: the real API server would refuse it at the first job.
import { checkPod, checkVmi } from "./kubernetes/schema-check.ts";
import { podManifest } from "./kubernetes/pod.ts";
import { vmiManifest } from "./kubevirt.ts";
import type { Backend } from "../nats/names.ts";
import type { RunnerRequest } from "../domain/backend.ts";
import type { BackendConfig, KubernetesConfig } from "./config.ts";

/** What a sample runner request carries of a pool: its name, labels and template. */
export interface SamplePool {
  name: string;
  labels: string[];
  template?: Record<string, unknown> | undefined;
}

/** The manifest `driver` makes for a sample request, with its checker; undefined without RUNNER_VM_IMAGE. */
export function sampleManifest(driver: "kubernetes" | "kubevirt", backend: Backend, k8s: KubernetesConfig, pool?: SamplePool, own?: Record<string, unknown>) {
  const names = { name: "gdr-template-check", label: "template-check" };
  const request = sampleRequest(backend, pool);
  if (driver === "kubernetes")
    return { kind: "Pod", check: checkPod, manifest: podManifest(names, request, { image: k8s.runnerImage, template: own ?? k8s.podTemplate }) };
  if (!k8s.vmImage) return undefined;
  return { kind: "VirtualMachineInstance", check: checkVmi, manifest: vmiManifest(names, request, { image: k8s.vmImage, template: own ?? k8s.vmTemplate }) };
}

/** POD_TEMPLATE and VM_TEMPLATE, each over its driver's default, for every backend that uses it. */
export function checkTemplates(backends: readonly BackendConfig[], k8s: KubernetesConfig, problems: string[]): void {
  for (const b of backends) {
    if (b.driver === "http") continue;
    const variable = b.template ? `BACKENDS' template of backend ${b.backend}` : b.driver === "kubernetes" ? "POD_TEMPLATE" : "VM_TEMPLATE";
    if ((b.template ?? (b.driver === "kubernetes" ? k8s.podTemplate : k8s.vmTemplate)) === undefined) continue;
    const made = sampleManifest(b.driver, b.backend, k8s, undefined, b.template);
    const found = made ? made.check(made.manifest) : [];
    if (found.length && made) problems.push(`${variable} would make an invalid ${made.kind} (${b.backend} backend): ${found.join("; ")}`);
  }
}

function sampleRequest(backend: Backend, pool?: SamplePool): RunnerRequest {
  const id = "template-check";
  const url = `https://dispatcher.invalid/v1/assignments/${id}`;
  return {
    assignment: {
      version: 1,
      id,
      backend,
      workload: `spiffe://check.invalid/${id}`,
      labels: pool?.labels ?? ["ubuntu-latest"],
      ...(pool ? { pools: [pool.name] } : {}),
      createdAt: "2026-01-01T00:00:00Z",
    },
    claimToken: "x",
    claimUrl: `${url}/claim`,
    completeUrl: `${url}/complete`,
    ...(pool ? { pool: { name: pool.name, ...(pool.template ? { template: pool.template } : {}) } } : {}),
    // Any forge's launch: the template is checked against the workload the driver makes around it.
    launch: { files: { "claim-token": "x" }, mountPath: "/etc/runner", command: ["/bin/sh", "-c", "true"], userData: "#cloud-config\n" },
  };
}
