// Builds the driver configured for a backend.
import type { Config } from "./config.ts";
import type { BackendConfig } from "../backends/config.ts";
import { createHttpBackend } from "../backends/http.ts";
import { createKubeApi } from "../backends/kubernetes/api.ts";
import { createPodDriver } from "../backends/kubernetes/pod.ts";
import { createVmDriver } from "../backends/kubevirt.ts";
import type { RunnerBackend } from "../domain/backend.ts";

export function createRunnerBackend(config: Config, b: BackendConfig, doFetch?: typeof fetch): RunnerBackend {
  if (b.driver === "http") return createHttpBackend({ url: b.url, token: b.token, ...(doFetch ? { fetch: doFetch } : {}) });
  const k8s = config.kubernetes!;
  const api = createKubeApi({ url: k8s.url, token: k8s.token, ...(doFetch ? { fetch: doFetch } : {}) });
  // The forge names the runners; either forge's RUNNER_NAME_PREFIX names every object of theirs.
  const common = { api, namespace: k8s.namespace, prefix: config.gitea?.runnerNamePrefix ?? config.forgejo?.runnerNamePrefix ?? "gdr" };
  if (b.driver === "kubernetes") return createPodDriver({ ...common, image: k8s.runnerImage, template: b.template ?? k8s.podTemplate });
  return createVmDriver({ ...common, image: k8s.vmImage!, template: b.template ?? k8s.vmTemplate });
}
