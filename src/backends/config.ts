// Which driver serves each backend, and its settings. Part of loadConfig; kept apart so that the
// driver rules live next to the drivers.
import type { Backend } from "../nats/names.ts";

/** The runner image of the kubernetes driver (RUNNER_IMAGE); a short name, resolved by the cluster. */
export const DEFAULT_RUNNER_IMAGE = "gitea/act_runner:latest";

export const DRIVERS = ["http", "kubernetes", "kubevirt"] as const;
export type DriverName = (typeof DRIVERS)[number];

export type BackendConfig = {
  backend: Backend;
  capacity: number;
  batchSize: number;
} & (
  | { driver: "http"; url: string; token: string | undefined }
  /** `template`: a named backend's own, in place of POD_TEMPLATE or VM_TEMPLATE. */
  | { driver: "kubernetes" | "kubevirt"; template?: Record<string, unknown> | undefined }
);

/** Connection and templates shared by the kubernetes and kubevirt drivers. */
export interface KubernetesConfig {
  url: string;
  token: string;
  namespace: string;
  runnerImage: string;
  vmImage: string | undefined;
  podTemplate: unknown;
  vmTemplate: unknown;
}

export interface BackendEnv {
  backend: Backend;
  capacity: number;
  template?: Record<string, unknown> | undefined;
  /** Its index in BACKENDS, for a named backend: problems name that entry's fields. */
  named?: number | undefined;
  batchSize: number | undefined;
  driver: DriverName;
  url: string | undefined;
  token: string | undefined;
}

export interface KubernetesEnv {
  K8S_API_URL?: string | undefined;
  K8S_TOKEN?: string | undefined;
  K8S_NAMESPACE: string;
  RUNNER_IMAGE: string;
  RUNNER_VM_IMAGE?: string | undefined;
  POD_TEMPLATE?: string | undefined;
  VM_TEMPLATE?: string | undefined;
}

export function parseBackends(
  entries: BackendEnv[],
  k8s: KubernetesEnv,
  hasGitea: boolean,
  problems: string[],
): { backends: BackendConfig[]; kubernetes: KubernetesConfig | undefined } {
  const backends: BackendConfig[] = [];
  for (const b of entries) {
    if (b.capacity === 0) continue;
    const prefix = b.backend.toUpperCase();
    const driverVar = b.named === undefined ? `${prefix}_DRIVER=${b.driver}` : `BACKENDS[${b.named}] (backend ${b.backend}, driver ${b.driver})`;
    const common = { backend: b.backend, capacity: b.capacity, batchSize: b.batchSize ?? b.capacity };
    if (b.driver === "http") {
      if (!b.url)
        problems.push(
          b.named === undefined
            ? `${prefix}_BACKEND_URL is required while CAPACITY_${prefix} > 0 and ${prefix}_DRIVER=http (set CAPACITY_${prefix}=0 to disable the ${b.backend} backend)`
            : `BACKENDS[${b.named}]["url"] is required with the http driver (backend ${b.backend})`,
        );
      else backends.push({ ...common, driver: "http", url: b.url, token: b.token });
      continue;
    }
    if (!hasGitea) problems.push(`${driverVar} needs the Gitea integration (GITEA_URL): runners start from a registered identity`);
    if (b.driver === "kubevirt" && !k8s.RUNNER_VM_IMAGE) problems.push(`RUNNER_VM_IMAGE is required with ${driverVar}`);
    backends.push({ ...common, driver: b.driver, ...(b.template ? { template: b.template } : {}) });
  }
  // A template is refused when invalid, and when no backend would read it: never silently dropped.
  const podTemplate = parseTemplate("POD_TEMPLATE", k8s.POD_TEMPLATE, "kubernetes", backends, problems);
  const vmTemplate = parseTemplate("VM_TEMPLATE", k8s.VM_TEMPLATE, "kubevirt", backends, problems);
  if (!backends.some((b) => b.driver !== "http")) return { backends, kubernetes: undefined };
  if (!k8s.K8S_API_URL) problems.push("K8S_API_URL is required with the kubernetes or kubevirt driver");
  if (!k8s.K8S_TOKEN) problems.push("K8S_TOKEN is required with the kubernetes or kubevirt driver (a secret: wrangler secret put)");
  if (!k8s.K8S_API_URL || !k8s.K8S_TOKEN) return { backends, kubernetes: undefined };
  return {
    backends,
    kubernetes: {
      url: k8s.K8S_API_URL,
      token: k8s.K8S_TOKEN,
      namespace: k8s.K8S_NAMESPACE,
      runnerImage: k8s.RUNNER_IMAGE,
      vmImage: k8s.RUNNER_VM_IMAGE,
      podTemplate,
      vmTemplate,
    },
  };
}

function parseTemplate(name: string, text: string | undefined, driver: DriverName, backends: BackendConfig[], problems: string[]): unknown {
  if (!text) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    value = undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    problems.push(`${name} must be a JSON object (a partial ${driver === "kubernetes" ? "Pod" : "VirtualMachineInstance"})`);
    return undefined;
  }
  if (!backends.some((b) => b.driver === driver && !("template" in b && b.template)))
    problems.push(`${name} is set, but no enabled backend uses the ${driver} driver (POD_DRIVER or VM_DRIVER), so it would be ignored: unset it`);
  return value;
}
