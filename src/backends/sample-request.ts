// A runner request as a driver would be given one, for checking at load what it would send.
import type { RunnerRequest } from "../domain/backend.ts";
import type { Backend } from "../nats/names.ts";

/** What a sample runner request carries of a pool: its name, labels and template. */
export interface SamplePool {
  name: string;
  labels: string[];
  template?: Record<string, unknown> | undefined;
}

export function sampleRequest(backend: Backend, pool?: SamplePool): RunnerRequest {
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
    bootstrapUrl: `${url}/bootstrap`,
    ...(pool ? { pool: { name: pool.name, ...(pool.template ? { template: pool.template } : {}) } } : {}),
    // Any forge's launch: the template is checked against the workload the driver makes around it.
    launch: { files: { "claim-token": "x" }, mountPath: "/etc/runner", command: ["/bin/sh", "-c", "true"], userData: "#cloud-config\n" },
  };
}
