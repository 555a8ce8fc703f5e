// What RUNNER_POOLS must agree with in the rest of the configuration: each pool's backend is
// enabled and has room for its warm runners, and its template merged over the backend's default
// makes a Pod or VirtualMachineInstance that Kubernetes' and KubeVirt's own API descriptions
// accept (the real API server would refuse it at the first job otherwise).
import type { BackendConfig, KubernetesConfig } from "../backends/config.ts";
import { checkPod, checkVmi } from "../backends/kubernetes/schema-check.ts";
import { podManifest } from "../backends/kubernetes/pod.ts";
import { vmiManifest } from "../backends/kubevirt.ts";
import type { RunnerRequest } from "../domain/backend.ts";
import type { Pool } from "./config.ts";

export function checkPools(
  pools: readonly Pool[],
  variable: string,
  backends: readonly BackendConfig[],
  k8s: KubernetesConfig | undefined,
  problems: string[],
): void {
  pools.forEach((pool, i) => {
    const at = (field: string) => `${variable}[${i}][${JSON.stringify(field)}]`;
    const named = ` (pool ${JSON.stringify(pool.name)})`;
    const b = backends.find((c) => c.backend === pool.backend);
    if (!b) {
      problems.push(`${at("backend")} is ${pool.backend}, which is disabled (CAPACITY_${pool.backend.toUpperCase()}=0)${named}`);
      return;
    }
    const mostIdle = Math.max(pool.minIdle, ...(pool.schedule ?? []).map((w) => w.minIdle));
    if (mostIdle > b.capacity)
      problems.push(`${at("minIdle")} asks for ${mostIdle} warm runners, more than CAPACITY_${pool.backend.toUpperCase()} (${b.capacity})${named}`);
    if (!pool.template || !k8s || b.driver === "http") return;
    const made = manifestOf(pool, b.driver, k8s);
    if (!made) return; // RUNNER_VM_IMAGE is missing: reported with the driver settings
    const found = made.check(made.manifest);
    if (found.length) problems.push(`${at("template")} would make an invalid ${made.kind}: ${found.join("; ")}${named}`);
  });
}

/** The workload a pool's runner would get, built the way the driver builds it. */
function manifestOf(pool: Pool, driver: "kubernetes" | "kubevirt", k8s: KubernetesConfig) {
  const names = { name: "gdr-template-check", label: "template-check" };
  const request = sampleRequest(pool);
  if (driver === "kubernetes")
    return { kind: "Pod", check: checkPod, manifest: podManifest(names, request, { image: k8s.runnerImage, template: k8s.podTemplate }) };
  if (!k8s.vmImage) return undefined;
  return { kind: "VirtualMachineInstance", check: checkVmi, manifest: vmiManifest(names, request, { image: k8s.vmImage, template: k8s.vmTemplate }) };
}

function sampleRequest(pool: Pool): RunnerRequest {
  const id = "template-check";
  const url = `https://dispatcher.invalid/v1/assignments/${id}`;
  return {
    assignment: {
      version: 1,
      id,
      backend: pool.backend,
      workload: `spiffe://check.invalid/${id}`,
      labels: pool.labels,
      pools: [pool.name],
      createdAt: "2026-01-01T00:00:00Z",
    },
    claimToken: "x",
    claimUrl: `${url}/claim`,
    completeUrl: `${url}/complete`,
    pool: { name: pool.name, ...(pool.template ? { template: pool.template } : {}) },
    // Any forge's launch: the template is checked against the workload the driver makes around it.
    launch: { files: { "claim-token": "x" }, mountPath: "/etc/runner", command: ["/bin/sh", "-c", "true"], userData: "#cloud-config\n" },
  };
}
