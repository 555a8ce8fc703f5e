// What RUNNER_POOLS must agree with in the rest of the configuration: each pool's backend is
// enabled and has room for its warm runners, and its template merged over the backend's default
// makes a Pod or VirtualMachineInstance that Kubernetes' and KubeVirt's own API descriptions
// accept (the real API server would refuse it at the first job otherwise).
import type { BackendConfig, KubernetesConfig } from "../backends/config.ts";
import { sampleManifest } from "../backends/template-check.ts";
import type { Pool } from "./config.ts";
import { whyDisabled } from "../model/states.ts";

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
      problems.push(`${at("backend")} is ${pool.backend}, which is disabled (${whyDisabled(pool.backend)})${named}`);
      return;
    }
    const mostIdle = Math.max(pool.minIdle, ...(pool.schedule ?? []).map((w) => w.minIdle));
    if (mostIdle > b.capacity)
      problems.push(`${at("minIdle")} asks for ${mostIdle} warm runners, more than CAPACITY_${pool.backend.toUpperCase()} (${b.capacity})${named}`);
    if (!pool.template || !k8s || b.driver === "http") return;
    const made = sampleManifest(b.driver, pool.backend, k8s, pool, b.template);
    if (!made) return; // RUNNER_VM_IMAGE is missing: reported with the driver settings
    const found = made.check(made.manifest);
    if (found.length) problems.push(`${at("template")} would make an invalid ${made.kind}: ${found.join("; ")}${named}`);
  });
}
