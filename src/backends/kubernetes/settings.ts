// The connection shared by the kubernetes and kubevirt drivers (K8S_API_URL, K8S_TOKEN, the
// namespace and images), read once when an enabled backend uses either.
import type { BackendConfig, DriverEnv } from "../driver-module.ts";

/**
 * The runner image of the kubernetes driver (RUNNER_IMAGE); a short name, resolved by the cluster.
 * Gitea Runner 2.x, pinned: gitea/act_runner stopped at 0.6.1 when the project was renamed.
 */
export const DEFAULT_RUNNER_IMAGE = "gitea/runner:2.0.0";

export interface KubernetesConfig {
  url: string;
  token: string;
  namespace: string;
  runnerImage: string;
  vmImage: string | undefined;
  podTemplate: unknown;
  vmTemplate: unknown;
}

const str = (v: unknown) => (typeof v === "string" && v.trim() ? v : undefined);

export function loadKubernetes(env: DriverEnv, using: readonly BackendConfig[], problems: string[]): KubernetesConfig | undefined {
  const vmImage = str(env.RUNNER_VM_IMAGE);
  for (const b of using) if (b.driver === "kubevirt" && !vmImage) problems.push(`RUNNER_VM_IMAGE is required with ${driverVariable(b)}`);
  const url = str(env.K8S_API_URL);
  const token = str(env.K8S_TOKEN);
  if (!url) problems.push("K8S_API_URL is required with the kubernetes or kubevirt driver");
  if (!token) problems.push("K8S_TOKEN is required with the kubernetes or kubevirt driver (a secret: wrangler secret put)");
  if (!url || !token) return undefined;
  return {
    url,
    token,
    namespace: str(env.K8S_NAMESPACE) ?? "default",
    runnerImage: str(env.RUNNER_IMAGE) ?? DEFAULT_RUNNER_IMAGE,
    vmImage,
    podTemplate: env.POD_TEMPLATE,
    vmTemplate: env.VM_TEMPLATE,
  };
}

/** How a problem names the setting that chose a backend's driver. */
export function driverVariable(b: BackendConfig & { named?: number | undefined }): string {
  return b.named === undefined ? `${b.backend.toUpperCase()}_DRIVER=${b.driver}` : `BACKENDS[${b.named}] (backend ${b.backend}, driver ${b.driver})`;
}
